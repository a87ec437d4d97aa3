"""`lakehouse stream` (continuous mode) and `lakehouse status` (each stream's lag, last batch and freshness)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from lakehouse.infra.settings import Settings
# Re-exported: `lakehouse status` and the tests read the PID file through this module.
from lakehouse.streaming.stream_pid import pid_file, running_stream, streamed_flows, streamed_triggers  # noqa: F401

log = logging.getLogger("lakehouse")


# Measured on two cores: the orders path's 3 flows keep silver seconds fresh, all 22 flows as their own
# queries leave it minutes behind (docs/performance.md, "Limits on two cores"). Above this many queries per
# core, say so.
QUERIES_PER_CORE = 4


def local_cores(master: str) -> int | None:
    """The task slots of a local master (local, local[N], local[*], local[N,F]); None for a cluster's."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if match is None:
        return None
    slots = match.group(1)
    return (os.cpu_count() or 1) if slots == "*" else int(slots or 1)


def crowded(master: str, queries: int, flows: int | None = None) -> str | None:
    """One sentence for a stream with more queries than a local master's cores can serve each second, else None."""
    cores = local_cores(master)
    if cores is None or queries <= QUERIES_PER_CORE * cores:
        return None
    what = f"{queries} queries" + (f" (for {flows} flows)" if flows is not None and flows != queries else "")
    return (f"{what} share {cores} core{'s' if cores > 1 else ''} ({master}): their micro-batches will queue "
            f"behind each other and silver can fall minutes behind (docs/performance.md); stream only the tables you "
            f"watch (lakehouse stream TABLE ...), leave LAKEHOUSE_STREAM_TRIGGER at auto (its default), which sizes "
            f"each layer's trigger to the cores, or run on more cores.")


def cmd_stream(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.orchestration.resources import build_resources
    from lakehouse.orchestration.runs import dagster_instance
    from lakehouse.orchestration.streams import DagsterReporter
    from lakehouse.streaming.context import duration_micros
    from lakehouse.streaming.continuous import StreamFailed, Supervisor, flows_for, query_count, stream_queries
    from lakehouse.streaming.trigger_sizing import AUTO, resolve
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.kafka_topics import ensure_topics
    from lakehouse.schemas.topics import TopicSpec
    from lakehouse.infra.retention import duration_ms

    flows = flows_for(FLOWS, args.tables)
    unknown = sorted(set(settings.stream_triggers) - {"bronze", "silver", "gold"} - {f.name for f in FLOWS})
    if unknown:
        print(f"error: LAKEHOUSE_STREAM_TRIGGERS names {', '.join(unknown)}, which is neither a layer (bronze, silver, "
              "gold) nor a flow; `lakehouse status` lists the flows.")
        return 2
    other = running_stream(settings)
    if other is not None:
        print(f"error: lakehouse stream is already running on {settings.home} (pid {other}); stop it first "
              "(two streams would share checkpoints).")
        return 2
    resources = build_resources(settings)
    topics = list({s.name: s for f in flows for s in f.sources if isinstance(s, TopicSpec)}.values())
    if topics:
        ensure_topics(settings.kafka_bootstrap, topics, replication_factor=settings.kafka_replication_factor,
                      replay_window_ms=duration_ms(settings.replay_window))
    log.info("starting Spark (%s) for %d flows", settings.spark_master, len(flows))
    sized = settings.stream_trigger.strip().lower() == AUTO
    warning = None if sized else crowded(
        settings.spark_master, query_count(flows, settings.stream_one_query_per_topic), len(flows))
    if warning:
        log.warning(warning)
    spark = resources["spark"].session()
    trigger, triggers, sizing = resolve(
        settings.stream_trigger, settings.stream_triggers,
        stream_queries(flows, settings.stream_one_query_per_topic, settings.stream_triggers),
        cores=spark.sparkContext.defaultParallelism, topics=len(topics))
    if sizing is not None:
        (log.info if sizing.fits else log.warning)("%s", sizing.sentence())
    ctx = resources["lake"].flow_context(resources["kafka"])
    report = None if args.no_dagster else _reporter(DagsterReporter(dagster_instance(settings)))
    supervisor = Supervisor(
        spark, flows, ctx, trigger=trigger, triggers=triggers, report=report,
        report_every_s=duration_micros(settings.stream_report_every) / 1e6, max_failures=settings.stream_max_restarts,
        one_query_per_topic=settings.stream_one_query_per_topic, catch_up_parallel=settings.catch_up_parallel,
    )
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("stopping: each query finishes its current micro-batch (press Ctrl-C again to abort)")
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    pid_file(settings).write_text(
        f"{os.getpid()}\n{' '.join(f.name for f in flows)}\n"
        + " ".join(f"{f.name}={duration_micros(supervisor.trigger_of(f)) / 1e6:g}" for f in flows) + "\n")
    log.info("streaming %d flows every %s%s: %s; Ctrl-C or SIGTERM stops them cleanly", len(flows),
             trigger, "".join(f", {k} every {v}" for k, v in triggers.items()), ", ".join(f.name for f in flows))
    started = time.monotonic()
    try:
        supervisor.run(stop)
    except StreamFailed as exc:
        print(f"error: {exc}")
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        pid_file(settings).unlink(missing_ok=True)
        spark.stop()     # else the JVM can outlive this process while a stopped query's thread unwinds
    log.info("stopped after %.0f s; every checkpoint is consistent, a restart resumes where this stopped",
             time.monotonic() - started)
    return 0


def _reporter(deliver):
    """Sends each report to Dagster and logs one line of what the streams did."""

    def report(reports) -> None:
        deliver(reports)
        moved = [r for r in reports if r.rows_written or r.quarantined]
        if moved:
            lag = max((r.lag_records or 0) for r in reports)
            log.info("%s; Kafka lag %s records", ", ".join(f"{r.table} +{r.rows_written:,}" for r in moved), f"{lag:,}")

    return report


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.streaming.context import FlowContext, duration_micros
    from lakehouse.streaming.continuous import flows_for
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.health import stream_health

    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap=settings.kafka_bootstrap)
    pid = running_stream(settings)
    streamed = streamed_flows(settings) if pid and not args.tables else []
    # Without tables named: the running stream's flows (a stream of a few tables leaves the rest "never").
    flows = [f for f in FLOWS if f.name in streamed] if streamed else flows_for(FLOWS, args.tables)
    health = stream_health(flows, ctx)
    limit_s = duration_micros(settings.stream_freshness) / 1e6
    # A flow whose trigger is slower than the limit commits less often than that and is still on time.
    triggers = streamed_triggers(settings) if pid else {}
    now = time.time()
    rows = [("flow", "table", "last batch", "committed", "lag", "fresh")]
    stale = 0
    for h in health:
        age = h.age_s(now)
        fresh = "-" if age is None else (
            "yes" if age <= max(limit_s, 2 * triggers.get(h.flow, 0)) or h.caught_up else "no")
        stale += fresh == "no"
        rows.append((h.flow, h.table, "-" if h.batch_id is None else str(h.batch_id), _age(age), h.lag_text(), fresh))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    from lakehouse.streaming.fingerprints import DefinitionChanged, changed_on_disk

    for flow in flows:
        if how := changed_on_disk(flow, ctx):
            print(DefinitionChanged(flow.target.name, how))
    when = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    state = f"lakehouse stream is running (pid {pid})" if pid else "lakehouse stream is not running"
    if streamed and len(flows) < len(FLOWS):
        state += f", {len(flows)} of {len(FLOWS)} flows (`lakehouse status TABLE ...` shows others)"
    print(f"{when}: {state}; fresh = caught up, or a batch committed within LAKEHOUSE_STREAM_FRESHNESS "
          f"({settings.stream_freshness}, or two of its flow's triggers when those are longer)"
          f"; lag = Kafka records behind the end, or Delta versions of the input not yet read.")
    return 0 if pid else 3


BENCHES = {
    "ingest": "bronze vs the barest Spark job vs raw Kafka consumers over one preloaded topic (ratios)",
    "pipeline": "bronze -> silver -> gold over N events: events/s, seconds per layer, fixed cost and cost per event",
    "freshness": "send-to-silver and send-to-gold delay (p50/p95/p99) of `lakehouse stream` at fixed rates",
    "growth": "ingest and pipeline at three sizes: is time linear in events? slope and fixed cost",
}
DRILLS = {
    "crash": "kill -9 `lakehouse stream` at random points while it ingests, restart, check nothing lost or doubled",
    "broker-loss": "kill -9 the broker mid-stream, start it again, check the stream resumed exactly",
    "bad-input": "the corpus of bad records through the flows: each to quarantine with its own reason",
    "cluster": "the cluster profile (a Spark standalone cluster, three Kafka nodes, an S3 lake) started in a folder of "
               "its own, a Kafka node killed under `lakehouse stream` on it, every layer checked",
}


def _bench_module(kind: str, name: str):
    """The bench/ module for NAME; benchmarks and drills live in the source checkout, next to the packages."""
    import importlib
    import sys

    root = Path(__file__).resolve().parents[1]
    if not (root / "bench").is_dir():
        raise FileNotFoundError(f"{kind}s live in the bench/ folder of a source checkout; run this from a clone "
                                "of the project.")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(name)


def cmd_bench(settings: Settings, args: argparse.Namespace) -> int:
    return int(_bench_module("benchmark", "bench.run").main([args.name, *args.rest]) or 0)


def cmd_drill(settings: Settings, args: argparse.Namespace) -> int:
    if args.name == "bad-input":
        return int(_bench_module("drill", "bench.drill_bad_input").main(args.rest) or 0)
    if args.name == "cluster":
        return int(_bench_module("drill", "bench.drill_cluster").main(args.rest) or 0)
    return int(_bench_module("drill", "bench.drills").main([args.name, *args.rest]) or 0)


def add_stream_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse stream` and `lakehouse status`."""
    p = sub.add_parser(
        "stream", help="run the flows continuously (seconds from send to silver and gold) until Ctrl-C or SIGTERM",
        description="Starts every flow (or the named tables' flows and the flows they read from) as a continuous "
                    "query in one Spark session, a micro-batch every LAKEHOUSE_STREAM_TRIGGER (default auto: each "
                    "layer's trigger sized to the cores and the number of queries, gold four times slower than "
                    "bronze and silver, and the start-up log says what that sustains; "
                    "LAKEHOUSE_STREAM_TRIGGERS sets another per layer or flow, e.g. \"gold=5 seconds\"; "
                    "LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC=true runs each topic's bronze and silver flows and the "
                    "tables that read only that silver as one query). "
                    "The same flows and checkpoints as the triggered runs (`lakehouse run`, the Dagster catch_up "
                    "job): the two modes can take turns on one lake without losing or repeating a record. A flow "
                    "whose input table does not exist yet starts when it appears. A failed query is restarted after "
                    "a backoff (2 s doubling to 60 s) and its failure logged in one sentence; after "
                    "LAKEHOUSE_STREAM_MAX_RESTARTS failures in a row the command stops with that sentence (exit 1). "
                    "Every LAKEHOUSE_STREAM_REPORT_EVERY each table's progress is reported to the Dagster instance "
                    "(materializations and observations with rows, Delta version, offsets and lag) and every "
                    "micro-batch's progress is appended to the table stream_progress. Ctrl-C or SIGTERM lets each "
                    "query finish its micro-batch, then stops it.")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="tables to stream, e.g. silver_<entity> gold_<mart> (default: all)")
    p.add_argument("--no-dagster", action="store_true", help="do not report to the Dagster instance")
    p.set_defaults(fn=cmd_stream)

    p = sub.add_parser(
        "status", help="each stream's last batch, lag and freshness (no Spark needed: answers in seconds)",
        description="Reads each flow's checkpoint (its newest committed micro-batch and the offsets it read), the "
                    "newest version of each input table, and the Kafka end offsets, and prints one row per flow: "
                    "last batch, when it committed, how far it is behind, and whether that is within "
                    "LAKEHOUSE_STREAM_FRESHNESS. Exit 0 when `lakehouse stream` is running, 3 when it is not.")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="tables to show (default: all)")
    p.set_defaults(fn=cmd_status)

    p = sub.add_parser(
        "bench", help="run a benchmark from bench/ and append its figures to docs/benchmarks.md",
        description="Each benchmark starts its own broker and Spark, runs its sides alternately after a warm-up, "
                    "and reports median ratios against the engine's own floor, measured in the same run. "
                    "Benchmarks: " + "; ".join(f"{k}: {v}" for k, v in BENCHES.items()) + ". Options after NAME "
                    "go to the benchmark (lakehouse bench NAME --help).")
    p.add_argument("name", choices=sorted(BENCHES), metavar="NAME", help=", ".join(sorted(BENCHES)))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser(
        "drill", help="run a fault drill from bench/ and print its report (exit 0 only with zero differences)",
        description="Drills: " + "; ".join(f"{k}: {v}" for k, v in DRILLS.items()) + ". Options after NAME go "
                    "to the drill (lakehouse drill NAME --help).")
    p.add_argument("name", choices=sorted(DRILLS), metavar="NAME", help=", ".join(sorted(DRILLS)))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of the drill")
    p.set_defaults(fn=cmd_drill)
