"""Bench: bronze -> silver -> gold over the shop's mixed topics, events per second and seconds per layer at two sizes.

    .venv/bin/python -m bench.pipeline [--events 400000] [--small 100000] [--rounds 2] [--no-quality]
                                       [--quick] [--record] [--no-record] [--floor] [--floor-queries]
                                       [--floor-merges] [--floor-shared]
                                       [--marginal FLOW]
                                       [--against LAKEHOUSE_NAME=VALUE]

Issue 9, item 5. Target: >= 50,000 events/s through the whole pipeline at 1.6M events on 2 cores.
The bench starts its own Kafka broker (KRaft, ports 19400/19401, state in a temporary folder, stopped by
its PID at the end, also on error), creates every topic from its spec and preloads --small shop events
(streaming.generator, all five topics, `lakehouse produce`'s fault mix; producing is logged, not a
figure). It runs the whole catch-up at that size, then sends more events of the same stream until the
log holds --events and runs it at that size. A catch-up is every flow of streaming.flows.FLOWS through
streaming.runner.run_flow, --parallel at once where they do not read each other's tables
(streaming/parallel_runs.py; availableNow, from the earliest offsets, as bench/quality.py's catch_up
and `lakehouse run` do), each run into a fresh lake root with the FlowContext `lakehouse run`
builds (orchestration.resources: the project defaults, so the quality gate is ON; --no-quality runs
with quality=None instead, and the record says which). A catch-up reads each flow's whole backlog in one
micro-batch.

One warm-up catch-up at the small size (not counted: the JVM's first run), then --rounds catch-ups at
each size. Each run is timed whole (wall clock) and per layer (the sum of its flows' run times: bronze;
silver with quarantine, late arrivals and the dimension flows; gold: flow-seconds, which overlap when
flows run at once), and per flow. Figures: events
per second at each size (events in the log / median catch-up time), seconds per layer, and the line
through the two sizes' medians, time = fixed cost + cost per event x events (per layer too): the fixed
cost is what 22 flows' queries cost whatever the size, the slope what each event costs. A streaming
query listener also sums each flow's micro-batch time (Spark's triggerExecution, which includes a
foreachBatch writer's MERGEs): a layer's seconds minus its seconds in batches is spent starting and
stopping queries and in the runner's own reads of checkpoints and Delta history. The 1.6M
figure is the line's prediction unless --events is 1600000 (a run at that size works; it takes long
here). Peak RSS of the Spark driver JVM and the broker JVM per run (bench/harness.py says how). It
writes <home>/bench/results/pipeline.json (bench.harness.record) and prints the summary row for
docs/benchmarks.md. --quick is a smoke run
(2,000 and 5,000 events, one run each after the warm-up) that records nothing unless --record is given.
--floor-queries also runs a second floor whose gold tables are each the barest streaming query
(bench.bare_pipeline's gold_as_queries: availableNow, a checkpoint, foreachBatch, one overwrite), and
reports each floor's gold stage per gold table: what one more gold table costs when it is a query of its
own, against what its work alone costs. --floor-merges also runs two more floors whose gold tables are
each MERGEd into on their keys instead of overwritten (gold_merge), by static jobs and by the barest
queries: what keeping a gold table incrementally costs, as a stream must. --floor-shared also runs two
floors where the gold tables streaming the same input share one query, each batch MERGEd into them one
after another (gold_shared), without and with Delta's txn id on each MERGE (gold_once, as a crash-safe
stream needs): there one more gold table adds one MERGE to a batch, and the figure is each gold table's
MERGE seconds (the median over the gold tables). --marginal FLOW also runs the
catch-up without that gold flow, alternating, for what one more gold table adds to a catch-up, and each
further floor without it, for what it adds to that floor's gold stage. --floor
also runs the floor, alternating with each catch-up: the same tables from the same log by the barest
static Spark jobs (bench/bare_pipeline.py), and reports its line and the pipeline's time over it.
--against LAKEHOUSE_NAME=VALUE also runs the catch-up with that one setting changed (a lake or Kafka
setting the flows read, such as LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS=500), alternating, for what a
setting's default is worth against the value it replaced.
A figure, never a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
from pathlib import Path
from typing import Callable, NamedTuple

from bench import harness
from bench.harness import say

NAME = "pipeline"
TARGET_EVENTS_PER_S = 50_000
TARGET_AT = 1_600_000
LAYERS = ("bronze", "silver", "gold")


def make_side(spark, settings, expected: Callable[[], int], *, quality: bool = True,
              parallel: int = 1, without: str | None = None) -> Callable[[str], dict]:
    """One whole catch-up into a fresh lake (removed afterwards); checks bronze took every event in the log.

    `without`: every flow but that one (a gold flow no other flow reads), for what one more gold table costs.
    """
    from bench.quality import catch_up, layer_of
    from lakehouse.streaming.flows import FLOWS

    runs_root = Path(settings.home) / "runs"
    harness.project_context(settings, str(runs_root / "x"))    # imports Dagster's resources once, untimed
    clock = harness.QueryClock(spark)
    layer = {flow.name: layer_of(flow) for flow in FLOWS}

    def pipeline(label: str) -> dict:
        folder = runs_root / label
        ctx = harness.project_context(settings, str(folder / "lake"))
        if not quality:
            ctx = dataclasses.replace(ctx, quality=None)
        mark = clock.mark()
        try:
            result = catch_up(spark, ctx, parallel, [f for f in FLOWS if f.name != without])
            in_batches = clock.since(mark)
        finally:
            harness.drop_lake(spark, folder)
        bronze_rows = sum(n for flow, n in result["rows"].items() if flow.startswith("bronze_"))
        if bronze_rows != expected():
            raise RuntimeError(f"bronze wrote {bronze_rows} rows, not the {expected()} events in the log")
        in_layers = {k: round(sum(t for name, t in in_batches.items() if layer.get(name) == k), 3) for k in LAYERS}
        return {"seconds": result["total_s"], "layers_s": result["layers_s"], "in_batches_s": in_layers,
                "flows_s": result["flows_s"], "flows_in_batches_s": {k: round(v, 3) for k, v in in_batches.items()},
                "rows": result["rows"], "batches": result["batches"], "late": result["late"]}

    return pipeline


def make_floor(spark, settings, expected: Callable[[], int], *, parallel: int = 1,
               gold: FloorGold | None = None, without: str | None = None) -> Callable[[str], dict]:
    """The floor: the same catch-up's work by the barest static Spark jobs (bench.bare_pipeline), into a fresh lake
    (its gold tables written as `gold` says, when given; all but the gold table `without`, when given)."""
    from bench.bare_pipeline import run_floor

    runs_root = Path(settings.home) / "runs"

    def floor(label: str) -> dict:
        folder = runs_root / label
        ctx = harness.project_context(settings, str(folder / "lake"))
        try:
            result = run_floor(spark, ctx, parallel=parallel, without=without, **(gold.options() if gold else {}))
        finally:
            harness.drop_lake(spark, folder)
        bronze_rows = sum(n for table, n in result["rows"].items() if table.startswith("bronze_"))
        if bronze_rows != expected():
            raise RuntimeError(f"the floor's bronze has {bronze_rows} rows, not the {expected()} events in the log")
        return {"seconds": result["total_s"], "stages_s": result["stages_s"], "rows": result["rows"],
                "gold_writes_s": result["gold_writes_s"]}

    return floor


def leaf_gold_flows() -> list[str]:
    """The gold flows no other flow reads: the ones a catch-up can run without (--marginal)."""
    from lakehouse.streaming.flows import FLOWS

    read = {t.name for f in FLOWS for t in (*f.sources, *f.lookups)}
    return [f.name for f in FLOWS if f.target.layer == "gold" and f.target.name not in read]


def marginal_at_size(without: list[dict], pipeline: list[dict], events: int, flow: str) -> dict:
    """What the catch-up takes without `flow`, and what that flow adds to it, round by round (median); for a floor,
    `pipeline` is its runs with every table and the figure its gold stage's seconds."""
    seconds = (lambda run: run["stages_s"]["gold"]) if "stages_s" in pipeline[0] else (lambda run: run["seconds"])
    adds = [seconds(p) - seconds(w) for p, w in zip(pipeline, without)]
    return {"events": events, "flow": flow, "without_s": round(statistics.median(seconds(w) for w in without), 3),
            "adds_s": round(statistics.median(adds), 3), "adds_per_round_s": [round(a, 3) for a in adds]}


def against_setting(text: str, settings):
    """`settings` with one LAKEHOUSE_NAME=VALUE changed, parsed as `Settings.from_env` parses it; a bad one exits."""
    from lakehouse.infra.settings import Settings, SettingsError

    name, _, value = text.partition("=")
    field = name.removeprefix("LAKEHOUSE_").lower()
    if not name.startswith("LAKEHOUSE_") or field not in {f.name for f in dataclasses.fields(Settings)}:
        raise SystemExit(f"error: --against {text}: {name} is not a LAKEHOUSE_ setting (`lakehouse --help` lists them)")
    try:
        parsed = getattr(Settings.from_env({name: value}), field)
    except SettingsError as exc:
        raise SystemExit(f"error: --against {text}: {exc}") from None
    return dataclasses.replace(settings, **{field: parsed})


def against_at_size(other: list[dict], pipeline: list[dict], events: int, setting: str) -> dict:
    """The catch-up with the other setting at one size, and its time over the default's, round by round (median)."""
    return {"events": events, "setting": setting, "median_s": round(statistics.median(o["seconds"] for o in other), 3),
            "over_default": round(harness.median_ratio([o["seconds"] for o in other], [p["seconds"] for p in pipeline]), 3),
            "per_round_s": [round(o["seconds"], 3) for o in other]}


def floor_at_size(runs: list[dict], pipeline: list[dict], events: int) -> dict:
    """Medians of the floor's runs at one size, and the pipeline's time over the floor's, round by round."""
    med = statistics.median(r["seconds"] for r in runs)
    return {
        "events": events,
        "median_s": round(med, 3),
        "events_per_s": round(events / med),
        "stages_s": {k: round(statistics.median(r["stages_s"][k] for r in runs), 3) for k in runs[0]["stages_s"]},
        "rows_written": runs[0]["rows"],
        "pipeline_over_floor": round(harness.median_ratio([p["seconds"] for p in pipeline],
                                                          [r["seconds"] for r in runs]), 3),
        "gold_writes_s": {t: round(statistics.median(r["gold_writes_s"][t] for r in runs), 3)
                          for t in runs[0]["gold_writes_s"]},
        "runs": harness.rounded([{k: v for k, v in r.items() if k not in ("rows", "gold_writes_s")} for r in runs]),
    }


def progress_per_flow() -> None:
    """The runner's own line per flow run (rows, version, seconds): a catch-up takes minutes, so show it moving."""
    logging.getLogger("lakehouse.streaming.runner").setLevel(logging.INFO)


def describe(events: int) -> Callable[[str, dict], str]:
    def said(_name: str, run: dict) -> str:
        if "stages_s" in run:
            return f", {events / run['seconds']:,.0f} events/s (" + ", ".join(
                f"{k} {v:.1f} s" for k, v in run["stages_s"].items()) + ")"
        layers = run["layers_s"]
        return (f", {events / run['seconds']:,.0f} events/s (bronze {layers['bronze']:.1f} s, silver "
                f"{layers['silver']:.1f} s, gold {layers['gold']:.1f} s)")
    return said


def at_size(runs: list[dict], events: int) -> dict:
    """Medians of the runs at one size: whole, per layer, per flow."""
    med = statistics.median(r["seconds"] for r in runs)
    peaks: dict[str, float] = {}
    for run in runs:
        for name, value in run["peak_rss_mib"].items():
            if value is not None:
                peaks[name] = max(peaks.get(name, 0.0), value)
    return {
        "events": events,
        "median_s": round(med, 3),
        "events_per_s": round(events / med),
        "layers_s": {k: round(statistics.median(r["layers_s"][k] for r in runs), 3) for k in LAYERS},
        "layers_in_batches_s": {k: round(statistics.median(r["in_batches_s"][k] for r in runs), 3) for k in LAYERS},
        "flows_s": {f: round(statistics.median(r["flows_s"][f] for r in runs), 3) for f in runs[0]["flows_s"]},
        "flows_in_batches_s": {f: round(statistics.median(r["flows_in_batches_s"].get(f, 0.0) for r in runs), 3)
                               for f in runs[0]["flows_s"]},
        "rows_written": runs[0]["rows"],
        "batches": runs[0]["batches"],
        "late_rows": runs[0]["late"],
        "max_peak_rss_mib": peaks,
        "runs": harness.rounded([{k: v for k, v in r.items() if k not in ("flows_s", "flows_in_batches_s", "rows", "batches", "late")}
                                 for r in runs]),
    }


def fits(sizes: list[dict]) -> dict:
    """The least-squares line of time vs events through each size's median, whole and per layer."""
    xs = [s["events"] for s in sizes]
    out = {"total": harness.linear_fit(xs, [s["median_s"] for s in sizes])}
    for layer in LAYERS:
        out[layer] = harness.linear_fit(xs, [s["layers_s"][layer] for s in sizes])
    return out


def run_sizes(spark, settings, broker, sizes: list[int], rounds: int, *, seed: int = harness.SEED,
              quality: bool = True, driver_pid: int | None = None, parallel: int = 1,
              floor: bool = False, floor_sides: tuple[str, ...] = (), marginal: str | None = None,
              against: str | None = None) -> tuple[list[dict], dict, dict]:
    """Preload and catch up at each size in turn (the log grows between sizes); a warm-up before the first.

    With `floor`, the floor (bench.bare_pipeline) runs beside each catch-up, alternating, first side rotating;
    so do the further floors named in `floor_sides` (FLOOR_GOLD's keys); with `marginal`, so does a catch-up
    without that flow (and each further floor without it); with `against`, one with that setting changed.
    Their figures per size come second, by side.
    """
    events = harness.shop_events(max(sizes), seed=seed)
    in_log = {"n": 0}
    sides = {"pipeline": make_side(spark, settings, lambda: in_log["n"], quality=quality, parallel=parallel)}
    if floor:
        sides["floor"] = make_floor(spark, settings, lambda: in_log["n"], parallel=parallel)
    for side in floor_sides:
        sides[side] = make_floor(spark, settings, lambda: in_log["n"], parallel=parallel, gold=FLOOR_GOLD[side])
        if marginal:
            sides[f"{side}_without"] = make_floor(spark, settings, lambda: in_log["n"], parallel=parallel,
                                                  gold=FLOOR_GOLD[side], without=marginal)
    if marginal:
        sides["without"] = make_side(spark, settings, lambda: in_log["n"], quality=quality, parallel=parallel,
                                     without=marginal)
    if against:
        sides["against"] = make_side(spark, against_setting(against, settings), lambda: in_log["n"], quality=quality,
                                     parallel=parallel)
    probes = [harness.PeakMemory("spark_driver", driver_pid), harness.PeakMemory("broker", broker.pid)]
    out: list[dict] = []
    beside: dict[str, list[dict]] = {}
    for i, size in enumerate(sorted(sizes)):
        say(f"log: {in_log['n']:,} -> {size:,} shop events")
        harness.send(events, size - in_log["n"], broker.bootstrap)
        in_log["n"] = size
        runs = harness.alternate(sides, rounds, probes=probes, warm_up=i == 0, describe=describe(size))
        out.append(at_size(runs["pipeline"], size))
        if floor:
            beside.setdefault("floor", []).append(floor_at_size(runs["floor"], runs["pipeline"], size))
        for side in floor_sides:
            beside.setdefault(side, []).append(floor_at_size(runs[side], runs["pipeline"], size))
            if marginal:
                beside.setdefault(f"{side}_marginal", []).append(
                    marginal_at_size(runs[f"{side}_without"], runs[side], size, marginal))
        if marginal:
            beside.setdefault("marginal", []).append(marginal_at_size(runs["without"], runs["pipeline"], size, marginal))
        if against:
            beside.setdefault("against", []).append(against_at_size(runs["against"], runs["pipeline"], size, against))
    return out, beside, {p.name: p.method for p in probes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400_000,
                        help="shop events at the large size (default 400000; 1600000 is the target's size, "
                             "long on this machine)")
    parser.add_argument("--small", type=int, default=100_000, help="shop events at the small size (default 100000)")
    parser.add_argument("--rounds", type=int, default=2, help="timed catch-ups per size (default 2)")
    parser.add_argument("--no-quality", action="store_true",
                        help="quality=None instead of the project default (the quality gate on)")
    parser.add_argument("--seed", type=int, default=harness.SEED, help="generator seed (default 7, as lakehouse produce)")
    parser.add_argument("--floor", action="store_true",
                        help="also run the floor, the same work by the barest static Spark jobs (bench.bare_pipeline), "
                             "alternating with each catch-up")
    parser.add_argument("--floor-queries", action="store_true",
                        help="also run a floor whose gold tables are each the barest streaming query, alternating, "
                             "for what being a query costs a gold table (needs --floor)")
    parser.add_argument("--floor-merges", action="store_true",
                        help="also run two floors whose gold tables are MERGEd into (by static jobs, by the barest "
                             "queries), alternating, for what keeping a gold table incrementally costs (needs --floor)")
    parser.add_argument("--floor-shared", action="store_true",
                        help="also run two floors where the gold tables streaming the same input share one query "
                             "that MERGEs each batch into them one after another, without and with txn ids, "
                             "alternating, for what one more gold table costs such a design (needs --floor)")
    parser.add_argument("--marginal", metavar="FLOW", choices=leaf_gold_flows(),
                        help="also run the catch-up without FLOW (a gold flow no other flow reads), alternating, "
                             "for what one more gold table adds to a catch-up (and each further floor without "
                             "it, for what it adds to that floor's gold stage)")
    parser.add_argument("--against", metavar="LAKEHOUSE_NAME=VALUE",
                        help="also run the catch-up with this one setting changed, alternating (e.g. a default's "
                             "old value), and report its time over the project default's")
    parser.add_argument("--parallel", type=int, default=None,
                        help="flows run at once (default: LAKEHOUSE_CATCH_UP_PARALLEL, as lakehouse run)")
    harness.recording_options(parser, quick="2000 and 5000 events, 1 run each after the warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.small, args.events, args.rounds = 2_000, 5_000, 1
    floor_sides = tuple(side for side, gold in FLOOR_GOLD.items() if getattr(args, gold.option[2:].replace("-", "_")))
    for flag in sorted({FLOOR_GOLD[side].option for side in floor_sides}):
        if not args.floor:
            parser.error(f"{flag} compares with the floor's static jobs: give --floor too")
    if not 0 < args.small < args.events:
        parser.error(f"--small ({args.small}) must be above 0 and below --events ({args.events})")
    record = harness.keeps(args)
    if args.against:
        from lakehouse.infra.settings import Settings

        against_setting(args.against, Settings.from_env({}))   # a mistyped setting stops before the bench starts
    harness.log_warnings()
    progress_per_flow()

    started_at = harness.utc_now()
    where = harness.machine()
    quality = not args.no_quality
    say(f"bench.pipeline: {args.small:,} then {args.events:,} shop events, {args.rounds} catch-ups each, quality "
        f"gate {'on' if quality else 'off'}; {where}")
    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker, \
            harness.spark_session(settings, NAME) as (spark, driver_pid):
        from lakehouse.streaming.flows import FLOWS

        parallel = args.parallel or settings.catch_up_parallel
        sizes, beside, memory_method = run_sizes(spark, settings, broker, [args.small, args.events], args.rounds,
                                                 seed=args.seed, quality=quality, driver_pid=driver_pid,
                                                 parallel=parallel, floor=args.floor,
                                                 floor_sides=floor_sides,
                                                 marginal=args.marginal,
                                                 against=args.against)
        spark_conf = {"master": settings.spark_master, "shuffle_partitions": settings.spark_shuffle_partitions,
                      "driver_memory": settings.spark_driver_memory,
                      "driver_java_options": settings.spark_java_options, "scheduler_mode": "FAIR",
                      "flows_at_once": parallel}
    line = fits(sizes)
    large = sizes[-1]
    at_target, at_target_is = at_target_size(large, line["total"])
    result = {
        "bench": NAME,
        "date": started_at.isoformat(timespec="seconds"),
        "machine": where,
        "load_end": harness.load_now(),
        "command": harness.command_line("bench.pipeline", argv),
        "input": "streaming.generator shop events, all topics, lakehouse produce's fault mix (Mix())",
        "seed": args.seed,
        "flows": len(FLOWS),
        "quality": "on: the quality gate, as lakehouse run (project default)" if quality else "off: quality=None",
        "spark": spark_conf,
        "rounds": args.rounds, "warm_up": "one catch-up at the small size",
        "sizes": sizes,
        "fit": {k: v.as_dict() for k, v in line.items()},
        "fit_note": "a line through the two sizes' medians (exact with two points: no R^2)",
        "events_per_s_at_1_6M": at_target,
        "events_per_s_at_1_6M_is": at_target_is,
        "target": f">= {TARGET_EVENTS_PER_S:,} events/s at {TARGET_AT:,} events",
        "target_met": at_target is not None and at_target >= TARGET_EVENTS_PER_S,
        "peak_memory_method": memory_method,
    }
    if beside.get("marginal"):
        result["marginal"] = beside["marginal"]
    if beside.get("against"):
        result["against"] = beside["against"]
    if floors := beside.get("floor"):
        floor_line = harness.linear_fit([f["events"] for f in floors], [f["median_s"] for f in floors])
        result["floor"] = {
            "what": "bench.bare_pipeline: the same tables from the same log by the project's pure transforms, one "
                    "static Spark job per table (read, transform, Delta overwrite), no streaming query, checkpoint, "
                    "watermark, MERGE or quality gate; the stages' tables as many at once as the catch-up's flows",
            "sizes": floors,
            "fit": floor_line.as_dict(),
        }
        result["floor"]["events_per_s_at_1_6M"], result["floor"]["events_per_s_at_1_6M_is"] = at_target_size(
            floors[-1], floor_line)
    for side, gold in FLOOR_GOLD.items():
        if beside.get(side):
            result[side] = {"what": gold.what, "sizes": beside[side],
                            "gold_per_table": per_gold_table(beside["floor"], beside[side])}
            if beside.get(f"{side}_marginal"):
                result[side]["marginal"] = beside[f"{side}_marginal"]
    harness.publish(NAME, result, summary(result), docs_row, record)
    return 0


def at_target_size(large: dict, line) -> tuple[int | None, str]:
    """Events/s at the target's size: measured there, else from the line, which says nothing if it does not rise."""
    if large["events"] == TARGET_AT:
        return large["events_per_s"], "measured"
    if line.slope <= 0:
        return None, ("not extrapolated: the larger size took no longer than the smaller one, so the line through "
                      "them says nothing about 1.6M (the machine's noise; use sizes further apart)")
    return round(TARGET_AT / line.predict(TARGET_AT)), "extrapolated from the line"


def at_target_text(result: dict) -> str:
    at = result["events_per_s_at_1_6M"]
    return (f"{at:,} events/s" if at is not None else "no figure") + f" ({result['events_per_s_at_1_6M_is']})"


def layer_text(size: dict) -> str:
    """Seconds per layer, and of them in micro-batches (the rest: starting queries, the runner's bookkeeping)."""
    l, b = size["layers_s"], size.get("layers_in_batches_s") or {}
    return "flow-seconds: " + ", ".join(f"{k} {l[k]:.1f} s" + (f" ({b[k]:.1f} in batches)" if k in b else "")
                                        for k in LAYERS)


def summary(result: dict) -> str:
    lines = [f"{s['events']:,} events: {s['events_per_s']:,} events/s (median {s['median_s']:.1f} s; "
             f"{layer_text(s)})" for s in result["sizes"]]
    f = result["fit"]
    lines.append(f"fixed cost {f['total']['intercept_s']:.1f} s, {f['total']['slope_us_per_event']:.1f} µs/event "
                 f"(bronze {f['bronze']['intercept_s']:.1f} s + {f['bronze']['slope_us_per_event']:.1f} µs, silver "
                 f"{f['silver']['intercept_s']:.1f} s + {f['silver']['slope_us_per_event']:.1f} µs, gold "
                 f"{f['gold']['intercept_s']:.1f} s + {f['gold']['slope_us_per_event']:.1f} µs)")
    large = result["sizes"][-1]
    slow = sorted(large["flows_s"].items(), key=lambda kv: -kv[1])[:5]
    lines.append("slowest flows at the large size: " + ", ".join(
        f"{n} {s:.1f} s ({large['flows_in_batches_s'].get(n, 0.0):.1f} in batches)" for n, s in slow))
    late = {n: k for n, k in large.get("late_rows", {}).items() if k}
    lines.append("routed to late_arrivals at the large size: " + (", ".join(
        f"{n} {k:,}" for n, k in sorted(late.items())) or "none"))
    lines.append(f"at 1.6M events: {at_target_text(result)}; "
                 f"target {result['target']}: {harness.met(result['target_met'])}")
    if "floor" in result:
        lines.append(floor_text(result["floor"]))
    lines.extend(floor_queries_text(result[side], side) for side in FLOOR_GOLD if side in result)
    if "marginal" in result:
        lines.append(marginal_text(result["marginal"]))
    if "against" in result:
        lines.append(against_text(result["against"]))
    return "\n".join(lines)


def against_text(against: list[dict]) -> str:
    """The catch-up with the other setting at each size, against the project default's."""
    return f"with {against[0]['setting']}: " + "; ".join(
        f"{a['events']:,}: {a['median_s']:.1f} s, {a['over_default']:.2f}x the default's time (rounds "
        + ", ".join(f"{r:.1f}" for r in a["per_round_s"]) + " s)" for a in against)


def marginal_text(marginal: list[dict]) -> str:
    """What one more gold table adds to a catch-up, at each size."""
    return f"one more gold table ({marginal[0]['flow']}) adds: " + "; ".join(
        f"{m['events']:,}: {m['adds_s']:+.1f} s (without it {m['without_s']:.1f} s; rounds "
        + ", ".join(f"{a:+.1f}" for a in m["adds_per_round_s"]) + ")" for m in marginal)


def per_gold_table(static: list[dict], queries: list[dict]) -> list[dict]:
    """Each floor's gold stage per gold table at each size: static jobs against bare streaming queries."""
    out = []
    for a, b in zip(static, queries):
        n = sum(1 for table in a["rows_written"] if table.startswith("gold_"))
        writes = b["gold_writes_s"]
        out.append({"events": a["events"], "gold_tables": n,
                    "static_s": round(a["stages_s"]["gold"] / n, 3), "queries_s": round(b["stages_s"]["gold"] / n, 3),
                    "write_median_s": round(statistics.median(writes.values()), 3),
                    "write_max": max(writes.items(), key=lambda kv: kv[1])})
    return out


class FloorGold(NamedTuple):
    """How a further floor writes its gold tables (bench.bare_pipeline's options), and what it is called."""

    option: str     # the command-line option that runs it
    as_queries: bool
    merge: bool
    says: str       # in the summary: "a static job -> <says>"
    what: str       # in the JSON
    shared: bool = False
    once: bool = False

    def options(self) -> dict[str, bool]:
        """bench.bare_pipeline.run_floor's keyword arguments for this floor."""
        return {"gold_as_queries": self.as_queries, "gold_merge": self.merge, "gold_shared": self.shared,
                "gold_once": self.once}


FLOOR_GOLD = {
    "floor_queries": FloorGold(
        "--floor-queries", True, False, "the barest streaming query",
        "bench.bare_pipeline with gold_as_queries: the floor, but each gold table by the barest streaming query "
        "(its first input as a Delta stream, availableNow, a checkpoint, foreachBatch: the same computation and "
        "one Delta overwrite)"),
    "floor_static_merges": FloorGold(
        "--floor-merges", False, True, "a static job MERGEing",
        "bench.bare_pipeline with gold_merge: the floor, but each gold table's computation MERGEd into the table on "
        "its keys (created empty first) instead of overwriting it"),
    "floor_merges": FloorGold(
        "--floor-merges", True, True, "the barest query MERGEing",
        "bench.bare_pipeline with gold_as_queries and gold_merge: each gold table the barest query MERGEing its "
        "batch's computation into the table on its keys, as an incremental table must"),
    "floor_shared_merges": FloorGold(
        "--floor-shared", False, True, "one query per streamed input MERGEing",
        "bench.bare_pipeline with gold_shared and gold_merge: the gold tables that stream the same input share one "
        "barest query, each batch (persisted) MERGEd into them one after another", shared=True),
    "floor_shared_merges_once": FloorGold(
        "--floor-shared", False, True, "one query per streamed input MERGEing with txn ids",
        "bench.bare_pipeline with gold_shared, gold_merge and gold_once: as floor_shared_merges, each MERGE with "
        "Delta's txn id (app id, batch id), as a crash-safe stream needs", shared=True, once=True),
}


def floor_queries_text(fq: dict, side: str = "floor_queries") -> str:
    """What a gold table costs the floor's gold stage, as a static job and as the barest query (overwriting or merging);
    for a shared query, also each gold table's own write in its batch (what one more gold table adds there)."""
    def writes(g: dict) -> str:
        name, slowest = g["write_max"]
        return (f"; each table's MERGE in the batch {g['write_median_s']:.2f} s (median; slowest {name} "
                f"{slowest:.2f} s)" if FLOOR_GOLD[side].shared else "")

    return f"floor's gold stage per gold table, a static job -> {FLOOR_GOLD[side].says}: " + "; ".join(
        f"{g['events']:,}: {g['static_s']:.2f} -> {g['queries_s']:.2f} s ({g['gold_tables']} tables){writes(g)}"
        for g in fq["gold_per_table"]) + (f"; in its gold stage, {marginal_text(fq['marginal'])}" if "marginal" in fq
                                          else "")


def floor_text(floor: dict) -> str:
    """The floor's figures at each size, its line, and the pipeline's time over the floor's."""
    sizes = "; ".join(f"{s['events']:,}: {s['median_s']:.1f} s, {s['events_per_s']:,} events/s ("
                      + ", ".join(f"{k} {v:.1f} s" for k, v in s["stages_s"].items())
                      + f"), pipeline/floor {s['pipeline_over_floor']:.2f}" for s in floor["sizes"])
    f = floor["fit"]
    return (f"floor (barest static jobs): {sizes}; line {f['intercept_s']:.1f} s + {f['slope_us_per_event']:.1f} "
            f"µs/event; at 1.6M {at_target_text(floor)}")


def docs_row(result: dict) -> str:
    small, large = result["sizes"][0], result["sizes"][-1]
    f = result["fit"]
    date = result["date"][:16].replace("T", " ")
    size_note = "" if large["events"] == TARGET_AT else f" ({TARGET_AT:,} takes too long here: extrapolated)"
    floor = result.get("floor")
    return harness.docs_row(
        date, f"`{result['command']}`",
        f"shop events (5 topics, produce's fault mix); whole catch-up, {result['flows']} flows via run_flow "
        f"({result['spark'].get('flows_at_once', 1)} at once), driver JVM options "
        f"`{result['spark'].get('driver_java_options', '(JVM default)')}`, "
        f"availableNow, fresh lake each run, quality gate {'on (project default)' if 'on' in result['quality'] else 'off'}; "
        f"{small['events']:,} and {large['events']:,} events{size_note}, median of {result['rounds']} runs per size "
        f"after a warm-up; before = small size, after = large size"
        + (f"; the floor alternating with each catch-up: {floor['what']}" if floor else ""),
        f"{small['events']:,}: {small['median_s']:.1f} s, {small['events_per_s']:,} events/s ({layer_text(small)})",
        f"{large['events']:,}: {large['median_s']:.1f} s, {large['events_per_s']:,} events/s ({layer_text(large)}); "
        f"peak RSS driver {large['max_peak_rss_mib'].get('spark_driver')} MiB, broker "
        f"{large['max_peak_rss_mib'].get('broker')} MiB",
        f"fixed cost {f['total']['intercept_s']:.1f} s + {f['total']['slope_us_per_event']:.1f} µs/event; at 1.6M "
        f"{at_target_text(result)}; target "
        f">= {TARGET_EVENTS_PER_S:,} events/s {harness.met(result['target_met'])}"
        + (f"; {floor_text(floor)}" if floor else "")
        + "".join(f"; {floor_queries_text(result[side], side)}" for side in FLOOR_GOLD if side in result)
        + (f"; {marginal_text(result['marginal'])}" if "marginal" in result else "")
        + (f"; {against_text(result['against'])}" if "against" in result else ""),
        f"{result['machine']}, {result['load_end']} at the end",
    )


if __name__ == "__main__":
    raise SystemExit(main())
