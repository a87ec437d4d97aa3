"""Bench: what verifying several tables at once buys `lakehouse verify`, against one table at a time.

    .venv/bin/python -m bench.verify [--events 20000] [--rounds 3] [--parallel 3] [--quick] [--no-record]

The bench starts its own Kafka broker (the harness's ports, state in a temporary folder, stopped by its
PID), creates the topics and builds one lake the way a day of streaming would leave it: half of
--events shop events (`lakehouse produce`'s fault mix), every flow caught up (the project's context,
quality gate on), then the other half, whose late events now fall behind the gold watermarks, and a
second catch-up. Over that same lake it alternates two sides, `batch.verify.verify` of every table:

- before: one table at a time (parallel=1, what `lakehouse verify` did before);
- after: --parallel tables at once (LAKEHOUSE_CATCH_UP_PARALLEL, default 3), each flow in a session of
  its own (batch/parallel.py).

Both sides must give every table the same verdict (status, differing rows, rows explained by late
arrivals, real discrepancies); a difference stops the bench. Figures: each side's median seconds and
the median over rounds of before/after. It writes <home>/bench/results/verify.json (bench.harness.record)
and prints the summary row for docs/benchmarks.md; --quick (2,000 events, one round) records nothing unless
--record. A figure, never a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
from itertools import islice

from bench import harness
from bench.harness import say

NAME = "verify"
SIDES = ("one at a time", "at once")

log = logging.getLogger("bench.verify")


def build_lake(spark, settings, broker, events: int, parallel: int):
    """Two waves of shop events, each caught up by every flow; the lake's FlowContext."""
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.parallel_runs import run_flows

    ctx = dataclasses.replace(harness.project_context(settings, f"{settings.home}/lake"),
                              kafka_bootstrap=broker.bootstrap)
    records = harness.shop_events(events)
    for wave, count in enumerate((events // 2, events - events // 2), 1):
        harness.send(islice(records, count), count, broker.bootstrap)
        failed = [o for o in run_flows(spark, FLOWS, ctx, parallel=parallel) if o.error]
        if failed:
            raise RuntimeError(f"catch-up of wave {wave} failed: {failed[0].flow.name}: {failed[0].error}")
        say(f"wave {wave}: {count:,} events caught up by {len(FLOWS)} flows")
    return ctx


def verdicts(found) -> dict[str, tuple]:
    """What must be equal on both sides: each table's status and counts."""
    return {v.table: (v.status, v.diff.differences if v.diff else 0, v.explained, v.real) for v in found}


def measure(events: int, rounds: int, parallel: int) -> dict:
    from lakehouse.batch.verify import verify

    started_at = harness.utc_now()
    where = harness.machine()
    say(f"bench.verify: {events:,} events, {rounds} rounds, {parallel} at once; {where}")
    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker, \
            harness.spark_session(settings, NAME) as (spark, _pid):
        ctx = build_lake(spark, settings, broker, events, parallel)
        seen: dict[str, dict[str, tuple]] = {}

        def side(name: str, n: int):
            def run(label: str) -> dict:
                got = verdicts(verify(spark, ctx, parallel=n))
                first = seen.setdefault("verdicts", got)
                if got != first:
                    raise RuntimeError(f"{label}: verdicts differ from the first run's: {got} != {first}")
                return {}
            return run

        runs = harness.alternate({SIDES[0]: side(SIDES[0], 1), SIDES[1]: side(SIDES[1], parallel)}, rounds)
    before, after = ([r["seconds"] for r in runs[s]] for s in SIDES)
    found = seen["verdicts"]
    return {
        "bench": NAME, "started_at": started_at.isoformat(), "machine": where, "events": events, "rounds": rounds,
        "parallel": parallel, "tables": len(found),
        "statuses": {s: sum(1 for v in found.values() if v[0] == s) for s in sorted({v[0] for v in found.values()})},
        "verdicts": {t: list(v) for t, v in found.items()},
        "median_s": {s: round(statistics.median(r["seconds"] for r in runs[s]), 2) for s in SIDES},
        "ratio_before_after": round(harness.median_ratio(before, after), 3),
        "runs": {s: harness.rounded(runs[s]) for s in SIDES},
    }


def summary(result: dict) -> str:
    m = result["median_s"]
    statuses = ", ".join(f"{n} {s}" for s, n in result["statuses"].items())
    return (f"verify of {result['tables']} tables ({statuses}) over {result['events']:,} events: one at a time "
            f"{m[SIDES[0]]:.1f} s, {result['parallel']} at once {m[SIDES[1]]:.1f} s; "
            f"{result['ratio_before_after']:.2f}x (median of {result['rounds']} rounds)")


def docs_row(result: dict) -> str:
    m = result["median_s"]
    return harness.docs_row(
        result["started_at"][:16].replace("T", " "), f"`{result['command']}`",
        f"a lake of {result['events']:,} shop events in two caught-up waves (the second's late events behind the "
        f"gold watermarks), project context, quality gate on; `batch.verify.verify` of every table, same verdicts "
        f"required on both sides; median of {result['rounds']} alternating rounds after a warm-up",
        f"one table at a time: {m[SIDES[0]]:.1f} s", f"{result['parallel']} at once: {m[SIDES[1]]:.1f} s",
        f"{result['ratio_before_after']:.2f}x faster ({', '.join(f'{n} {s}' for s, n in result['statuses'].items())})",
        f"{result['machine']}, {harness.load_now()} at the end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="shop events in the lake (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, one run per side each (default 3)")
    parser.add_argument("--parallel", type=int, default=0,
                        help="tables verified at once on the 'at once' side (default LAKEHOUSE_CATCH_UP_PARALLEL, 3)")
    harness.recording_options(parser, quick="2000 events, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.rounds = min(args.events, 2_000), 1
    if not args.parallel:
        from lakehouse.infra.settings import Settings
        args.parallel = Settings.from_env().catch_up_parallel
    record = harness.keeps(args)
    harness.log_warnings()
    result = measure(args.events, args.rounds, args.parallel)
    result["command"] = harness.command_line("bench.verify", argv)
    harness.publish(NAME, result, summary(result), docs_row, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
