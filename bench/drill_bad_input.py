"""Drill: the bad-input corpus mixed into shop events, through the real broker and flows; where did each record go?

    .venv/bin/python -m bench.drill_bad_input [--copies K] [--events N] [--no-quality] [--silver-only]

Issue 9, item 6. The drill starts its own Kafka broker (KRaft, free ports, state in a temporary folder,
stopped by its PID at the end, also on error) and creates the topics from their specs. Then:

1. warm-up: the first half of N shop events (streaming.generator, `lakehouse produce`'s default fault
   mix) is sent and the bronze and silver flows catch up, so that silver has a watermark;
2. the other half is sent with the corpus (bench/bad_records.py) K times mixed in at random places,
   and the whole catch-up runs (every flow of streaming.flows.FLOWS, availableNow, as `lakehouse run`
   does; --silver-only: bronze and silver), with the quality gate unless --no-quality;
3. the lake is checked against what was produced, record by record (`check`): each record's Kafka
   coordinates as the producer's delivery report gave them, or its refusal; where each must be is
   computed here in plain Python from what was sent, never from the flows' own figures.

It prints the kinds, the records sent and checked, where each went, and the differences (0 when every
record is where it must be). Exit status 1 when there are differences or a flow failed. A drill, not a
benchmark: it records nothing.

The checking takes a lake root and the list of what was sent (`Sent`), so another runner (`lakehouse
stream`) can fill the same lake and be checked the same way.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import reduce
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from bench.bad_records import OUTCOMES, TOPICS, BadRecord, Outcome, corpus
from bench.harness import free_port
from lakehouse.pipelines import shop

log = logging.getLogger("bench.drill_bad_input")

Coords = tuple[str, int, int]


# ------------------------------------------------------------------ what is sent

@dataclass(frozen=True)
class Outgoing:
    """One record to send and what it must become; `event_id` for records that are valid events."""

    label: str                      # corpus kind, or "shop:<kind>" for generated events
    topic: str
    key: bytes | None
    value: bytes | None
    outcome: Outcome | None         # None: a valid event, silver or a duplicate (settled after sending)
    reason: str | None = None
    detail: str | None = None
    check_detail: bool = True       # generated faults name a reason only
    event_id: str | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    producer: Mapping[str, Any] = field(default_factory=dict)
    refusal: str | None = None


@dataclass(frozen=True)
class Sent:
    """An outgoing record as the producer saw it: its coordinates, or the error that refused it."""

    record: Outgoing
    outcome: Outcome                # where it must be
    coords: Coords | None           # None: refused
    error: str | None = None        # the producer's error name (refused records)


def from_bad(record: BadRecord) -> Outgoing:
    """A corpus record; its valid kinds (silver) are settled with the other valid events."""
    return Outgoing(
        label=record.kind, topic=record.topic, key=record.key, value=record.value,
        outcome=None if record.outcome == "silver" else record.outcome, reason=record.reason,
        detail=record.detail, event_id=record.event_id, headers=record.headers, producer=record.producer,
        refusal=record.refusal,
    )


def from_generated(record: Any, sent_at: datetime) -> Outgoing:
    """A record of streaming.generator: valid and duplicate events are settled later; faults name their reason."""
    value = record.encode(sent_at)
    if record.kind == "malformed":
        return Outgoing(label=f"shop:{record.corruption}", topic=record.topic, key=record.key, value=value,
                        outcome="quarantine", reason=record.expected_reason, check_detail=False,
                        headers=tuple(record.headers))
    return Outgoing(label=f"shop:{record.kind}", topic=record.topic, key=record.key, value=value, outcome=None,
                    event_id=record.event["event_id"], headers=tuple(record.headers))


def producer_settings(bootstrap: str, extra: Mapping[str, Any] = {}) -> dict[str, Any]:
    """The project's producer settings (streaming.producer), with a record's own additions."""
    from lakehouse.streaming.producer import producer_config

    return {**producer_config(bootstrap), "log_level": 0, **extra}


def send(bootstrap: str, records: Iterable[Outgoing], *, timeout_s: float = 120) -> list[Sent]:
    """Send each record in order (those with producer settings of their own through their own producer).

    Records that must be valid events keep `outcome` None here; `settle` decides silver or duplicate.
    A refusal is kept as the error's name (KafkaError.name(), e.g. MSG_SIZE_TOO_LARGE); any other error,
    or a record that is neither delivered nor refused, raises: the drill cannot check what it did not send.
    """
    from confluent_kafka import KafkaException, Producer

    records = list(records)
    producers: dict[tuple, Producer] = {}
    results: dict[int, tuple[Coords | None, str | None]] = {}

    def delivered(i: int):
        def callback(err, msg) -> None:
            results[i] = (None, err.name()) if err is not None else ((msg.topic(), msg.partition(), msg.offset()), None)
        return callback

    for i, rec in enumerate(records):
        extra = tuple(sorted(rec.producer.items()))
        if extra not in producers:
            producers[extra] = Producer(producer_settings(bootstrap, rec.producer))
        producer = producers[extra]
        while True:
            try:
                producer.produce(rec.topic, key=rec.key, value=rec.value, headers=list(rec.headers) or None,
                                 on_delivery=delivered(i))
                break
            except BufferError:
                producer.poll(0.2)
            except KafkaException as exc:        # refused before it left the client (e.g. over message.max.bytes)
                results[i] = (None, exc.args[0].name())
                break
        producer.poll(0)
    for producer in producers.values():
        if producer.flush(timeout_s):
            raise RuntimeError("the producer could not deliver every record in time")
    out = []
    for i, rec in enumerate(records):
        coords, error = results[i]
        if coords is None and rec.outcome != "refused":
            raise RuntimeError(f"record {i} ({rec.label}) was refused unexpectedly: {error}")
        out.append(Sent(rec, rec.outcome or "silver", coords, error))
    return out


def settle(sent: list[Sent]) -> list[Sent]:
    """Where each valid event must be: the copy at the lowest coordinates of each (topic, event id) in silver,
    the others counted as duplicates; late ones keep `late` (the first copy of a late id is late, the rest too).

    Copies share a key, so a partition: the lowest offset is the first one sent, whichever batch it falls in.
    """
    first: dict[tuple[str, str], Coords] = {}
    for s in sent:
        if s.record.outcome is None and s.coords is not None:
            key = (s.record.topic, s.record.event_id)
            if key not in first or s.coords < first[key]:
                first[key] = s.coords
    out = []
    for s in sent:
        if s.record.outcome is None and s.coords is not None:
            outcome: Outcome = "silver" if first[(s.record.topic, s.record.event_id)] == s.coords else "duplicate"
            s = Sent(s.record, outcome, s.coords, s.error)
        out.append(s)
    return out


# ------------------------------------------------------------------ what the lake holds

@dataclass
class Lake:
    """Where the lake put records, by Kafka coordinates (silver's own late arrivals only)."""

    bronze: set[Coords]
    silver: dict[Coords, str]                                  # -> event id
    silver_ids: Counter                                         # (topic, event id) -> rows
    quarantine: dict[Coords, tuple[str, str | None, bytes | None]]   # -> reason, detail, raw value
    quarantine_rows: int
    late: dict[Coords, str]                                    # -> event id


def read_lake(spark: Any, lake_root: str, topic_names: Iterable[str] = TOPICS) -> Lake:
    """The coordinates in bronze, silver, quarantine and silver's late arrivals of the given topics."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from lakehouse.schemas import tables
    from lakehouse.pipelines.shop import BY_TOPIC

    names = list(topic_names)

    def table(spec):
        path = spec.path(lake_root)
        return spark.read.format("delta").load(path) if DeltaTable.isDeltaTable(spark, path) else None

    def union(specs, *columns):
        """The columns of the tables that exist, as one DataFrame (one Spark job to collect), or None."""
        found = [df.select(*columns) for df in map(table, specs) if df is not None]
        return reduce(lambda a, b: a.unionByName(b), found) if found else None

    bronze: set[Coords] = set()
    silver: dict[Coords, str] = {}
    ids: Counter = Counter()
    df = union([BY_TOPIC[n].bronze_table for n in names], "topic", "partition", "offset")
    if df is not None:
        bronze = {(r.topic, r.partition, r.offset) for r in df.collect()}
    df = union([BY_TOPIC[n].silver_table for n in names], "topic", "partition", "offset", "event_id")
    if df is not None:
        for r in df.collect():
            silver[(r.topic, r.partition, r.offset)] = r.event_id
            ids[(r.topic, r.event_id)] += 1
    quarantine: dict[Coords, tuple[str, str | None, bytes | None]] = {}
    rows = 0
    df = table(tables.QUARANTINE)
    if df is not None:
        for r in df.where(F.col("topic").isin(names)).select("topic", "partition", "offset", "reason", "detail",
                                                            "value").collect():
            rows += 1
            raw = None if r.value is None else bytes(r.value)
            quarantine[(r.topic, r.partition, r.offset)] = (r.reason, r.detail, raw)
    late: dict[Coords, str] = {}
    df = table(tables.LATE_ARRIVALS)
    if df is not None:
        silver_flows = [f"silver_{BY_TOPIC[n].entity}" for n in names]
        rows_of_silver = df.where(F.col("flow").isin(silver_flows))
        for r in rows_of_silver.select("topic", "partition", "offset", "event_id").collect():
            late[(r.topic, r.partition, r.offset)] = r.event_id
    return Lake(bronze, silver, ids, quarantine, rows, late)


@dataclass
class Findings:
    """Every sent record compared with where the lake put it."""

    sent: int = 0
    checked: int = 0
    expected: Counter = field(default_factory=Counter)      # outcome -> records that must be there
    placed: Counter = field(default_factory=Counter)        # outcome -> records found there
    by_label: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))   # label -> where they went
    refusals: Counter = field(default_factory=Counter)      # error name -> records
    differences: list[str] = field(default_factory=list)
    identity: str = ""


def placed(lake: Lake, coords: Coords | None) -> list[str]:
    """Every place the record at `coords` is in (one, when all is well)."""
    if coords is None:
        return ["refused"]
    where = [name for name, table in (("silver", lake.silver), ("quarantine", lake.quarantine), ("late", lake.late))
             if coords in table]
    if coords not in lake.bronze:
        return where + ["missing from bronze"]
    return where or ["duplicate"]


def compare(sent: list[Sent], lake: Lake) -> Findings:
    """Each record where it must be, with its reason, detail and raw bytes; the accounting identity.

    Identity: bronze holds exactly the delivered records, and each bronze record is in exactly one of
    silver, quarantine or late arrivals, or is one of the duplicates counted here from what was sent.
    """
    sent = settle(sent)
    f = Findings(sent=len(sent))
    delivered = {s.coords: s for s in sent if s.coords is not None}
    diff = f.differences.append
    if len(delivered) != sum(1 for s in sent if s.coords is not None):
        diff("two sent records share Kafka coordinates")
    for s in sent:
        rec = s.record
        where = placed(lake, s.coords)
        label = rec.label
        f.expected[s.outcome] += 1
        got = where[0] if len(where) == 1 else "+".join(where)
        f.placed[got] += 1
        if got == "quarantine":
            reason, detail, _ = lake.quarantine[s.coords]
            got_said = f"quarantine {reason}" + (f"/{detail}" if detail else "")
        else:
            got_said = got
        f.by_label[label][got_said] += 1
        f.checked += 1
        at = f"{label} at {s.coords[0]}/{s.coords[1]}/{s.coords[2]}" if s.coords else label
        if where != [s.outcome]:
            diff(f"{at}: expected {s.outcome}, found in {got}")
            continue
        if s.outcome == "refused":
            f.refusals[s.error] += 1
            if s.error != rec.refusal:
                diff(f"{at}: refused with {s.error}, expected {rec.refusal}")
        elif s.outcome == "quarantine":
            reason, detail, value = lake.quarantine[s.coords]
            if reason != rec.reason or (rec.check_detail and detail != rec.detail):
                diff(f"{at}: quarantined as {reason}/{detail}, expected {rec.reason}/{rec.detail}")
            if value != rec.value:
                diff(f"{at}: quarantine keeps {None if value is None else len(value)} bytes, sent "
                     f"{None if rec.value is None else len(rec.value)} (or other bytes)")
        elif s.outcome == "silver" and lake.silver[s.coords] != rec.event_id:
            diff(f"{at}: silver holds event {lake.silver[s.coords]}, sent {rec.event_id}")
        elif s.outcome == "late" and lake.late[s.coords] != rec.event_id:
            diff(f"{at}: late_arrivals holds event {lake.late[s.coords]}, sent {rec.event_id}")
    # What the lake holds that nobody sent.
    for name, coords in (("bronze", lake.bronze), ("silver", lake.silver), ("quarantine", lake.quarantine),
                         ("late_arrivals", lake.late)):
        extra = set(coords) - set(delivered)
        if extra:
            diff(f"{name} holds {len(extra)} records no one sent here, e.g. {sorted(extra)[:3]}")
    if lake.quarantine_rows != len(lake.quarantine):
        diff(f"quarantine holds {lake.quarantine_rows} rows for {len(lake.quarantine)} coordinates")
    twice = {k: n for k, n in lake.silver_ids.items() if n > 1}
    if twice:
        diff(f"silver holds {len(twice)} events more than once, e.g. {sorted(twice)[:3]}")
    must = {(s.record.topic, s.record.event_id) for s in sent if s.outcome == "silver"}
    if set(lake.silver_ids) != must:
        diff(f"silver's events differ from the valid events sent: {len(must - set(lake.silver_ids))} missing, "
             f"{len(set(lake.silver_ids) - must)} unexpected")
    homes = set(lake.silver) | set(lake.quarantine) | set(lake.late)
    duplicates = lake.bronze - homes
    expected_duplicates = {s.coords for s in sent if s.outcome == "duplicate"}
    overlaps = (len(set(lake.silver) & set(lake.quarantine)) + len(set(lake.silver) & set(lake.late))
                + len(set(lake.quarantine) & set(lake.late)))
    holds = (len(lake.bronze) == len(lake.silver) + len(lake.quarantine) + len(lake.late) + len(duplicates)
             and overlaps == 0 and duplicates == expected_duplicates and lake.bronze == set(delivered))
    f.identity = (f"bronze {len(lake.bronze)} = silver {len(lake.silver)} + quarantine {len(lake.quarantine)} + "
                  f"late arrivals {len(lake.late)} + duplicates {len(duplicates)} (expected "
                  f"{len(expected_duplicates)}); delivered {len(delivered)}; {'holds' if holds else 'DOES NOT HOLD'}")
    if not holds:
        diff(f"accounting identity: {f.identity}; {overlaps} records in two places")
    return f


def check(spark: Any, lake_root: str, sent: list[Sent]) -> Findings:
    """Read the lake under `lake_root` and compare it with what was sent."""
    return compare(sent, read_lake(spark, lake_root, sorted({s.record.topic for s in sent})))


PLACES = {"quarantine": "quarantine", "silver": "silver", "late": "late_arrivals", "duplicate": "counted duplicates",
          "refused": "refused by the broker"}


def report(f: Findings, *, kinds: list[BadRecord], copies: int, shop_events: int) -> str:
    """The drill's printout."""
    width = max(len(k.kind) for k in kinds) + 2
    lines = [f"bad-input drill: {len(kinds)} kinds x {copies} copies, mixed into {shop_events:,} shop events"]
    lines.append("kinds (expected -> found):")
    for k in kinds:
        got = ", ".join(f"{where} x{n}" for where, n in sorted(f.by_label.get(k.kind, {}).items()))
        lines.append(f"  {k.kind:<{width}} {k.expected:<46} -> {got}")
    shop = {label: n for label, n in f.by_label.items() if label.startswith("shop:")}
    if shop:
        lines.append("shop events (found):")
        for label in sorted(shop):
            got = ", ".join(f"{where} x{n}" for where, n in sorted(shop[label].items()))
            lines.append(f"  {label:<{width}} -> {got}")
    lines.append(f"records sent: {f.sent:,} ({len(kinds) * copies:,} from the corpus, {shop_events:,} shop events)")
    lines.append(f"records checked: {f.checked:,}")
    lines.append("where each went: " + ", ".join(f"{PLACES[o]} {f.placed.get(o, 0):,}" for o in OUTCOMES)
                 + "".join(f", {o} {n}" for o, n in f.placed.items() if o not in OUTCOMES))
    if f.refusals:
        lines.append("refused by Kafka (the producer's delivery report): "
                     + ", ".join(f"{e} x{n}" for e, n in f.refusals.items()))
    lines.append(f"accounting: {f.identity}")
    for d in f.differences[:50]:
        lines.append(f"  DIFFERENCE {d}")
    lines.append(f"differences: {len(f.differences)}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the drill

def mix_in(rng: random.Random, base: list[Outgoing], extra: list[Outgoing]) -> list[Outgoing]:
    """`extra` spread over `base` at random places, each list keeping its own order."""
    slots = sorted(rng.randrange(len(base) + 1) for _ in extra)
    out, j = [], 0
    for i, rec in enumerate(base):
        while j < len(extra) and slots[j] == i:
            out.append(extra[j])
            j += 1
        out.append(rec)
    return out + extra[j:]


def run_flows(spark: Any, ctx: Any, flows: list[Any]) -> list[str]:
    """Each flow to catch-up; what each did, in one line each. A failing flow raises (the stream stopped)."""
    from lakehouse.streaming.runner import run_flow

    said = []
    for flow in flows:
        run = run_flow(spark, flow, ctx)
        s = run.silver
        split = (f" (silver {s.silver}, quarantine {s.quarantined}, late {s.late}, duplicates {s.duplicates})"
                 if s else "")
        said.append(f"{flow.name}: {run.input_rows} rows in {run.batches} batches{split}, {run.duration_s:.1f}s")
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_bad_input", description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=3, help="times the corpus is sent (default 3)")
    parser.add_argument("--events", type=int, default=4000, help="shop events, half before the corpus (default 4000)")
    parser.add_argument("--seed", type=int, default=9, help="generator and mixing seed (default 9)")
    parser.add_argument("--no-quality", action="store_true", help="run the flows without the quality gate")
    parser.add_argument("--silver-only", action="store_true", help="run only the bronze and silver flows")
    args = parser.parse_args(argv)
    if args.copies < 1 or args.events < 2:
        parser.error("--copies must be at least 1 and --events at least 2")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from lakehouse.infra.kafka_broker import local_node
    from lakehouse.infra.retention import duration_ms
    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark
    from lakehouse.quality.gate import Gate
    from lakehouse.schemas import tables, topics
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.pipelines.shop.generator import Mix, ShopGenerator
    from lakehouse.streaming.kafka_topics import ensure_topics

    root = Path(__file__).resolve().parents[1]
    home = Path(tempfile.mkdtemp(prefix="drill-bad-input-"))
    settings = Settings.from_env({
        "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": str(root / ".lakehouse" / "jars"),
        "LAKEHOUSE_KAFKA_PORT": str(free_port()), "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(free_port()),
    })
    node = local_node(settings)
    spark = None
    started = time.monotonic()
    rng = random.Random(args.seed)
    try:
        pid = node.start(settings.jars_dir)
        print(f"Kafka broker pid {pid} on {node.bootstrap}, state in {node.directory}", flush=True)
        ensure_topics(settings.kafka_bootstrap, topics.ALL, replication_factor=1,
                      replay_window_ms=duration_ms(settings.replay_window))
        now = datetime.now(timezone.utc)
        # Event times end a few minutes before now: nothing is implausibly ahead of the broker's clock.
        start = (now - timedelta(seconds=args.events / 20.0) - timedelta(minutes=10)).replace(microsecond=0)
        gen = iter(ShopGenerator(seed=args.seed, start=start, events_per_second=20.0, mix=Mix()))
        shop = [from_generated(next(gen), now) for _ in range(args.events)]
        warm, rest = shop[: args.events // 2], shop[args.events // 2:]
        kinds = corpus("k0", now=now - timedelta(minutes=5))
        bad = [from_bad(r) for copy in range(args.copies)
               for r in corpus(f"k{copy}", now=now - timedelta(minutes=5))]

        lake = str(home / "lake")
        gate = None if args.no_quality else Gate(tables.QUALITY_RESULTS.path(lake), None)
        ctx = FlowContext(
            lake_root=lake, kafka_bootstrap=settings.kafka_bootstrap, quality=gate,
            silver_dedup_watermark=settings.silver_dedup_watermark, gold_watermark=settings.gold_watermark,
            event_time_floor=settings.event_time_floor, event_time_max_ahead=settings.event_time_max_ahead,
        )
        spark = get_spark(settings, "drill-bad-input")
        sent = send(settings.kafka_bootstrap, warm)
        print(f"warm-up: sent {len(sent):,} shop events; bronze and silver catch up", flush=True)
        ingest = [f for f in FLOWS if f.target.layer in ("bronze",) or f.name.startswith("silver_")]
        for line in run_flows(spark, ctx, ingest):
            print(f"  {line}", flush=True)
        sent += send(settings.kafka_bootstrap, mix_in(rng, rest, bad))
        flows = ingest if args.silver_only else list(FLOWS)
        print(f"sent {len(rest):,} shop events with the corpus {args.copies} times mixed in; "
              f"{len(flows)} flows catch up", flush=True)
        for line in run_flows(spark, ctx, flows):
            print(f"  {line}", flush=True)
        findings = check(spark, lake, sent)
        print()
        print(report(findings, kinds=kinds, copies=args.copies, shop_events=len(shop)))
        print(f"({time.monotonic() - started:.0f} s)")
        return 1 if findings.differences else 0
    except Exception as exc:  # noqa: BLE001 - the drill's verdict: a flow that fails is a stopped stream
        print(f"\nthe drill failed: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
        stopped = node.stop()
        if stopped:
            print(f"stopped the Kafka broker (pid {stopped})", flush=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
