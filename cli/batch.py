"""The batch lane's commands: `lakehouse backfill`, `lakehouse verify`, `lakehouse replay`."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from datetime import date

from lakehouse.infra.settings import Settings

log = logging.getLogger("lakehouse")


def _instant(text: str):
    from lakehouse.cli.main import _instant as parse

    return parse(text)


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date such as 2026-11-22") from None


class BadRange(ValueError):
    """A date range whose end comes before its start."""


def _days(args: argparse.Namespace) -> tuple[date, date] | None:
    if args.start is None and args.end is None:
        return None
    start, end = args.start or args.end, args.end or args.start
    if end < start:
        raise BadRange(f"--to {end} comes before --from {start}; give the first day first.")
    return start, end


class Bar(logging.Handler):
    """A progress bar on stderr, moved on by one per-table log record each; it stands in for the console
    line of those records (the log file still gets them)."""

    def __init__(self, logger: str, total: int, width: int = 24):
        super().__init__(logging.INFO)
        self.logger, self.total, self.done, self.width = logging.getLogger(logger), total, 0, width
        self.consoles = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]

    def emit(self, record: logging.LogRecord) -> None:
        self.done = min(self.total, self.done + 1)
        filled = self.width * self.done // max(self.total, 1)
        print(f"[{'#' * filled}{'-' * (self.width - filled)}] {self.done}/{self.total} {record.getMessage()}",
              file=sys.stderr, flush=True)

    def _shown(self, record: logging.LogRecord) -> bool:
        return not (record.name == self.logger.name and record.levelno == logging.INFO)

    def __enter__(self) -> Bar:
        self.logger.addHandler(self)
        for console in self.consoles:
            console.addFilter(self._shown)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        for console in self.consoles:
            console.removeFilter(self._shown)


def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.batch.lineage import batch_flows
    from lakehouse.orchestration import runs
    from lakehouse.orchestration.location import BACKFILL_JOB
    from lakehouse.orchestration.partitions import is_partitioned
    from lakehouse.serving.sql import format_table

    days = _days(args)
    assert days is not None
    flows = [f for f in batch_flows(args.table or None) if is_partitioned(f.target)]
    names = [f.asset_name for f in flows]
    command = ["lakehouse", "backfill", "--from", days[0].isoformat(), "--to", days[1].isoformat(),
               *[word for table in args.table or () for word in ("--table", table)]]
    print(f"Backfilling {days[0]}..{days[1]} of {len(names)} tables: {', '.join(names)}", file=sys.stderr)
    with Bar("lakehouse.batch.backfill", len(names)):
        result = runs.run_job(settings, BACKFILL_JOB, selection=names, partition_range=(days[0].isoformat(), days[1].isoformat()),
                              tags={runs.COMMAND_TAG: shlex.join(command)})
    meta = runs.materialized_metadata(result)
    rows = [(n, m.get("rows_added"), m.get("rows_changed"), m.get("rows_removed"), m.get("late_arrivals_absorbed"),
             m.get("delta_version"), "yes" if m.get("rewritten") else "no") for n, m in meta.items()]
    print(format_table(("table", "added", "changed", "removed", "late absorbed", "version", "rewritten"), rows))
    print(f"Run {result.run_id} (job {BACKFILL_JOB}, partitions {days[0]}..{days[1]}); `lakehouse ui` shows it.")
    return runs.exit_status(result)


def _flow_context(settings: Settings):
    """The flows' context as the Dagster resources build it from the settings."""
    from lakehouse.orchestration.resources import build_resources

    resources = build_resources(settings)
    return resources["lake"].flow_context(resources["kafka"])


def cmd_verify(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.batch.verify import describe, verified_flows, verify
    from lakehouse.infra.spark import get_spark
    from lakehouse.serving.sql import format_table

    ctx = _flow_context(settings)
    spark = get_spark(settings, "lakehouse-verify")
    with Bar("lakehouse.batch.verify", len(verified_flows(args.table or None))):
        verdicts = verify(spark, ctx, args.table or None, days=_days(args), parallel=settings.catch_up_parallel)
    rows = [(v.table, v.status, v.diff.differences if v.diff else 0, v.explained, v.real, v.late_events)
            for v in verdicts]
    print(format_table(("table", "status", "differing rows", "explained by late arrivals", "real discrepancies",
                        "late arrivals"), rows))
    for v in verdicts:
        if lines := describe(v):
            print(f"{v.table}:")
            print("\n".join(lines))
    real = sum(v.real for v in verdicts)
    explained = sum(v.explained for v in verdicts)
    print(f"{real} real discrepancies; {explained} differing rows explained by late arrivals"
          + (" (a backfill of their days folds them in)." if explained else "."))
    return 1 if real else 0


def _offsets(text: str) -> dict[int, int]:
    """`0=120,1=98`: partition=offset pairs."""
    try:
        pairs = {int(p): int(o) for p, o in (item.split("=") for item in text.split(",") if item.strip())}
    except ValueError:
        pairs = {}
    if not pairs or any(p < 0 or o < 0 for p, o in pairs.items()):
        raise argparse.ArgumentTypeError(f"{text!r} is not partition=offset pairs such as 0=120,1=98")
    return pairs


def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.batch.lineage import with_downstream
    from lakehouse.batch.replay import StartingPoint, compare, replay, swap
    from lakehouse.infra.spark import get_spark
    from lakehouse.serving.sql import format_table

    start = StartingPoint(version=args.from_version, timestamp=args.from_timestamp, offsets=args.from_offsets,
                          kafka_timestamp=args.from_kafka_timestamp)
    ctx = _flow_context(settings)
    spark = get_spark(settings, "lakehouse-replay")
    chosen = with_downstream([args.table])
    print(f"Replaying {args.table} and everything downstream ({len(chosen)} tables) from {start.describe()}",
          file=sys.stderr)
    with Bar("lakehouse.batch.replay", len(chosen)):
        shadow, rebuilt = replay(spark, ctx, args.table, start)
    if args.compare or args.swap:
        compare(spark, ctx, shadow, rebuilt)
        rows = [(r.table, r.diff.stream_rows, r.diff.batch_rows, r.diff.only_stream, r.diff.only_batch, r.diff.changed)
                for r in rebuilt if r.diff]
        print(format_table(("table", "live rows", "replayed rows", "only live", "only replayed", "changed"), rows))
        for r in rebuilt:
            for s in (r.diff.samples if r.diff else [])[:5]:
                print(f"  {r.table} {s['kind']} {s['key']}" + (f" columns {', '.join(s['columns'])}" if s["columns"] else ""))
    if args.swap:
        swap(spark, ctx, shadow, rebuilt)
        shadow.drop()
        for r in rebuilt:
            print(f"{r.table}: swapped in at version {r.swapped_version}; its stream resumes after the replay "
                  f"(`lakehouse history {r.table}`; the old rows stay readable with VERSION AS OF).")
    else:
        print(f"Shadow tables are in {shadow.root}; --swap puts them in place.")
    return 0


def cmd_refresh(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.batch.lineage import flow_for
    from lakehouse.batch.refresh import plan, refresh
    from lakehouse.batch.replay import resume_text
    from lakehouse.infra.spark import get_spark
    from lakehouse.serving.sql import format_table

    flow_for(args.table)   # an unknown table is named before Spark starts
    ctx = _flow_context(settings)
    spark = get_spark(settings, "lakehouse-refresh")
    n = len(plan(spark, ctx, args.table, downstream=args.downstream))
    print(f"Refreshing {args.table}{' and everything downstream' if args.downstream else ''} ({n} table"
          f"{'s' if n != 1 else ''}) from the whole of its inputs as they are now", file=sys.stderr)
    with Bar("lakehouse.batch.replay", n):
        done = refresh(spark, ctx, args.table, downstream=args.downstream)
    for name, how in done.changes.items():
        print(f"{name}: {'; '.join(how) if how else 'its definition is unchanged'}")
    rows = [(r.table, r.diff.stream_rows if r.diff else 0, r.rows,
             "-" if done.versions_before.get(r.table) is None else done.versions_before[r.table], r.swapped_version,
             resume_text(r.positions) or "-")
            for r in done.replayed]
    print(format_table(("table", "rows before", "rows after", "version before", "version now", "its stream resumes from"),
                       rows))
    for r in done.replayed:
        old = done.versions_before.get(r.table)
        print(f"{r.table}: rebuilt and swapped in at version {r.swapped_version}; its stream resumes where the rebuild "
              f"ended, on a new checkpoint" + (f" (the old rows stay readable with VERSION AS OF {old})."
                                                if old is not None else "."))
    return 0


def add_batch_commands(sub: argparse._SubParsersAction) -> None:
    """Register backfill, verify and replay on the CLI's subcommand parser."""
    p = sub.add_parser(
        "backfill", help="recompute days of the silver and gold tables with the batch lane and replace what differs",
        description="Runs job `backfill` of the code location over the daily partitions --from..--to (one run for the "
                    "range; `lakehouse ui` shows it). Each table's stream first catches up; then its flow runs once "
                    "over the bounded log with the streaming lane's own transforms, and the partitions whose rows "
                    "differ are replaced in one Delta commit. Tables downstream of a named one are backfilled too. "
                    "Late arrivals of those days are folded in and marked reconciled. Running it twice changes nothing.")
    p.add_argument("--from", dest="start", type=_day, required=True, help="first event date, e.g. 2026-11-20")
    p.add_argument("--to", dest="end", type=_day, required=True, help="last event date (inclusive)")
    p.add_argument("--table", action="append", help="a table to backfill (with everything downstream); repeat for "
                                                    "several; default: every silver and gold table")
    p.set_defaults(fn=cmd_backfill)

    p = sub.add_parser(
        "verify", help="compare each table with a batch recomputation of its flow, row by row",
        description="Each table after bronze is compared on its keys with its flow run once over the same log. A "
                    "difference is explained when the flow's late arrivals account for it (the batch without them "
                    "reproduces the stream's row); otherwise it is a real discrepancy, printed with both rows. Exit 1 "
                    "when there is a real discrepancy.")
    p.add_argument("--table", action="append", help="a table to verify; repeat for several; default: all")
    p.add_argument("--from", dest="start", type=_day, help="only rows of event dates from this day")
    p.add_argument("--to", dest="end", type=_day, help="only rows of event dates up to this day (inclusive)")
    p.set_defaults(fn=cmd_verify)

    p = sub.add_parser(
        "replay", help="rebuild a table and everything downstream from an earlier point of the log, into shadow tables",
        description="The starting point is the table's input as of a Delta version or timestamp (bronze, for a silver "
                    "table), or, for a bronze table, Kafka from offsets or a time per partition (bronze keeps its rows "
                    "before that point). --compare reports how the rebuilt tables differ from the live ones; --swap "
                    "replaces the live tables (one commit each; the old version stays readable by time travel) and "
                    "resets their streams' checkpoints, so they resume where the replay ended.")
    p.add_argument("table", help="the table to rebuild, e.g. silver_<entity>; every table downstream of it is rebuilt too")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-version", type=int, help="the input table's Delta version to rebuild from (the "
                       "table as its input stood at that version; `lakehouse history TABLE` lists them)")
    start.add_argument("--from-timestamp", help="the input table as of this time, e.g. 2026-11-22T10:00:00Z")
    start.add_argument("--from-offsets", type=_offsets, help="bronze only: partition=offset pairs to read Kafka again from")
    start.add_argument("--from-kafka-timestamp", type=_instant, help="bronze only: read Kafka again from this time")
    p.add_argument("--compare", action="store_true", help="report how the rebuilt tables differ from the live ones")
    p.add_argument("--swap", action="store_true", help="replace the live tables with the rebuilt ones")
    p.set_defaults(fn=cmd_replay)

    p = sub.add_parser(
        "refresh", help="rebuild a table whose definition changed from the whole retained log, and restart its stream",
        description="When a table's definition changes (a source added, a column, a transform, a window size), its "
                    "stream refuses to run on its old checkpoint and names this command. The tables it reads are first "
                    "brought up to date; then the batch lane recomputes the table from the whole of them into a shadow, "
                    "swaps it in with one commit (the old version stays readable by time travel), records the new "
                    "definition, and its stream starts a new checkpoint from where the rebuild ended: nothing read "
                    "twice, nothing skipped. Events the table had listed in late_arrivals stay listed there.")
    p.add_argument("table", help="the table to rebuild, e.g. gold_<mart>")
    p.add_argument("--downstream", action="store_true", help="also rebuild every table that reads it (needed when "
                   "one exists: a rewritten table stops the streams that read it)")
    p.set_defaults(fn=cmd_refresh)
