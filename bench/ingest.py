"""Bench: how fast bronze ingests a topic, against the barest Spark job and against reading the log raw.

    .venv/bin/python -m bench.ingest [--events 400000] [--rounds 3] [--profile] [--quick] [--record] [--no-record]

Issue 9, item 5. The bench starts its own Kafka broker (KRaft, ports 19400/19401, state in a temporary
folder, stopped by its PID at the end, also on error), creates the topics from their specs, and preloads
--events records of shop.orders.v1 once (3 partitions; the orders of streaming.generator's shop stream
with `lakehouse produce`'s fault mix, so about 2% malformed and 2% duplicated; the producing rate is
logged, not a figure). Then it reads that whole topic, from the earliest offsets to the end, three ways:

- (a) bronze: the project's flow, streaming.runner.run_flow(spark, streaming.flows.BY_NAME["bronze_orders"],
  ctx) with the FlowContext `lakehouse run` builds (orchestration.resources; quality gate on, which bronze
  never calls), availableNow, a fresh lake root and checkpoint each run. Timed: the run_flow call
  (checkpoint inspection, the broker check, the query, Delta's history for the report).
- (b) bare Spark: the same session, spark.readStream.format("kafka") (subscribe, startingOffsets earliest,
  and the project's kafka.fetch.max.wait.ms, a consumer setting) -> select key, value, topic, partition,
  offset, timestamp -> writeStream Delta sink, trigger availableNow, a fresh table and checkpoint each run.
  Timed: start to awaitTermination's return.
- (c) raw: confluent-kafka consumers, one spawned process per partition, each assigning its partition at
  the beginning and calling consume(num_messages=10000) until it has read up to the end offset (the last
  call asks only for the records left, so that it does not wait out its timeout), counting key and value
  bytes. The processes are started and connected first (untimed), then told to go at once; timed from go
  until the last one reported: the upper bound of reading this log on this machine.

One warm-up run of each side, then --rounds rounds of one run per side; the side that goes first rotates
each round (a b c, b c a, c a b, ...). Figures: events per second of each side (events / run time;
median over rounds), and the median over rounds of each round's ratios a/b and a/c of events per second.
Target: a/b >= 0.95 (bronze costs at most 5% over the barest Spark job). For (a) and (b) a streaming
query listener also sums the queries' micro-batch time (Spark's triggerExecution): the rest of a run is
spent outside the batches (starting the query, the runner's checkpoint and Delta-history reads). Peak memory per run: the Spark
driver JVM's and the broker JVM's peak RSS (see bench/harness.py for how, per run), and for (c) the sum of
the consumer processes' own peak RSS. It writes <home>/bench/results/ingest.json (bench.harness.record)
and prints the summary row for docs/benchmarks.md. --profile adds three sides in the same rotation, to say
where (a)'s time over (b)'s goes:
(p0) the bare job reading in batches of at most LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER records (500,000), as
bronze does by default (the issue's bounded batches; the same as (b) while --events fits in one batch),
(p1) the bare job with includeHeaders and the headers column (bronze keeps them; silver reads the schema
header), (p3) the barest job doing bronze's work: the bare query with headers, capped, writing bronze's
own rows (streaming.transforms.bronze.to_bronze) and nothing else (no recorded positions, no commit
metadata, no checks before the start), and (p2) bronze's own query started by streaming.runner.start_flow,
everything bronze writes, without run_flow's reads before and after the query (the table's version, its
history for the report);
each is reported as a share of (a)'s time. --quick is a smoke run (20,000 events, one round after the warm-up) that records
nothing unless --record is given. A figure, never a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
import uuid
from pathlib import Path
from typing import Callable

from bench import harness
from bench.harness import say
from lakehouse.pipelines import shop

NAME = "ingest"
TARGET = 0.95
SIDES = ("bronze", "bare", "raw")
LABELS = {"bronze": "(a) bronze flow", "bare": "(b) bare Spark Kafka->Delta", "raw": "(c) raw confluent-kafka",
          "bare_capped": "(p0) bare, batches capped as bronze's",
          "bare_headers": "(p1) bare + headers", "bronze_query": "(p2) bronze's query alone",
          "bare_same": "(p3) bare, bronze's rows and batches"}
# --profile: the steps between (b) and (a), to say where bronze's extra time goes.
PROFILE = ("bare_capped", "bare_headers", "bare_same", "bronze_query")


# ---------------------------------------------------------------- (c) raw consumers, one process per partition

def raw_worker(bootstrap: str, topic: str, partition: int, ready, go, results) -> None:
    """Connect, learn the partition's end offset, wait for go, then read it from the beginning to the end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    try:
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "enable.partition.eof": False, "log_level": 0,
        })
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
        ready.put(partition)
        go.wait()
        records = size = 0
        if high > low:
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            last = -1
            while last < high - 1:
                # Batches of 10000; the last asks only for what is left, or consume() would wait out its timeout.
                for msg in consumer.consume(num_messages=min(10000, high - 1 - last), timeout=1.0):
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(str(msg.error()))
                    records += 1
                    size += len(msg.value() or b"") + len(msg.key() or b"")
                    last = msg.offset()
        done = time.perf_counter()
        consumer.close()
        peak_kb = 0
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak_kb = int(line.split()[1])
        results.put({"partition": partition, "records": records, "bytes": size, "done": done, "peak_kb": peak_kb,
                     "end_offset": high, "start_offset": low})
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        ready.put(partition)
        results.put({"partition": partition, "error": f"{type(exc).__name__}: {exc}"})


def raw_read(bootstrap: str, topic: str, partitions: int) -> dict:
    """(c): one spawned process per partition; timed from go until every process has reported."""
    mp = multiprocessing.get_context("spawn")
    ready, results, go = mp.Queue(), mp.Queue(), mp.Event()
    procs = [mp.Process(target=raw_worker, args=(bootstrap, topic, p, ready, go, results), daemon=True)
             for p in range(partitions)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        began = time.perf_counter()
        go.set()
        got = [results.get(timeout=600) for _ in procs]
        seconds = time.perf_counter() - began
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    errors = [g["error"] for g in got if "error" in g]
    if errors:
        raise RuntimeError("a raw consumer failed: " + "; ".join(errors))
    # Measured in the parent: queue latency (ms) is in, process start-up is not.
    return {"seconds": seconds, "records": sum(g["records"] for g in got), "bytes": sum(g["bytes"] for g in got),
            "per_partition_s": {g["partition"]: round(g["done"] - began, 3) for g in got},
            "peak_rss_mib": {"consumers": round(sum(g["peak_kb"] for g in got) / 1024, 1)}}


# ---------------------------------------------------------------- the bench

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400_000, help="orders preloaded on shop.orders.v1 (default 400000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, one run per side each (default 3)")
    parser.add_argument("--seed", type=int, default=harness.SEED, help="generator seed (default 7, as lakehouse produce)")
    parser.add_argument("--profile", action="store_true",
                        help="four more sides between (b) and (a): (p0) the bare job in batches capped as bronze's "
                             "(LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER); (p1) the bare job also reading the records' headers; "
                             "(p3) the bare job writing bronze's rows with headers in capped batches; "
                             "(p2) bronze's own query (streaming.runner.start_flow) without run_flow's reads before "
                             "and after it")
    harness.recording_options(parser, quick="20000 events, 1 round after the warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.rounds = min(args.events, 20_000), 1
    record = harness.keeps(args)
    harness.log_warnings()
    result = measure(args.events, args.rounds, args.seed, profile=args.profile)
    result["command"] = harness.command_line("bench.ingest", argv)
    harness.publish(NAME, result, summary(result), docs_row, record)
    return 0


def make_sides(spark, settings, broker, expected: Callable[[], int], *,
               profile: bool = False) -> dict[str, Callable[[str], dict]]:
    """The three sides (five with `profile`), reading shop.orders.v1 whole; each checks it read expected() records."""
    from lakehouse.schemas import topics
    from lakehouse.streaming.flows import BY_NAME
    from lakehouse.streaming.runner import run_flow, start_flow
    from lakehouse.streaming.transforms.bronze import to_bronze

    topic = shop.ORDERS.topic_spec
    flow = BY_NAME["bronze_orders"]
    assert flow.source == topic, f"bronze_orders reads {flow.source}, not {topic.name}"
    runs_root = Path(settings.home) / "runs"
    harness.project_context(settings, str(runs_root / "x"))    # imports Dagster's resources once, untimed
    clock = harness.QueryClock(spark)

    def bronze(label: str) -> dict:
        folder = runs_root / label
        ctx = harness.project_context(settings, str(folder / "lake"))
        mark = clock.mark()
        began = time.perf_counter()
        run = run_flow(spark, flow, ctx)
        seconds = time.perf_counter() - began
        in_batches = sum(clock.since(mark).values())
        harness.drop_lake(spark, folder)
        if run.input_rows != expected() or run.rows_written != expected():
            raise RuntimeError(f"bronze read {run.input_rows} and wrote {run.rows_written} rows, not {expected()}")
        return {"seconds": seconds, "in_batches_s": in_batches, "batches": run.batches,
                "run_flow_duration_s": run.duration_s}

    def timed_query(label: str, start: Callable[[Path], object]) -> dict:
        folder = runs_root / label
        mark = clock.mark()
        began = time.perf_counter()
        query = start(folder)
        query.awaitTermination()
        seconds = time.perf_counter() - began
        in_batches = sum(clock.since(mark).values())
        rows = sum(int(p.numInputRows) for p in query.recentProgress)
        batches = sum(1 for p in query.recentProgress if p.numInputRows > 0)
        harness.drop_lake(spark, folder)
        if rows != expected():
            raise RuntimeError(f"{label} read {rows} rows, not {expected()}")
        return {"seconds": seconds, "in_batches_s": in_batches, "batches": batches}

    def bare_query(folder: Path, *, headers: bool = False, capped: bool = False, same: bool = False):
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", topic.name)
                  .option("startingOffsets", "earliest")
                  # A consumer setting, not bronze's work: the bare job reads with the project's too.
                  .option("kafka.fetch.max.wait.ms", str(settings.kafka_fetch_max_wait_ms)))
        if headers:
            reader = reader.option("includeHeaders", "true")
        if capped and settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
        records = reader.load()
        rows = to_bronze(records) if same else records.select(
            "key", "value", *(["headers"] if headers else []), "topic", "partition", "offset", "timestamp")
        return (rows
                .writeStream.format("delta").queryName("bench_bare")
                .option("checkpointLocation", str(folder / "checkpoint"))
                .trigger(availableNow=True)
                .start(str(folder / "table")))

    def bare(label: str) -> dict:
        return timed_query(label, bare_query)

    def bare_capped(label: str) -> dict:
        return timed_query(label, lambda folder: bare_query(folder, capped=True))

    def bare_headers(label: str) -> dict:
        return timed_query(label, lambda folder: bare_query(folder, headers=True))

    def bare_same(label: str) -> dict:
        return timed_query(label, lambda folder: bare_query(folder, headers=True, capped=True, same=True))

    def bronze_query(label: str) -> dict:
        return timed_query(label, lambda folder: start_flow(
            spark, flow, harness.project_context(settings, str(folder / "lake"))))

    def raw(label: str) -> dict:
        out = raw_read(broker.bootstrap, topic.name, topic.partitions)
        if out["records"] != expected():
            raise RuntimeError(f"the raw consumers read {out['records']} records, not {expected()}")
        return out

    sides = {"bronze": bronze, "bare": bare, "raw": raw}
    if profile:
        sides |= {"bare_capped": bare_capped, "bare_headers": bare_headers, "bare_same": bare_same,
                  "bronze_query": bronze_query}
    return sides


def measure(events: int, rounds: int, seed: int = harness.SEED, *, profile: bool = False) -> dict:
    """Start a broker, preload `events` orders, alternate the three sides; the result as a dict."""
    from lakehouse.schemas import topics

    started_at = harness.utc_now()
    where = harness.machine()
    topic = shop.ORDERS.topic_spec
    say(f"bench.ingest: {events:,} orders on {topic.name}, {rounds} rounds; {where}")
    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker:
        harness.send(harness.order_events(events, seed=seed), events, broker.bootstrap)
        with harness.spark_session(settings, NAME) as (spark, driver_pid):
            sides = make_sides(spark, settings, broker, lambda: events, profile=profile)
            probes = [harness.PeakMemory("spark_driver", driver_pid), harness.PeakMemory("broker", broker.pid)]
            runs = harness.alternate(sides, rounds, probes=probes,
                                     describe=lambda name, run: f", {events / run['seconds']:,.0f} events/s")
            memory_method = {p.name: p.method for p in probes}
    return summarize(runs, events=events, rounds=rounds, topic=topic, started_at=started_at, where=where,
                     memory_method=memory_method)


def summarize(runs: dict[str, list[dict]], *, events: int, rounds: int, topic, started_at, where: str,
              memory_method: dict) -> dict:
    measured = [side for side in (*SIDES, *PROFILE) if side in runs]
    eps = {side: [events / r["seconds"] for r in runs[side]] for side in measured}
    sides = {}
    for side in measured:
        peaks: dict[str, float] = {}
        for run in runs[side]:
            for name, value in run["peak_rss_mib"].items():
                if value is not None:
                    peaks[name] = max(peaks.get(name, 0.0), value)
        sides[side] = {
            "what": LABELS[side],
            "median_s": round(statistics.median(r["seconds"] for r in runs[side]), 3),
            "median_events_per_s": round(statistics.median(eps[side])),
            "events_per_s": [round(x) for x in eps[side]],
            "median_in_batches_s": (round(statistics.median(r["in_batches_s"] for r in runs[side]), 3)
                                    if side != "raw" else None),
            "max_peak_rss_mib": peaks,
            "runs": harness.rounded(runs[side]),
        }
    a_b = [a / b for a, b in zip(eps["bronze"], eps["bare"])]
    a_c = [a / c for a, c in zip(eps["bronze"], eps["raw"])]
    ratio_ab = harness.median_ratio(eps["bronze"], eps["bare"])
    ratio_ac = harness.median_ratio(eps["bronze"], eps["raw"])
    raw_bytes = runs["raw"][0]["bytes"] if runs["raw"] else None
    # Each profile side's time as a share of the bronze flow's, per round: where (a)'s extra time goes.
    profile = {side: {"of_bronze_per_round": [round(b / x, 3) for x, b in zip(eps[side], eps["bronze"])],
                      "median_of_bronze": round(harness.median_ratio(eps["bronze"], eps[side]), 3)}
               for side in (*PROFILE, "bare") if side in runs and any(p in runs for p in PROFILE)}
    return {
        "bench": NAME,
        "date": started_at.isoformat(timespec="seconds"),
        "machine": where,
        "load_end": harness.load_now(),
        "events": events, "topic": topic.name, "partitions": topic.partitions,
        "payload_bytes": raw_bytes,
        "input": "shop.orders.v1 records of streaming.generator (lakehouse produce's fault mix), preloaded once",
        "rounds": rounds, "warm_up": "one run per side",
        "order": "rotating: the side that goes first changes each round",
        "sides": sides,
        "ratio_a_b": {"per_round": [round(x, 3) for x in a_b], "median": round(ratio_ab, 3)},
        "ratio_a_c": {"per_round": [round(x, 4) for x in a_c], "median": round(ratio_ac, 4)},
        "target": f"a/b >= {TARGET}",
        "target_met": ratio_ab >= TARGET,
        "peak_memory_method": memory_method,
        **({"profile": profile} if profile else {}),
    }


def summary(result: dict) -> str:
    s = result["sides"]
    lines = [f"{s[k]['what']}: {s[k]['median_events_per_s']:,} events/s (median {s[k]['median_s']:.2f} s"
             + (f", {s[k]['median_in_batches_s']:.2f} s of it in micro-batches)" if s[k]["median_in_batches_s"]
                is not None else ")") for k in (*SIDES, *PROFILE) if k in s]
    for k, share in result.get("profile", {}).items():
        lines.append(f"{s[k]['what']}: {share['median_of_bronze']} of the bronze flow's time "
                     f"(rounds {share['of_bronze_per_round']})")
    if "bare_capped" in result.get("profile", {}):
        capped = result["profile"]["bare_capped"]
        lines.append(f"a/p0 {capped['median_of_bronze']} (rounds {capped['of_bronze_per_round']}): bronze against the "
                     f"bare job reading in the same capped batches")
    if "bare_same" in result.get("profile", {}):
        same = result["profile"]["bare_same"]
        lines.append(f"a/p3 {same['median_of_bronze']} (rounds {same['of_bronze_per_round']}): bronze against the "
                     f"barest job doing the same work (bronze's rows, headers included, in the same capped batches)")
    lines.append(f"a/b {result['ratio_a_b']['median']} (rounds {result['ratio_a_b']['per_round']}), "
                 f"a/c {result['ratio_a_c']['median']} (rounds {result['ratio_a_c']['per_round']})")
    mem = s["bronze"]["max_peak_rss_mib"]
    lines.append(f"peak RSS during bronze runs: driver {mem.get('spark_driver')} MiB, broker {mem.get('broker')} MiB; "
                 f"raw consumers {s['raw']['max_peak_rss_mib'].get('consumers')} MiB in all")
    lines.append(f"target a/b >= {TARGET}: {harness.met(result['target_met'])}")
    return "\n".join(lines)


def docs_row(result: dict) -> str:
    s = result["sides"]
    date = result["date"][:16].replace("T", " ")
    mem = s["bronze"]["max_peak_rss_mib"]
    return harness.docs_row(
        date, f"`{result['command']}`",
        f"{result['events']:,} orders preloaded on {result['topic']} ({result['partitions']} partitions), read whole, "
        f"fresh lake/checkpoint each run, availableNow; median of {result['rounds']} rounds after a warm-up of each "
        f"side, first side rotating; before = (b) bare Spark Kafka->Delta and (c) raw confluent-kafka, one process "
        f"per partition; after = (a) the bronze flow (run_flow)",
        f"(b) {s['bare']['median_events_per_s']:,} events/s ({s['bare']['median_s']:.1f} s, "
        f"{s['bare']['median_in_batches_s']:.1f} s in micro-batches); "
        f"(c) {s['raw']['median_events_per_s']:,} events/s ({s['raw']['median_s']:.2f} s)",
        f"(a) {s['bronze']['median_events_per_s']:,} events/s ({s['bronze']['median_s']:.1f} s, "
        f"{s['bronze']['median_in_batches_s']:.1f} s in micro-batches); peak RSS driver "
        f"{mem.get('spark_driver')} MiB, broker {mem.get('broker')} MiB",
        f"a/b {result['ratio_a_b']['median']}, a/c {result['ratio_a_c']['median']}; target a/b >= {TARGET} "
        f"{harness.met(result['target_met'])}" + "".join(
            f"; {s[k]['what']} {share['median_of_bronze']} of (a)'s time" for k, share in result.get("profile", {}).items()),
        f"{result['machine']}, {result['load_end']} at the end",
    )


if __name__ == "__main__":
    from bench.ingest import main as _main   # so that the spawned consumers find raw_worker in bench.ingest

    raise SystemExit(_main())
