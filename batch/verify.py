"""Stream/batch equivalence: each table compared with a batch recomputation of its flow over the same log.

For a flow F and its table T:
- `full`: F run once over its whole input. Nothing is late in one batch, so it counts every event.
- If T equals `full` row by row, T is clean.
- Otherwise `without_late`: F run once over its input minus the events F sent to `late_arrivals`
  (not yet folded in by a backfill). A row where T differs from `full` but equals `without_late` is
  *explained*: the late arrivals account for it exactly. A row where T differs from `without_late`
  is a real discrepancy, reported with both versions of the row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.batch.compare import TableDiff, diff_tables, in_days, plain
from lakehouse.batch.lineage import batch_flows
from lakehouse.batch.parallel import each_flow
from lakehouse.batch.recompute import Inputs, Shadow, recompute, unreconciled_late
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import has_delta_log

log = logging.getLogger(__name__)


@dataclass
class Verdict:
    """What verify found for one table."""

    table: str
    flow: str
    status: str = "clean"             # clean | explained | discrepant | not built
    diff: TableDiff | None = None     # the stream's table against the full recomputation
    explained: int = 0                # differing rows that the flow's late arrivals account for
    discrepancies: TableDiff | None = None   # the stream's table against the recomputation without late arrivals
    late_events: int = 0              # unreconciled late arrivals of the flow in the range
    late_samples: list[dict[str, Any]] = field(default_factory=list)
    explained_samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def real(self) -> int:
        return self.discrepancies.differences if self.discrepancies else 0


def _late_events(spark: SparkSession, flow: Flow, ctx: FlowContext, days: tuple[date, date] | None,
                 limit: int) -> tuple[int, list[dict[str, Any]]]:
    late = unreconciled_late(spark, ctx.lake_root, flow)
    if late is None:
        return 0, []
    if days is not None:
        late = late.where(F.to_date("event_time").between(F.lit(days[0]), F.lit(days[1])))
    rows = late.select("event_id", "event_time", "lateness_ms", "topic", "partition", "offset").orderBy("event_time")
    return late.count(), [{k: plain(v) for k, v in r.asDict().items()} for r in rows.limit(limit).collect()]


def verify_flow(spark: SparkSession, flow: Flow, ctx: FlowContext, *, days: tuple[date, date] | None = None,
                limit: int = 20, full: DataFrame | None = None) -> Verdict:
    """Compare the flow's table with batch recomputations of the flow over the same input (see the module doc).

    `full`: the flow's recomputation over its whole input when the caller has just made it (a backfill), so
    it is not made twice.
    """
    verdict = Verdict(flow.target.name, flow.name)
    path = flow.target.path(ctx.lake_root)
    if not has_delta_log(spark, path):
        verdict.status = "not built"
        return verdict
    live = in_days(spark.read.format("delta").load(path), flow.target, days)
    shadow = Shadow(spark, ctx, f"verify-{flow.name}") if full is None else None
    try:
        if shadow is not None:
            full = recompute(spark, flow, shadow)
        verdict.diff, diffs = diff_tables(live, in_days(full, flow.target, days) if full is not None else None,
                                          flow.target, limit=limit)
        if not verdict.diff.differences:
            return verdict
        verdict.late_events, verdict.late_samples = _late_events(spark, flow, ctx, days, limit)
        strict = Shadow(spark, ctx, f"verify-{flow.name}-without-late")
        try:
            without_late = recompute(spark, flow, strict, Inputs(without_late=True))
            verdict.discrepancies, real = diff_tables(
                live, in_days(without_late, flow.target, days) if without_late is not None else None,
                flow.target, limit=limit)
            keys = list(flow.target.keys)
            explained = diffs.join(real.select(*keys), [diffs[k].eqNullSafe(real[k]) for k in keys], "left_anti") \
                if real is not None else diffs
            verdict.explained = explained.count()
            verdict.explained_samples = [
                {"key": {k: plain(r[k]) for k in keys}, "kind": r["kind"], "columns": list(r["columns"] or [])}
                for r in explained.orderBy(*keys).limit(limit).collect()
            ]
        finally:
            strict.drop()
        verdict.status = "discrepant" if verdict.real else "explained"
        return verdict
    finally:
        if shadow is not None:
            shadow.drop()


def verified_flows(tables: Iterable[str] | None = None, flows: Iterable[Flow] | None = None) -> list[Flow]:
    """The flows `verify` checks: those of the named tables (not their downstream), or all after bronze."""
    return [f for f in batch_flows(list(tables or []), flows) if not tables or f.target.name in set(tables)]


def verify(spark: SparkSession, ctx: FlowContext, tables: Iterable[str] | None = None, *,
           days: tuple[date, date] | None = None, flows: Iterable[Flow] | None = None, parallel: int = 1) -> list[Verdict]:
    """Verify each named table (all after bronze by default) against the batch lane; one Verdict per table.

    `parallel`: tables verified at once (each reads the live lake and writes a shadow of its own).
    """
    chosen = verified_flows(tables, flows)
    verdicts = {}
    for flow, verdict in each_flow(spark, chosen, ctx, lambda session, f: verify_flow(session, f, ctx, days=days),
                                   parallel=parallel, independent=True):
        log.info("verify %s: %s (%d differing rows, %d explained by late arrivals, %d real)", verdict.table,
                 verdict.status, verdict.diff.differences if verdict.diff else 0, verdict.explained, verdict.real)
        verdicts[flow.name] = verdict
    return [verdicts[flow.name] for flow in chosen]


def describe(verdict: Verdict) -> list[str]:
    """Lines a person reads: what differs, what explains it, which rows are real discrepancies."""
    lines = []
    if verdict.status in ("clean", "not built"):
        return lines
    if verdict.explained:
        lines.append(f"  {verdict.explained} row(s) differ because of {verdict.late_events} late arrival(s) of flow "
                     f"{verdict.flow} (the batch without them reproduces the stream's rows exactly):")
        lines += [f"    {s['kind']} {s['key']}" + (f" columns {', '.join(s['columns'])}" if s["columns"] else "")
                  for s in verdict.explained_samples]
        lines += [f"    late: event {e['event_id']} at {e['event_time']}, {e['lateness_ms']} ms behind, "
                  f"{e['topic']}/{e['partition']}@{e['offset']}" for e in verdict.late_samples]
    if verdict.real and verdict.discrepancies:
        lines.append(f"  {verdict.real} real discrepanc{'y' if verdict.real == 1 else 'ies'} (no late arrival explains them):")
        for s in verdict.discrepancies.samples:
            lines.append(f"    {s['kind']} {s['key']}" + (f" columns {', '.join(s['columns'])}" if s["columns"] else ""))
            lines.append(f"      stream: {s['stream']}")
            lines.append(f"      batch:  {s['batch']}")
        if verdict.discrepancies.duplicate_keys:
            lines.append(f"    {verdict.discrepancies.duplicate_keys} key(s) occur more than once in the stream's table")
    return lines
