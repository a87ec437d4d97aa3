"""Bench: what Dagster's catch_up job (`lakehouse run`, the demo, the UI) adds to a catch-up over its flows alone.

    .venv/bin/python -m bench.catch_up_job [--events 2000] [--rounds 3] [--quick] [--no-record]

The bench starts its own Kafka broker (the harness's ports, state in a temporary folder, stopped by its
PID), creates the topics and sends --events shop events (`lakehouse produce`'s fault mix). Then it
alternates two sides, each a whole catch-up of every table into a fresh lake root (removed afterwards),
in one Spark session:

- before: the flows alone, `LAKEHOUSE_CATCH_UP_PARALLEL` at once, as `bench.pipeline` times a catch-up
  (bench.quality.catch_up: streaming.parallel_runs with the project's context, quality gate on);
- after: the `catch_up` job run as `lakehouse run` runs it (orchestration.runs.catch_up over every
  table): the same flows, and what the job records about each (materializations per touched partition
  with row counts and columns, the quality checks, observations of quarantine and late arrivals,
  every micro-batch's progress) in a Dagster run.

Every flow must write the same rows on both sides, or the bench stops. Figures: each side's median
seconds, the median over rounds of after/before and the seconds the job adds. It writes
<home>/bench/results/catch_up_job.json (bench.harness.record) and prints the summary row for
docs/benchmarks.md; --quick (one round) records nothing unless --record. A figure, never a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
from pathlib import Path

from bench import harness
from bench.harness import say

NAME = "catch_up_job"
SIDES = ("flows alone", "catch_up job")


def measure(events: int, rounds: int) -> dict:
    from bench.quality import catch_up
    from lakehouse.orchestration import runs

    started_at = harness.utc_now()
    where = harness.machine()
    say(f"bench.catch_up_job: {events:,} events, {rounds} rounds; {where}")
    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker, \
            harness.spark_session(settings, NAME) as (spark, _pid):
        harness.send(harness.shop_events(events), events, broker.bootstrap)
        lakes = Path(settings.home) / "lakes"
        seen: dict[str, dict[str, int]] = {}

        def same_rows(label: str, rows: dict[str, int]) -> None:
            first = seen.setdefault("rows", rows)
            if rows != first:
                differ = {k: (rows.get(k), first.get(k)) for k in set(rows) | set(first) if rows.get(k) != first.get(k)}
                raise RuntimeError(f"{label}: rows written differ from the first run's: {differ}")

        def flows_alone(label: str) -> dict:
            ctx = harness.project_context(settings, str(lakes / label))
            try:
                result = catch_up(spark, ctx, settings.catch_up_parallel)
            finally:
                harness.drop_lake(spark, lakes / label)
            same_rows(label, result["rows"])
            return {"seconds": result["total_s"]}

        def job(label: str) -> dict:
            lake = dataclasses.replace(settings, lake_root=str(lakes / label))
            try:
                result = runs.catch_up(lake, runs.TABLES, command="bench.catch_up_job")
                if (failure := runs.failure_message(result)) is not None:
                    raise RuntimeError(f"{label}: the catch_up job failed: {failure}")
                metadata = runs.materialized_metadata(result)
            finally:
                shutil.rmtree(lakes / label, ignore_errors=True)
            same_rows(label, {name: m["rows_written"] for name, m in metadata.items() if "rows_written" in m})
            return {}

        runs_by_side = harness.alternate({SIDES[0]: flows_alone, SIDES[1]: job}, rounds)
    before, after = ([r["seconds"] for r in runs_by_side[s]] for s in SIDES)
    return {
        "bench": NAME, "started_at": started_at.isoformat(), "machine": where, "events": events, "rounds": rounds,
        "parallel": settings.catch_up_parallel, "flows": len(seen["rows"]),
        "median_s": {s: round(statistics.median(r["seconds"] for r in runs_by_side[s]), 2) for s in SIDES},
        "ratio_after_before": round(harness.median_ratio(after, before), 3),
        "adds_s": round(statistics.median(a - b for a, b in zip(after, before)), 2),
        "runs": {s: harness.rounded(runs_by_side[s]) for s in SIDES},
    }


def summary(result: dict) -> str:
    m = result["median_s"]
    return (f"catch-up of {result['flows']} flows over {result['events']:,} events: the flows alone "
            f"{m[SIDES[0]]:.1f} s, the catch_up job {m[SIDES[1]]:.1f} s; the job adds {result['adds_s']:.1f} s "
            f"({result['ratio_after_before']:.2f}x, median of {result['rounds']} rounds)")


def docs_row(result: dict) -> str:
    m = result["median_s"]
    return harness.docs_row(
        result["started_at"][:16].replace("T", " "), f"`{result['command']}`",
        f"{result['events']:,} shop events, a whole catch-up of {result['flows']} flows into a fresh lake each run, "
        f"{result['parallel']} at once, quality gate on, one Spark session; same rows written by every flow on both "
        f"sides; median of {result['rounds']} alternating rounds after a warm-up; before = the flows alone (as "
        "bench.pipeline times them), after = Dagster's catch_up job as `lakehouse run` runs it",
        f"flows alone: {m[SIDES[0]]:.1f} s", f"catch_up job: {m[SIDES[1]]:.1f} s",
        f"the job adds {result['adds_s']:.1f} s ({result['ratio_after_before']:.2f}x)",
        f"{result['machine']}, {harness.load_now()} at the end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.catch_up_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000, help="shop events in the log (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, one run per side each (default 3)")
    harness.recording_options(parser, quick="1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 1
    record = harness.keeps(args)
    harness.log_warnings()
    result = measure(args.events, args.rounds)
    result["command"] = harness.command_line("bench.catch_up_job", argv)
    harness.publish(NAME, result, summary(result), docs_row, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
