"""Bench: does time grow linearly with the events? Ingest and the whole pipeline at three sizes, least squares.

    .venv/bin/python -m bench.growth [--sizes 100000,200000,400000] [--ingest-rounds 2] [--rounds 1]
                                     [--no-quality] [--quick] [--record] [--no-record]

Issue 9, item 5. The issue's sizes are 250,000, 1,000,000 and 4,000,000 events; the default here is
100,000, 200,000 and 400,000, because a whole catch-up of 4M events would take well over an hour on this
machine's two shared cores (pass --sizes to choose). One Spark session (the project's configuration),
two brokers in turn (KRaft, ports 19400/19401, each with its state in a temporary folder and stopped by
its PID before the next starts, also on error):

1. ingest, as bench/ingest.py: shop.orders.v1 (3 partitions) grows to each size in turn (the
   generator's orders, preloaded; producing is not a figure); at each size, --ingest-rounds rounds of
   (a) the bronze flow (run_flow, fresh lake and checkpoint, availableNow), (b) the barest Spark
   Kafka->Delta job and (c) raw confluent-kafka consumers, one process per partition, the first side
   rotating each round; one warm-up run of each side before the first size.
2. pipeline, as bench/pipeline.py: the shop's mixed topics grow to each size in turn; at each size,
   --rounds whole catch-ups (every flow of streaming.flows.FLOWS via run_flow, availableNow, fresh lake,
   the FlowContext `lakehouse run` builds: quality gate on unless --no-quality); one warm-up catch-up at
   the first size.

For each side and for the pipeline (whole and per layer), the least-squares line through the three
sizes' median times: time = fixed cost + slope x events, the slope in µs/event, R^2 and the residuals
(a residual is a size's median minus the line; growth is linear when they are small against the
times, as noise on this machine goes, and not all of one sign pattern that bends: +,-,+ or -,+,-
with a large middle one says it curves). Peak RSS of the Spark driver and the broker per run as in
bench/harness.py. It writes <home>/bench/results/growth.json (bench.harness.record) and prints the
summary row for docs/benchmarks.md.
--quick is a smoke run (2,000, 4,000 and 8,000 events, one round each) that records nothing unless
--record is given. A figure, never a test.
"""

from __future__ import annotations

import argparse
import statistics

from bench import harness, ingest, pipeline
from bench.harness import say

NAME = "growth"
INGEST_SIDES = ingest.SIDES


def curve(fit: harness.Fit, ys: list[float]) -> dict:
    """The fit as a dict, with the largest residual as a share of its size's time."""
    out = fit.as_dict()
    out["max_residual_share"] = round(max(abs(r) / y for r, y in zip(fit.residuals, ys)), 4)
    return out


def ingest_phase(spark, settings, sizes: list[int], rounds: int, seed: int, driver_pid) -> tuple[list[dict], dict]:
    out = []
    with harness.private_broker(settings, folder="kafka-ingest") as broker:
        orders = harness.order_events(max(sizes), seed=seed)
        in_log = {"n": 0}
        sides = ingest.make_sides(spark, settings, broker, lambda: in_log["n"])
        probes = [harness.PeakMemory("spark_driver", driver_pid), harness.PeakMemory("broker", broker.pid)]
        for i, size in enumerate(sizes):
            say(f"ingest: shop.orders.v1 {in_log['n']:,} -> {size:,} records")
            harness.send(orders, size - in_log["n"], broker.bootstrap)
            in_log["n"] = size
            runs = harness.alternate(sides, rounds, probes=probes, warm_up=i == 0,
                                     describe=lambda name, run, size=size: f", {size / run['seconds']:,.0f} events/s")
            at = {"events": size}
            for side in INGEST_SIDES:
                med = statistics.median(r["seconds"] for r in runs[side])
                at[side] = {"median_s": round(med, 3), "events_per_s": round(size / med),
                            "runs": harness.rounded(runs[side])}
            out.append(at)
        method = {p.name: p.method for p in probes}
    return out, method


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,200000,400000",
                        help="three or more sizes, comma-separated (default 100000,200000,400000; the issue's "
                             "250000,1000000,4000000 take hours here)")
    parser.add_argument("--ingest-rounds", type=int, default=2, help="ingest rounds per size (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="pipeline catch-ups per size (default 1)")
    parser.add_argument("--no-quality", action="store_true", help="pipeline with quality=None (default: the gate on)")
    parser.add_argument("--seed", type=int, default=harness.SEED, help="generator seed (default 7, as lakehouse produce)")
    harness.recording_options(parser, quick="2000, 4000 and 8000 events, one round each")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: give whole numbers separated by commas, such as 100000,200000,400000")
    if args.quick:
        sizes, args.ingest_rounds, args.rounds = [2_000, 4_000, 8_000], 1, 1
    if len(sizes) < 3 or sizes[0] <= 0:
        parser.error("--sizes needs at least three different positive sizes (a line through two says nothing of growth)")
    record = harness.keeps(args)
    harness.log_warnings()
    quality = not args.no_quality
    pipeline.progress_per_flow()

    started_at = harness.utc_now()
    where = harness.machine()
    say(f"bench.growth: sizes {', '.join(f'{s:,}' for s in sizes)}; ingest {args.ingest_rounds} rounds, pipeline "
        f"{args.rounds} per size, quality gate {'on' if quality else 'off'}; {where}")
    with harness.bench_home(NAME) as settings, harness.spark_session(settings, NAME) as (spark, driver_pid):
        say("phase 1 of 2: ingest")
        ingest_sizes, ingest_memory = ingest_phase(spark, settings, sizes, args.ingest_rounds, args.seed, driver_pid)
        say("phase 2 of 2: pipeline")
        with harness.private_broker(settings, folder="kafka-pipeline") as broker:
            pipe_sizes, _, pipe_memory = pipeline.run_sizes(spark, settings, broker, sizes, args.rounds, seed=args.seed,
                                                         quality=quality, driver_pid=driver_pid)

    fits = {}
    for side in INGEST_SIDES:
        ys = [s[side]["median_s"] for s in ingest_sizes]
        fits[f"ingest_{side}"] = curve(harness.linear_fit(sizes, ys), ys)
    ys = [s["median_s"] for s in pipe_sizes]
    fits["pipeline"] = curve(harness.linear_fit(sizes, ys), ys)
    for layer in pipeline.LAYERS:
        ys = [s["layers_s"][layer] for s in pipe_sizes]
        fits[f"pipeline_{layer}"] = curve(harness.linear_fit(sizes, ys), ys)
    result = {
        "bench": NAME,
        "date": started_at.isoformat(timespec="seconds"),
        "machine": where,
        "load_end": harness.load_now(),
        "command": harness.command_line("bench.growth", argv),
        "sizes": sizes,
        "sizes_note": "the issue's 250,000 / 1,000,000 / 4,000,000 take hours on this machine" if sizes[-1] < 4_000_000
                      else "",
        "seed": args.seed,
        "ingest": {"topic": "shop.orders.v1", "rounds": args.ingest_rounds, "warm_up": "one run per side at the first size",
                   "sizes": ingest_sizes, "peak_memory_method": ingest_memory},
        "pipeline": {"rounds": args.rounds, "warm_up": "one catch-up at the first size",
                     "quality": "on: the quality gate, as lakehouse run (project default)" if quality else "off: quality=None",
                     "sizes": pipe_sizes, "peak_memory_method": pipe_memory},
        "fits": fits,
        "fit_note": "least squares through each size's median time; residual = median - line",
    }
    harness.publish(NAME, result, summary(result), docs_row, record)
    return 0


def fit_text(fit: dict) -> str:
    r2 = "n/a" if fit["r2"] is None else f"{fit['r2']:.4f}"
    return (f"{fit['slope_us_per_event']:.1f} µs/event + {fit['intercept_s']:.1f} s, R^2 {r2}, residuals "
            f"{', '.join(f'{r:+.1f}' for r in fit['residuals_s'])} s")


def summary(result: dict) -> str:
    f = result["fits"]
    lines = []
    for s in result["ingest"]["sizes"]:
        lines.append(f"ingest {s['events']:,}: bronze {s['bronze']['events_per_s']:,}, bare {s['bare']['events_per_s']:,}, "
                     f"raw {s['raw']['events_per_s']:,} events/s")
    for s in result["pipeline"]["sizes"]:
        lines.append(f"pipeline {s['events']:,}: {s['events_per_s']:,} events/s ({s['median_s']:.1f} s; "
                     f"{pipeline.layer_text(s)})")
    for key in ("ingest_bronze", "ingest_bare", "ingest_raw", "pipeline", "pipeline_bronze", "pipeline_silver",
                "pipeline_gold"):
        lines.append(f"{key}: {fit_text(f[key])}")
    return "\n".join(lines)


def docs_row(result: dict) -> str:
    f = result["fits"]
    date = result["date"][:16].replace("T", " ")
    sizes = ", ".join(f"{s:,}" for s in result["sizes"])
    pipe = result["pipeline"]["sizes"]
    ing = result["ingest"]["sizes"]
    return harness.docs_row(
        date, f"`{result['command']}`",
        f"sizes {sizes} ({result['sizes_note'] or 'the issue sizes'}); ingest: shop.orders.v1, "
        f"{result['ingest']['rounds']} rotating rounds per size; pipeline: shop events, whole catch-up, "
        f"{result['pipeline']['rounds']} per size, quality gate "
        f"{'on' if result['pipeline']['quality'].startswith('on') else 'off'}; warm-up before the first size; "
        f"least squares through each size's median; before = ingest, after = pipeline",
        "bronze flow " + fit_text(f["ingest_bronze"]) + "; bare Spark " + fit_text(f["ingest_bare"])
        + "; bronze " + ", ".join(f"{s['bronze']['events_per_s']:,}" for s in ing) + " events/s",
        "whole " + fit_text(f["pipeline"]) + f" (bronze {f['pipeline_bronze']['slope_us_per_event']:.1f}, silver "
        f"{f['pipeline_silver']['slope_us_per_event']:.1f}, gold {f['pipeline_gold']['slope_us_per_event']:.1f} µs/event); "
        + ", ".join(f"{s['events_per_s']:,}" for s in pipe) + " events/s",
        f"pipeline R^2 {f['pipeline']['r2']:.4f}, largest residual {f['pipeline']['max_residual_share']:.1%} of its "
        f"time; bronze flow R^2 {f['ingest_bronze']['r2']:.4f} ({f['ingest_bronze']['max_residual_share']:.1%}); "
        "no target (shape of growth)",
        f"{result['machine']}, {result['load_end']} at the end",
    )


if __name__ == "__main__":
    from bench.growth import main as _main   # so that the spawned consumers find raw_worker in bench.ingest

    raise SystemExit(_main())
