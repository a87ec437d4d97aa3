"""Backfill: the daily partitions of a date range recomputed by the batch lane and put in place of the stream's.

For each flow, in run order (a table before the tables that read it): the flow's stream first catches
up, so that the stream and the batch have read the same log; the flow is recomputed over its whole
bounded input into a shadow lake (`batch.recompute`); the live table's rows in the range are compared
with the shadow's, and only if they differ, replaced by them in one Delta commit (`replaceWhere` on
the event date; a dimension, which has no event date, is replaced whole). Running it twice changes
nothing the second time. The late arrivals of the flow in the range are then marked reconciled: the
table now counts them.

Streams that read a rewritten table skip the rewrite (`skipChangeCommits`): the backfill recomputes
their tables itself, from the rewritten input, because every table downstream of a backfilled one is
backfilled with it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Iterable

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.batch.compare import day_of, days_predicate, diff_tables, in_days
from lakehouse.batch.lineage import batch_flows
from lakehouse.batch.parallel import each_flow
from lakehouse.batch.recompute import Shadow, recompute
from lakehouse.batch.verify import Verdict, verify_flow
from lakehouse.schemas.tables import LATE_ARRIVALS
from lakehouse.streaming.context import BatchScope, FlowContext, offsets_covered
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.runner import run_flow, table_version

log = logging.getLogger(__name__)


@dataclass
class TableChange:
    """What a backfill did to one table."""

    table: str
    flow: str
    days: str
    rows_before: int = 0          # in the range, before
    rows_after: int = 0           # in the range, after
    added: int = 0
    changed: int = 0
    removed: int = 0
    late_absorbed: int = 0        # late arrivals of the flow in the range, now counted
    version: int | None = None    # the table's Delta version afterwards
    rewritten: bool = False       # False: the table already equalled the recomputation; nothing written
    duration_s: float = 0.0
    verdict: Verdict | None = None   # asked for: the whole table afterwards against the same recomputation


def backfill_flow(spark: SparkSession, flow: Flow, ctx: FlowContext, days: tuple[date, date], *,
                  run_id: str = "", catch_up: bool = True, verify: bool = False) -> TableChange:
    """Recompute `flow` over its bounded input and replace its table's rows in `days` where they differ.

    `verify`: also compare the whole table afterwards with that recomputation (`batch.verify`), which is
    what a matches_batch check in the same run would otherwise recompute the flow for.
    """
    started = time.monotonic()
    change = TableChange(flow.target.name, flow.name, f"{days[0]}..{days[1]}")
    if catch_up:
        run_flow(spark, flow, ctx)
    path = flow.target.path(ctx.lake_root)
    shadow = Shadow(spark, ctx, f"backfill-{flow.name}")
    try:
        full = recompute(spark, flow, shadow)
        if full is None:
            change.version = table_version(spark, path)
            log.info("backfill %s %s: no input yet, nothing to recompute", change.table, change.days)
            return change
        fresh = in_days(full, flow.target, days)
        if ctx.quality is not None:
            validate_partitions(ctx, flow, fresh)
        live = in_days(spark.read.format("delta").load(path), flow.target, days) \
            if has_delta_log(spark, path) else None
        diff, _ = diff_tables(live, fresh, flow.target, limit=0)
        change.rows_before, change.rows_after = diff.stream_rows, diff.batch_rows
        change.added, change.removed, change.changed = diff.only_batch, diff.only_stream, diff.changed
        if diff.differences:
            _replace(fresh, flow, path, days, run_id)
            change.rewritten = True
        change.late_absorbed = mark_reconciled(spark, flow, ctx, days, run_id)
        change.version = table_version(spark, path)
        if verify:
            change.verdict = verify_flow(spark, flow, ctx, full=full)
    finally:
        shadow.drop()
        if ctx.quality is not None:
            ctx.quality.flush(spark)
    change.duration_s = round(time.monotonic() - started, 2)
    log.info("backfill %s %s: +%d ~%d -%d rows, %d late arrivals absorbed, version %s (%.1fs)", change.table,
             change.days, change.added, change.changed, change.removed, change.late_absorbed, change.version,
             change.duration_s)
    return change


def validate_partitions(ctx: FlowContext, flow: Flow, fresh) -> None:
    """Each daily partition the backfill is about to write, checked against the table's suite on its own."""
    day = day_of(flow.target)
    if day is None:     # a dimension: one table, one check
        ctx.quality.validate(flow.target, fresh, BatchScope(flow.name, 0, "backfill", "whole table"))
        return
    for (d,) in fresh.select(day).distinct().orderBy(1).collect():
        rows = fresh.where(day == F.lit(d))
        ctx.quality.validate(flow.target, rows, BatchScope(flow.name, 0, "backfill", d.isoformat(), offsets_covered(rows)))


def _replace(fresh, flow: Flow, path: str, days: tuple[date, date], run_id: str) -> None:
    """One Delta commit that puts `fresh` in place of the table's rows in `days` (or of the whole table)."""
    note = json.dumps({"backfill": run_id, "flow": flow.name, "days": [days[0].isoformat(), days[1].isoformat()]})
    writer = fresh.write.format("delta").mode("overwrite").option("userMetadata", note)
    predicate = days_predicate(flow.target, days)
    if predicate is not None:
        writer = writer.option("replaceWhere", predicate)
    if not has_delta_log(fresh.sparkSession, path) and flow.target.partition_by:
        writer = writer.partitionBy(*flow.target.partition_by)
    writer.save(path)


def mark_reconciled(spark: SparkSession, flow: Flow, ctx: FlowContext, days: tuple[date, date], run_id: str) -> int:
    """Mark the flow's late arrivals in `days` as folded in by this backfill; returns how many."""
    with _LATE_ARRIVALS_UPDATE:
        return _mark_reconciled(spark, flow, ctx, days, run_id)


# Flows backfilled at once (batch/parallel.py) update the one late_arrivals table; two UPDATEs that rewrite
# the same files conflict in Delta, so this process makes them one at a time.
_LATE_ARRIVALS_UPDATE = threading.Lock()


def _mark_reconciled(spark: SparkSession, flow: Flow, ctx: FlowContext, days: tuple[date, date], run_id: str) -> int:
    path = LATE_ARRIVALS.path(ctx.lake_root)
    if not has_delta_log(spark, path):
        return 0
    table = DeltaTable.forPath(spark, path)
    if "reconciled_at" not in table.toDF().columns:
        # Nobody streams from late_arrivals, so adding columns stops no reader; appends without them get nulls.
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (reconciled_at TIMESTAMP, reconciled_by STRING)")
        table = DeltaTable.forPath(spark, path)  # the object above still has the old schema
    condition = (
        (F.col("flow") == flow.name) & F.col("reconciled_at").isNull()
        & F.to_date("event_time").between(F.lit(days[0]), F.lit(days[1]))
    )
    count = table.toDF().where(condition).count()
    if count:
        table.update(condition, {"reconciled_at": F.lit(datetime.now(timezone.utc)).cast("timestamp"),
                                 "reconciled_by": F.lit(run_id or "backfill")})
    return count


def backfill(spark: SparkSession, ctx: FlowContext, days: tuple[date, date], tables: Iterable[str] | None = None, *,
             run_id: str = "", flows: Iterable[Flow] | None = None, catch_up: bool = True,
             parallel: int = 1, verify: bool = False) -> list[TableChange]:
    """Backfill `days` of the named tables and everything downstream of them (every table after bronze by default).

    `parallel`: flows backfilled at once, each after those whose tables it reads. `verify`: each change carries
    its table's verdict afterwards (`backfill_flow`), without recomputing the flow a second time.
    """
    chosen = batch_flows(list(tables or []), flows)
    # A flow starts when the flows whose tables it reads are backfilled: it recomputes from their new rows.
    changes = {flow.name: change for flow, change in each_flow(
        spark, chosen, ctx, lambda session, flow: backfill_flow(session, flow, ctx, days, run_id=run_id, catch_up=catch_up,
                                           verify=verify),
        parallel=parallel)}
    return [changes[flow.name] for flow in chosen]
