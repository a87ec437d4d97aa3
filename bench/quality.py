"""Bench: what data-quality validation costs a catch-up, the whole pipeline with and without the quality gate.

    .venv/bin/python -m bench.quality [--events 200000] [--repeats 3] [--quick]

Issue 8, item 5: validating a micro-batch must not dominate it (aim: validation costs under 20% of a
micro-batch). The bench starts its own Kafka broker (KRaft, ports 19392/19393, state in a temporary
folder, stopped by its PID at the end, also on error), creates the topics from their specs and sends
--events shop events once (streaming.generator with `lakehouse produce`'s default fault mix). Then it
runs the whole catch-up pipeline, every flow of streaming.flows.FLOWS in order through
streaming.runner.run_flow (availableNow, as a `lakehouse run` does), each time into a fresh lake root
and from the earliest offsets:

- with validation: FlowContext(quality=Gate(<lake>/quality_results, gx_root=<tmp>/quality)): silver
  screens drop rules into quarantine and validates what it writes, dimensions validate their versions,
  gold validates each MERGE's rows; the results are written to the Delta table quality_results and
  GX's validation store when each flow's run ends (all inside the timed run);
- without: FlowContext(quality=None), nothing is checked.

One warm-up run of each side, then --repeats rounds of one run per side; the side that goes first
alternates from round to round. Each run is timed whole (wall clock) and per layer (the sum of the
flows' run times: bronze, silver with the dimension flows, gold). The figures: events/s of each side
(events sent / median run time), the median of the rounds' time ratios with/without, and the
validation share of a run, 1 - without/with (the part of a validated run's time that validation
takes). A catch-up reads each flow's whole backlog in one micro-batch, so this is the share in a
large micro-batch; the fixed cost per batch weighs more in the small batches of `lakehouse stream`.
Bronze is never validated: its with/without ratio shows how far the machine's noise alone moves a figure.
It writes <home>/bench/results/quality.json (bench.harness.record: the project's state folder, outside
git) and prints the summary row for docs/benchmarks.md. --quick is a smoke run
(5000 events, the warm-up and one round: some 12-16 minutes on two shared cores, because each of the
22 flows' runs has a fixed cost of seconds whatever the size) that records nothing unless --record is
given. A figure, never a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import harness
from bench.compaction import HEADER, ROOT, TABLE_MD, machine

KAFKA_PORT, KAFKA_CONTROLLER_PORT = 19392, 19393   # nobody else's: tests pick free ports, the default is 9092
AIM = 0.20
SIDES = ("with", "without")
LAYERS = ("bronze", "silver", "gold")

log = logging.getLogger("bench.quality")


def layer_of(flow) -> str:
    """bronze, silver (the silver and dimension flows) or gold."""
    return flow.target.layer


def catch_up(spark, ctx, parallel: int = 1, flows=None) -> dict:
    """Run every flow (or `flows`) once to catch up, `parallel` at once; wall time, flow-seconds per layer and per flow, rows, batches, late rows."""
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.parallel_runs import run_flows

    per_layer: dict[str, float] = defaultdict(float)
    per_flow: dict[str, float] = {}
    rows: dict[str, int] = {}
    batches: dict[str, int] = {}
    late: dict[str, int] = {}    # events each silver or stateful gold flow routed to late_arrivals
    started = time.perf_counter()
    # As the catch_up job does: the flows' validation results are written once, after the last flow.
    with ctx.holding_results(spark):
        for outcome in run_flows(spark, FLOWS if flows is None else flows, ctx, parallel=parallel):
            flow, run = outcome.flow, outcome.run
            if outcome.error is not None:
                raise outcome.error
            if run.waiting_for:
                raise RuntimeError(f"flow {flow.name} found no input ({', '.join(run.waiting_for)}): the bench's "
                                   "events did not reach every table")
            per_layer[layer_of(flow)] += run.duration_s
            per_flow[flow.name] = round(run.duration_s, 3)
            rows[flow.name] = run.rows_written
            batches[flow.name] = run.batches
            stats = run.silver or run.gold
            if stats is not None:
                late[flow.name] = stats.late
    return {"total_s": time.perf_counter() - started, "layers_s": {k: round(per_layer[k], 3) for k in LAYERS},
            "flows_s": per_flow, "rows": rows, "batches": batches, "late": late}


def one_run(spark, settings, home: Path, label: str, *, validate: bool) -> dict:
    """One catch-up into a fresh lake root (removed afterwards), with the gate or without it."""
    from lakehouse.quality.gate import Gate
    from lakehouse.schemas import tables
    from lakehouse.streaming.context import FlowContext

    folder = home / "runs" / label
    lake = str(folder / "lake")
    gate = Gate(tables.QUALITY_RESULTS.path(lake), gx_root=str(home / "quality")) if validate else None
    ctx = FlowContext(
        lake_root=lake, kafka_bootstrap=settings.kafka_bootstrap, quality=gate,
        silver_dedup_watermark=settings.silver_dedup_watermark, gold_watermark=settings.gold_watermark,
        gold_watermarks=dict(settings.gold_watermarks), event_time_floor=settings.event_time_floor,
        event_time_max_ahead=settings.event_time_max_ahead,
    )
    try:
        result = catch_up(spark, ctx)
        if validate:
            checked = spark.read.format("delta").load(tables.QUALITY_RESULTS.path(lake))
            result["quality_results_rows"] = checked.count()
            result["validated_tables"] = checked.select("table").distinct().count()
    finally:
        harness.drop_lake(spark, folder)
    print(f"  {label}: {result['total_s']:.1f} s (bronze {result['layers_s']['bronze']:.1f}, silver "
          f"{result['layers_s']['silver']:.1f}, gold {result['layers_s']['gold']:.1f})", flush=True)
    return result


def summarize(runs: dict[str, list[dict]], events: int) -> dict:
    """Medians per side, the rounds' ratios with/without, the validation share and where it goes."""
    def med(side: str, pick) -> float:
        return statistics.median(pick(r) for r in runs[side])

    out: dict = {}
    for scope, pick in [("total", lambda r: r["total_s"])] + [(k, (lambda k: lambda r: r["layers_s"][k])(k))
                                                              for k in LAYERS]:
        ratios = [pick(w) / pick(wo) for w, wo in zip(runs["with"], runs["without"])]
        ratio = statistics.median(ratios)
        with_s, without_s = med("with", pick), med("without", pick)
        out[scope] = {
            "with_s": [round(pick(r), 3) for r in runs["with"]],
            "without_s": [round(pick(r), 3) for r in runs["without"]],
            "median_with_s": round(with_s, 3), "median_without_s": round(without_s, 3),
            "events_per_s_with": round(events / with_s), "events_per_s_without": round(events / without_s),
            "ratios": [round(x, 3) for x in ratios], "median_ratio": round(ratio, 3),
            "validation_share": round(1 - 1 / ratio, 3),
        }
    flows = runs["with"][0]["flows_s"].keys()
    out["flows"] = {
        name: {"median_with_s": round(med("with", lambda r: r["flows_s"][name]), 3),
               "median_without_s": round(med("without", lambda r: r["flows_s"][name]), 3)}
        for name in flows
    }
    for name, f in out["flows"].items():
        f["extra_s"] = round(f["median_with_s"] - f["median_without_s"], 3)
    return out


def summary(result: dict) -> str:
    """The figures in words: events/s of each side, the ratio, the validation share, whether the aim is met."""
    total, silver, gold = result["total"], result["silver"], result["gold"]
    costly = sorted(result["per_flow"].items(), key=lambda kv: -kv[1]["extra_s"])[:3]
    return "\n".join([
        f"with validation: {total['events_per_s_with']} events/s ({total['median_with_s']:.1f} s per catch-up); "
        f"without: {total['events_per_s_without']} events/s ({total['median_without_s']:.1f} s)",
        f"median ratio with/without {total['median_ratio']}, validation share {total['validation_share']:.1%} of a "
        f"run; silver alone {silver['events_per_s_with']} vs {silver['events_per_s_without']} events/s, ratio "
        f"{silver['median_ratio']}, share {silver['validation_share']:.1%}; gold share {gold['validation_share']:.1%}; "
        f"bronze (never validated: the noise) {result['bronze']['validation_share']:.1%}",
        "most extra time: " + ", ".join(f"{n} {f['extra_s']:+.1f} s" for n, f in costly),
        f"The aim (validation under {AIM:.0%} of a micro-batch) is {'met' if result['aim_met'] else 'NOT met'}: "
        f"{total['validation_share']:.1%} of a whole catch-up.",
    ])


def docs_row(result: dict) -> str:
    """The result's summary row for docs/benchmarks.md (before: without validation; after: with the quality gate)."""
    total, silver, gold = result["total"], result["silver"], result["gold"]
    started_at = datetime.fromisoformat(result["date"])
    return (f"| {started_at:%Y-%m-%d %H:%M} | `python -m bench.quality` | {result['events']:,} shop events, whole "
            f"catch-up ({result['flows']} flows, fresh lake each run), median of {result['repeats']} alternating "
            f"rounds after a warm-up; before = without validation, after = with the quality gate | "
            f"{total['median_without_s']:.1f} s, {total['events_per_s_without']:,} events/s "
            f"(silver {silver['median_without_s']:.1f} s) | "
            f"{total['median_with_s']:.1f} s, {total['events_per_s_with']:,} events/s "
            f"(silver {silver['median_with_s']:.1f} s) | "
            f"ratio {total['median_ratio']}, validation {total['validation_share']:.0%} of a run "
            f"(silver {silver['validation_share']:.0%}, gold {gold['validation_share']:.0%}); "
            f"aim under {AIM:.0%} {'met' if result['aim_met'] else 'not met'} | {result['machine']}, "
            f"{result['load_end']:.1f} at the end |\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="shop events sent once (default 200000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds, one run per side each (default 3)")
    parser.add_argument("--seed", type=int, default=7, help="generator seed (default 7, as lakehouse produce)")
    harness.recording_options(parser, quick="5000 events, 1 round after the warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.repeats = min(args.events, 5000), 1
    record = harness.keeps(args)
    harness.log_warnings()

    from lakehouse.infra.kafka_broker import local_node
    from lakehouse.infra.retention import duration_ms
    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark
    from lakehouse.schemas import topics
    from lakehouse.pipelines.shop.generator import Mix, ShopGenerator
    from lakehouse.streaming.kafka_topics import ensure_topics
    from lakehouse.streaming.producer import produce

    started_at = datetime.now(timezone.utc)
    where = machine()
    home = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    settings = Settings.from_env({
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_JARS_DIR": str(ROOT / ".lakehouse" / "jars"),
        "LAKEHOUSE_KAFKA_PORT": str(KAFKA_PORT),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(KAFKA_CONTROLLER_PORT),
    })
    node = local_node(settings)
    spark = None
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        pid = node.start(settings.jars_dir)
        print(f"Kafka broker pid {pid} on {node.bootstrap}, state in {node.directory}", flush=True)
        ensure_topics(settings.kafka_bootstrap, topics.ALL, replication_factor=1,
                      replay_window_ms=duration_ms(settings.replay_window))
        # Event times end a little before now: nothing is quarantined as implausibly ahead of the broker's time.
        span = timedelta(seconds=args.events / 20.0)
        start = (started_at - span - timedelta(minutes=10)).replace(second=0, microsecond=0)
        gen = iter(ShopGenerator(seed=args.seed, start=start, events_per_second=20.0, mix=Mix()))
        report = produce((next(gen) for _ in range(args.events)), bootstrap=settings.kafka_bootstrap)
        if report.failed or report.delivered != args.events:
            raise RuntimeError(f"sent {args.events} events, {report.delivered} acknowledged, {report.failed} failed: "
                               f"{'; '.join(report.errors[:3])}")
        print(f"sent {report.delivered} events in {report.duration_s}s: "
              + ", ".join(f"{t} {n}" for t, n in sorted(report.by_topic.items())), flush=True)

        spark = get_spark(settings, "bench-quality")
        # Never skipped, not even by --quick: the first run pays the JVM's warm-up (a quarter of its time
        # or more here) and would be charged to whichever side went first.
        print("warm-up", flush=True)
        for side in SIDES:
            one_run(spark, settings, home, f"warm-up-{side}", validate=side == "with")
        for round_ in range(args.repeats):
            print(f"round {round_ + 1} of {args.repeats}", flush=True)
            for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
                runs[side].append(one_run(spark, settings, home, f"{round_}-{side}", validate=side == "with"))
    finally:
        if spark is not None:
            spark.stop()
        stopped = node.stop()
        if stopped:
            print(f"stopped the Kafka broker (pid {stopped})", flush=True)
        shutil.rmtree(home, ignore_errors=True)

    figures = summarize(runs, args.events)
    first_with = runs["with"][0]
    rows_with, rows_without = first_with["rows"], runs["without"][0]["rows"]
    result = {
        "bench": "quality",
        "date": started_at.isoformat(timespec="seconds"),
        "machine": where,
        "events": args.events, "seed": args.seed, "mix": "lakehouse produce's default (Mix())",
        "repeats": args.repeats, "warm_up": "one run per side",
        "order": "alternating, the first side swaps each round",
        "flows": len(first_with["flows_s"]),
        "spark": {"master": settings.spark_master, "shuffle_partitions": settings.spark_shuffle_partitions},
        "quality_results_rows_per_run": first_with.get("quality_results_rows"),
        "validated_tables": first_with.get("validated_tables"),
        "rows_written": {name: {"with": rows_with[name], "without": rows_without[name]} for name in rows_with},
        **{k: figures[k] for k in ("total", *LAYERS)},
        "per_flow": figures["flows"],
        "aim": f"validation share under {AIM:.0%}",
        "aim_met": figures["total"]["validation_share"] < AIM,
        "load_end": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result, indent=2))
    print("\n" + summary(result))
    if record:
        harness.record("quality", result, docs_row(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
