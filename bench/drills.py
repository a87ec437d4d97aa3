"""Fault drills for `lakehouse stream`: kill -9 the stream ("crash") or the broker ("broker loss") mid-stream.

    .venv/bin/python -m bench.drill_crash [--kills 20] [--events N] [--seed S] [--tables T ...]
    .venv/bin/python -m bench.drill_broker_loss [--losses K] [--events N] [--seed S] [--down 5,30]
    bench.drills.main(["crash" | "broker-loss", ...])   (what `lakehouse drill NAME` calls)

Issue 9, item 6. Each drill starts its own Kafka broker (KRaft, from the Maven jars; crash on ports
19420/19421, broker loss on 19422/19423), with its state in a temporary folder, and runs `lakehouse
stream TABLE ...` as a user would: a subprocess in its own process group, with settings from LAKEHOUSE_*
variables. While a producer thread sends shop events (streaming.generator, no late and no out-of-order
events, 5% duplicates, 3% malformed) at a steady rate through the project's idempotent producer
(acks=all), the drill:

- crash: waits until the stream has committed a micro-batch (of a flow in a layer drawn at random, so
  that kills land in bronze, silver and gold batches alike), then for a random delay, and kills the
  whole process group with SIGKILL (the Python process and its Spark JVM, and nothing survives: checked
  in /proc), then starts `lakehouse stream` again; K times. Production is paced over the kills (the rate
  follows the measured kill cycle), so that every kill lands while events are being sent.
- broker loss: waits likewise, kills the broker with SIGKILL by the PID its launcher recorded
  (infra.kafka_broker), starts it again after a few seconds with the same launcher; the stream must
  resume by itself (a Kafka flow that lost the broker is stopped by its watchdog and restarted with
  backoff). The producer buffers and retries meanwhile; only what the broker acknowledged counts as
  produced.

Then the producer finishes, the stream catches up (every flow's checkpoint at the end of its inputs),
is stopped with SIGTERM (exit 0 expected), and the lake is checked against what was produced:

- bronze: the (topic, partition, offset) set equals the acknowledged set: none missing, none extra,
  none twice;
- silver: event ids unique and equal to the acknowledged valid events' ids (duplicates removed);
  quarantine: exactly the malformed records' coordinates, once each, with the expected reason;
  late arrivals: none (nothing was sent late);
- batch lane (batch.verify.verify_flow): every silver and gold table the stream wrote equals the batch
  recomputation of its flow over its input (silver over bronze, gold over silver; `verify_layers`);
- plain Python: gold_revenue_per_minute (when streamed) equals revenue, orders and items per minute and
  currency computed here from the acknowledged orders.

It prints a report (kills or losses, restarts, records produced, records checked per layer, the
differences, durations) and exits 0 only when every difference is 0. State lives in a temporary folder,
removed at the end unless --keep or the drill failed; every process it started is stopped by its PID,
also on error. A drill, not a benchmark: it records nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from bench import harness
from lakehouse.pipelines import shop

Coords = tuple[str, int, int]

ROOT = Path(__file__).resolve().parents[1]
LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
PORTS = {"crash": (19420, 19421), "broker-loss": (19422, 19423)}   # this module's brokers: 19420-19429 only
# The drills' default selection: the orders and page-view pipelines up to a gold table each (6 flows).
DEFAULT_TABLES = ("gold_revenue_per_minute", "gold_page_views_per_product_minute")
EVENTS_PER_SECOND_OF_EVENT_TIME = 20.0


def say(message: str) -> None:
    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {message}", flush=True)


class DrillError(RuntimeError):
    """The drill could not go on (the stream died, never committed, or never caught up); the message says why."""


# ------------------------------------------------------------------ settings and the stream process

ONE_QUERY_PER_TOPIC = "LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC"
QUERY_PER_FLOW, QUERY_PER_TOPIC = "a query per flow", "one query per topic"


def stream_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment of `lakehouse stream` for these settings: no LAKEHOUSE_* variable of the caller leaks in."""
    env = harness.this_checkout({k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")})
    env.update({
        "LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_JARS_DIR": settings.jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "LAKEHOUSE_KAFKA_NODES": str(settings.kafka_nodes),     # a cluster's bootstrap lists every node
        "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_QUALITY": "false",
        "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "200",
        "LAKEHOUSE_STREAM_TRIGGER": "1 second",   # kills land inside batches of every layer, not between long triggers
    })
    env.update(extra)
    return env


def stream_settings(env: dict[str, str]) -> Any:
    """The Settings `lakehouse stream` reads from `env` (the checks use the same ones)."""
    from lakehouse.infra.settings import Settings

    return Settings.from_env({k: v for k, v in env.items() if k.startswith("LAKEHOUSE_")})


def _mode(env: dict[str, str]) -> str:
    """How a stream started with `env` runs its flows, read as `lakehouse stream` reads it."""
    return QUERY_PER_TOPIC if stream_settings(env).stream_one_query_per_topic else QUERY_PER_FLOW


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command name) of every live process in process group `pgid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append((int(entry), name))
    return found


class StreamProcess:
    """`lakehouse stream TABLE ...` in its own process group (Python and its Spark JVM), output to a log file."""

    def __init__(self, env: dict[str, str], tables: Sequence[str], log: Path):
        self.env = env
        self.tables = list(tables)
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"\n===== drill: lakehouse stream {' '.join(self.tables)} at {datetime.now(timezone.utc):%H:%M:%S}\n".encode())
            self.proc = subprocess.Popen([str(LAKEHOUSE), "stream", *self.tables], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> list[tuple[int, str]]:
        """SIGKILL the whole process group; wait until none of it is left. Returns what was killed."""
        assert self.proc is not None
        members = group_members(self.pid)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + 30
        while group_members(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = group_members(self.pid)
        if left:
            raise DrillError(f"processes of the killed stream survived SIGKILL: {left}")
        return members

    def terminate(self, timeout_s: float = 180) -> int:
        """SIGTERM (each query finishes its micro-batch); returns the exit code. Killed if it overstays."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DrillError(f"lakehouse stream did not stop within {timeout_s:.0f} s of SIGTERM; killed it")

    def ensure_stopped(self) -> None:
        """Whatever state it is in: nothing of it keeps running (used in `finally`)."""
        if self.proc is None:
            return
        if self.proc.poll() is None or group_members(self.pid):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def count(self, text: str) -> int:
        try:
            return self.log.read_text(errors="replace").count(text)
        except OSError:
            return 0


# ------------------------------------------------------------------ the producer

class SteadyProducer:
    """Sends `total` generated records at a steady (adjustable) rate from a thread; keeps what the broker acked.

    The shop's catalog (its products and customers, which the generator sends first) goes at once: it is the
    reference data a shop has before its first event, and paced it kept every event off the topics for minutes.

    The project's producer settings (streaming.producer: idempotent, acks=all); while the broker is away
    librdkafka buffers and retries (message.timeout.ms 5 minutes), so a record is either acknowledged
    with its coordinates, or failed with an error: only acknowledged records count as produced.
    """

    def __init__(self, bootstrap: str, *, total: int, rate: float, seed: int, start: datetime, mix: Any):
        from lakehouse.pipelines.shop.generator import ShopGenerator

        self.bootstrap = bootstrap
        self.total = total
        self.rate = rate
        self.generator = ShopGenerator(seed=seed, start=start, events_per_second=EVENTS_PER_SECOND_OF_EVENT_TIME, mix=mix)
        self.catalog = len(self.generator.products) + len(self.generator.customers)     # sent unpaced
        self.records: list[Any] = []           # GeneratedRecord, by index
        self.acked: dict[int, Coords] = {}
        self.failed: dict[int, str] = {}
        self.unresolved = 0
        self.error: BaseException | None = None
        self.started_at = self.ended_at = 0.0
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-producer", daemon=True)

    @property
    def sent(self) -> int:
        return len(self.records)

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._thread.start()

    def running(self) -> bool:
        return self._thread.is_alive() and self.sent < self.total

    def finish(self, rate: float = 250.0, timeout_s: float = 900) -> None:
        """Send the rest at `rate`, flush, and wait until every record is acknowledged or failed."""
        self.rate = max(self.rate, rate)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise DrillError(f"the producer did not finish within {timeout_s:.0f} s")
        if self.error is not None:
            raise DrillError(f"the producer failed: {self.error}")

    def _run(self) -> None:
        from confluent_kafka import Producer

        from lakehouse.streaming.producer import producer_config

        try:
            producer = Producer({**producer_config(self.bootstrap), "message.timeout.ms": 300_000})

            def delivered(index: int):
                def callback(err, msg) -> None:
                    if err is not None:
                        self.failed[index] = str(err)
                    else:
                        self.acked[index] = (msg.topic(), msg.partition(), msg.offset())
                return callback

            next_at = time.monotonic()
            for index in range(self.total):
                if index <= self.catalog:
                    next_at = time.monotonic()        # pacing starts with the first event
                while (wait := next_at - time.monotonic()) > 0:
                    producer.poll(wait)               # serves delivery reports; returns early when one comes
                if time.monotonic() - next_at > 1.0:
                    next_at = time.monotonic()        # fell behind (e.g. a full queue): no burst to catch up
                next_at += 1.0 / max(self.rate, 0.1)
                record = self.generator.next_record(index)
                self.records.append(record)
                value = record.encode(datetime.now(timezone.utc))
                while True:
                    try:
                        producer.produce(record.topic, key=record.key, value=value, headers=list(record.headers),
                                         on_delivery=delivered(index))
                        break
                    except BufferError:
                        producer.poll(0.5)
                producer.poll(0)
            deadline = time.monotonic() + 330       # past message.timeout.ms: every record gets its verdict
            while len(producer) and time.monotonic() < deadline:
                producer.flush(5)
            self.unresolved = len(producer)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc
        finally:
            self.ended_at = time.monotonic()


def events_start(events: int) -> datetime:
    """A generator start such that `events` events (20 per second of event time) end ten minutes before now."""
    span = timedelta(seconds=events / EVENTS_PER_SECOND_OF_EVENT_TIME)
    return (datetime.now(timezone.utc) - span - timedelta(minutes=10)).replace(second=0, microsecond=0)


def drill_mix() -> Any:
    """No late and no out-of-order events: every difference between the stream and a batch is a fault."""
    from lakehouse.pipelines.shop.generator import Mix

    return Mix(out_of_order=0.0, late=0.0, duplicate=0.05, malformed=0.03)


# ------------------------------------------------------------------ where the stream stands (files only)

def newest_batches(flows: Iterable[Any], lake_root: str) -> dict[str, float]:
    """When each flow last committed a micro-batch (its commit file's mtime; -1: none yet).

    A time, not a batch id: a topic's flows commit in its query's checkpoint (streaming/topic_query.py),
    which starts again at batch 0 at each start.
    """
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.topic_query import covering

    ctx = FlowContext(lake_root=lake_root, kafka_bootstrap="unused:1")
    out = {}
    for flow in flows:
        hop = covering(flow, ctx)
        newest = -1.0
        for checkpoint in (flow.checkpoint(ctx), *([hop[0]] if hop else [])):
            if "://" in checkpoint:     # a lake on an object store: listed as `lakehouse status` lists it
                from lakehouse.streaming.health import _listing

                found = _listing(f"{checkpoint.rstrip('/')}/commits")
                newest = max([newest, *(i.mtime.timestamp() for i in found if i.base_name.isdigit() and i.mtime)])
                continue
            try:
                with os.scandir(Path(checkpoint) / "commits") as entries:
                    newest = max([newest, *(e.stat().st_mtime for e in entries if e.name.isdigit())])
            except OSError:
                continue
        out[flow.name] = newest
    return out


def wait_for_commit(stream: StreamProcess, flows: Sequence[Any], lake_root: str, before: dict[str, float],
                    timeout_s: float, what: str, *, required: bool = True) -> str | None:
    """Wait until one of `flows` has committed a batch newer than `before` (returns its name); the stream must
    stay alive. Without one in time: DrillError, or None when not `required`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = newest_batches(flows, lake_root)
        moved = [f for f in now if now[f] > before.get(f, -1)]
        if moved:
            return moved[0]
        if not stream.alive():
            raise DrillError(f"lakehouse stream exited (code {stream.proc.returncode}) while waiting for {what}; "
                             f"its log ends:\n{stream.tail()}")
        time.sleep(0.25)
    if not required:
        return None
    raise DrillError(f"lakehouse stream committed no batch within {timeout_s:.0f} s ({what}); its log ends:\n"
                     f"{stream.tail()}")


def sleep_alive(stream: StreamProcess, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not stream.alive():
            raise DrillError(f"lakehouse stream exited (code {stream.proc.returncode}) {what}; its log ends:\n"
                             f"{stream.tail()}")
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def wait_caught_up(stream: StreamProcess, flows: Sequence[Any], settings: Any, timeout_s: float) -> float:
    """Wait until every flow's checkpoint is at the end of its inputs (twice in a row, 2 s apart)."""
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.health import stream_health

    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap=settings.kafka_bootstrap)
    started = time.monotonic()
    deadline = started + timeout_s
    streak = 0
    behind: list[str] = []
    while time.monotonic() < deadline:
        if not stream.alive():
            raise DrillError(f"lakehouse stream exited (code {stream.proc.returncode}) while catching up; its log "
                             f"ends:\n{stream.tail()}")
        health = stream_health(flows, ctx)
        behind = [f"{h.flow} ({h.lag_text()})" for h in health if not h.caught_up or h.batch_id is None]
        streak = streak + 1 if not behind else 0
        if streak >= 2:
            return time.monotonic() - started
        time.sleep(2)
    raise DrillError(f"the stream did not catch up within {timeout_s:.0f} s; behind: {', '.join(behind)}; its log "
                     f"ends:\n{stream.tail()}")


# ------------------------------------------------------------------ expected values, in plain Python

def acked_records(producer: SteadyProducer) -> list[tuple[Any, Coords]]:
    return [(producer.records[i], c) for i, c in sorted(producer.acked.items())]


def expected_coords(producer: SteadyProducer, topic: str) -> set[Coords]:
    return {c for r, c in acked_records(producer) if r.topic == topic}


def expected_ids(producer: SteadyProducer, topic: str) -> set[str]:
    """Ids of the valid events of `topic` of which at least one copy (original or duplicate) was acknowledged."""
    return {r.event["event_id"] for r, _ in acked_records(producer)
            if r.topic == topic and r.kind in ("valid", "duplicate")}


def expected_quarantine(producer: SteadyProducer, topic: str) -> dict[Coords, str]:
    return {c: r.expected_reason for r, c in acked_records(producer) if r.topic == topic and r.kind == "malformed"}


def expected_revenue(producer: SteadyProducer, topic: str) -> dict[tuple[int, str], tuple[int, int, int]]:
    """(minute as epoch seconds, currency) -> (revenue_cents, orders, items) over the acknowledged distinct orders."""
    orders = {r.event["event_id"]: r.event for r, _ in acked_records(producer)
              if r.topic == topic and r.kind in ("valid", "duplicate")}
    acc: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for o in orders.values():
        t = datetime.fromisoformat(o["occurred_at"].replace("Z", "+00:00"))
        a = acc[(int(t.timestamp()) // 60 * 60, o["currency"])]
        a[0] += o["total_cents"]
        a[1] += 1
        a[2] += sum(line["quantity"] for line in o["lines"])
    return {k: tuple(v) for k, v in acc.items()}


# ------------------------------------------------------------------ the checks

@dataclass
class Check:
    layer: str
    table: str
    checked: int
    differences: int
    what: str
    samples: list[str] = field(default_factory=list)


def _set_diff(layer: str, table: str, got: list, want: set, what: str) -> Check:
    counts = Counter(got)
    twice = sum(n - 1 for n in counts.values() if n > 1)
    missing = want - set(counts)
    extra = set(counts) - want
    samples = [f"missing {x}" for x in sorted(missing)[:5]] + [f"extra {x}" for x in sorted(extra)[:5]] + \
              [f"{n}x {x}" for x, n in sorted(counts.items()) if n > 1][:5]
    return Check(layer, table, len(got), len(missing) + len(extra) + twice,
                 f"{what} (missing {len(missing)}, extra {len(extra)}, twice {twice})", samples)


def check_lake(spark: Any, env: dict[str, str], flows: Sequence[Any], producer: SteadyProducer, *,
               verify_layers: Sequence[str] = ("silver", "gold")) -> list[Check]:
    """The lake the stream wrote, against what was acknowledged (plain Python) and the batch lane (the flows
    writing `verify_layers`; none when it is empty)."""
    import dataclasses as dc

    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from lakehouse.batch.verify import verify_flow
    from lakehouse.orchestration.resources import build_resources
    from lakehouse.schemas import tables
    from lakehouse.schemas.topics import TopicSpec

    settings = dc.replace(stream_settings(env), quality=False)
    resources = build_resources(settings)
    ctx = resources["lake"].flow_context(resources["kafka"])
    lake = settings.lake_root

    def load(spec):
        path = spec.path(lake)
        return spark.read.format("delta").load(path) if DeltaTable.isDeltaTable(spark, path) else None

    checks: list[Check] = []
    topic_of: dict[str, str] = {}                 # bronze table -> topic
    for flow in flows:
        if isinstance(flow.source, TopicSpec):
            topic = flow.source.name
            topic_of[flow.target.name] = topic
            df = load(flow.target)
            got = [] if df is None else [(r.topic, r.partition, r.offset) for r in
                                         df.select("topic", "partition", "offset").collect()]
            checks.append(_set_diff("bronze", flow.target.name, got, expected_coords(producer, topic),
                                    "(topic, partition, offset) = acknowledged"))
    streamed_topics = set(topic_of.values())
    for flow in flows:
        if flow.schema is not None and flow.source.name in topic_of:     # a source's silver flow
            topic = topic_of[flow.source.name]
            df = load(flow.target)
            got = [] if df is None else [r.event_id for r in df.select("event_id").collect()]
            checks.append(_set_diff("silver", flow.target.name, got, expected_ids(producer, topic),
                                    "event ids = acknowledged valid ids"))
    if any(f.schema is not None for f in flows):
        df = load(tables.QUARANTINE)
        rows = [] if df is None else df.where(F.col("topic").isin(sorted(streamed_topics))) \
            .select("topic", "partition", "offset", "reason").collect()
        want: dict[Coords, str] = {}
        for topic in streamed_topics:
            want.update(expected_quarantine(producer, topic))
        check = _set_diff("silver", "quarantine", [(r.topic, r.partition, r.offset) for r in rows], set(want),
                          "coordinates = acknowledged malformed records")
        wrong = [f"{(r.topic, r.partition, r.offset)} reason {r.reason}, expected {want[(r.topic, r.partition, r.offset)]}"
                 for r in rows if (r.topic, r.partition, r.offset) in want and r.reason != want[(r.topic, r.partition, r.offset)]]
        check.differences += len(wrong)
        check.what += f", wrong reason {len(wrong)}"
        check.samples += wrong[:5]
        checks.append(check)
        df = load(tables.LATE_ARRIVALS)
        names = [f.name for f in flows]
        late = [] if df is None else df.where(F.col("flow").isin(names)).select("flow", "topic", "partition", "offset").collect()
        checks.append(Check("silver", "late_arrivals", len(late), len(late), "rows of the streamed flows (none sent late)",
                            [f"{r.flow} {(r.topic, r.partition, r.offset)}" for r in late[:5]]))
    for flow in flows:
        if isinstance(flow.source, TopicSpec) or flow.target.layer not in verify_layers:
            continue
        verdict = verify_flow(spark, flow, ctx)
        if verdict.status == "not built":
            checks.append(Check("batch lane", flow.target.name, 0, 1, "the stream never wrote this table"))
            continue
        diff = verdict.diff
        checks.append(Check(
            "batch lane", flow.target.name, diff.stream_rows, diff.differences,
            f"= batch recomputation over {', '.join(s.name for s in flow.sources)}: {verdict.status} "
            f"({diff.batch_rows} batch rows; only stream {diff.only_stream}, only batch {diff.only_batch}, "
            f"changed {diff.changed}, duplicate keys {diff.duplicate_keys})",
            [f"{s.get('kind')} {s.get('key')}" for s in diff.samples[:5]]))
    revenue = next((f for f in flows if f.target.name == shop.GOLD_REVENUE_PER_MINUTE.name), None)
    if revenue is not None:
        df = load(shop.GOLD_REVENUE_PER_MINUTE)
        rows = [] if df is None else df.select(F.unix_timestamp("window_start").alias("w"), "currency", "revenue_cents",
                                               "orders", "items").collect()
        got = {(r.w, r.currency): (r.revenue_cents, r.orders, r.items) for r in rows}
        want_rev = expected_revenue(producer, shop.ORDERS.topic_spec.name)
        keys = set(got) | set(want_rev)
        bad = sorted(k for k in keys if got.get(k) != want_rev.get(k))
        dup = len(rows) - len(got)
        checks.append(Check(
            "plain Python", shop.GOLD_REVENUE_PER_MINUTE.name, len(rows), len(bad) + dup,
            f"revenue, orders, items per minute and currency = computed from the acknowledged orders "
            f"({len(want_rev)} windows expected, {sum(v[1] for v in want_rev.values())} orders)",
            [f"{datetime.fromtimestamp(k[0], tz=timezone.utc):%H:%M} {k[1]}: stream {got.get(k)}, python {want_rev.get(k)}"
             for k in bad[:5]]))
    return checks


# ------------------------------------------------------------------ the report

@dataclass
class Event:
    """One kill (crash) or broker loss."""

    n: int
    at_s: float                       # seconds since the drill's stream first started
    delay_s: float                    # random wait after the commit that preceded it
    after: str                        # the flow whose commit preceded it
    producing: bool                   # the producer was still sending
    acked: int                        # records acknowledged by then
    killed: list[tuple[int, str]] = field(default_factory=list)
    down_s: float = 0.0               # broker loss: seconds without a broker (kill to ready again)
    stream: str = ""                  # crash: how the killed stream ran its flows (QUERY_PER_FLOW or QUERY_PER_TOPIC)
    recovered_s: float | None = None  # until the stream committed a batch again (after the restart)
    acked_while_down: int = 0         # broker loss: records acknowledged while the broker was away
    committed_while_down: list[str] = field(default_factory=list)   # broker loss: Kafka flows that committed meanwhile


@dataclass
class DrillReport:
    name: str
    tables: list[str]
    flows: list[str]
    events: list[Event] = field(default_factory=list)
    stream_kills: list[Event] = field(default_factory=list)   # broker loss: kills of the stream after the losses
    restarts: int = 0                 # starts of `lakehouse stream` after the first (crash), or of the broker
    stream_restarts: int = 0          # failed queries the stream restarted itself (from its log)
    watchdog_stops: int = 0           # queries the broker watchdog stopped (from its log)
    sent: int = 0
    acked: int = 0
    failed: int = 0
    unresolved: int = 0
    acked_streamed: int = 0           # acknowledged records of the topics the stream reads (the rest is not checked)
    exit_code: int | None = None
    checks: list[Check] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def differences(self) -> int:
        return sum(c.differences for c in self.checks) + (self.exit_code not in (0, None)) + self.unresolved

    @property
    def passed(self) -> bool:
        return self.error is None and self.exit_code == 0 and bool(self.checks) and self.differences == 0

    def text(self) -> str:
        lines = [f"== drill: {self.name} ==",
                 f"streamed: lakehouse stream {' '.join(self.tables)} -> {len(self.flows)} flows: {', '.join(self.flows)}"]
        if self.name == "crash":
            kills = self.events
            lines.append(f"kills: {len(kills)} (SIGKILL to the whole process group; processes killed per kill: "
                         f"{_span([len(k.killed) for k in kills])}, a Spark JVM among them every time: "
                         f"{all(any(n == 'java' for _, n in k.killed) for k in kills) if kills else '-'}), "
                         f"restarts: {self.restarts}, kills while producing: {sum(k.producing for k in kills)}/{len(kills)}")
            modes = Counter(k.stream for k in kills)
            if len(modes) > 1:
                lines.append("streams killed: " + ", ".join(f"{m} x{n}" for m, n in sorted(modes.items())))
            after = Counter(k.after for k in kills)
            lines.append(f"kill points: {_span([k.delay_s for k in kills], 's')} after a commit of "
                         + ", ".join(f"{f} x{n}" for f, n in after.most_common()))
            lines.append(f"recovery (restart to its first commit): "
                         f"{_span([k.recovered_s for k in kills if k.recovered_s is not None], 's')}")
            lines.append(f"stream's own restarts of failed queries: {self.stream_restarts}")
        else:
            losses = self.events
            lines.append(f"broker losses: {len(losses)} (SIGKILL to the broker), broker restarts: {self.restarts}, "
                         f"losses while producing: {sum(e.producing for e in losses)}/{len(losses)}")
            for e in losses:
                lines.append(f"  loss {e.n}: at {e.at_s:.0f} s, {e.delay_s:.1f} s after a commit, broker away "
                             f"{e.down_s:.1f} s, stream committed again {e.recovered_s:.1f} s after the broker was back"
                             if e.recovered_s is not None else f"  loss {e.n}: at {e.at_s:.0f} s, broker away {e.down_s:.1f} s")
                lines.append(f"    while it was away: {e.acked_while_down:,} records acknowledged, Kafka flows that "
                             f"committed: {', '.join(e.committed_while_down) or 'none'}")
            lines.append(f"stream's own restarts of failed queries: {self.stream_restarts} "
                         f"(broker watchdog stops: {self.watchdog_stops})")
            for k in self.stream_kills:
                lines.append(f"stream kill {k.n}: at {k.at_s:.0f} s, SIGKILL to the whole process group "
                             f"({', '.join(name for _, name in k.killed)}) {k.delay_s:.1f} s after a commit of {k.after}"
                             f"{' while producing' if k.producing else ''}; restarted, committed again "
                             + (f"{k.recovered_s:.1f} s later" if k.recovered_s is not None else "-"))
        lines.append(f"records produced: sent {self.sent:,}, acknowledged {self.acked:,} ({self.acked_streamed:,} of them "
                     f"on the streamed topics, the rest on topics no streamed flow reads), failed {self.failed:,}, "
                     f"unresolved {self.unresolved:,}")
        lines.append(f"stream stopped by SIGTERM: exit code {self.exit_code}")
        if self.checks:
            width = max(len(c.table) for c in self.checks)
            lines.append(f"{'layer':<13} {'table':<{width}} {'checked':>8} {'diff':>5}  what")
            for c in self.checks:
                lines.append(f"{c.layer:<13} {c.table:<{width}} {c.checked:>8,} {c.differences:>5}  {c.what}")
                lines += [f"{'':<13} {'':<{width}}    e.g. {s}" for s in c.samples]
            per_layer = Counter()
            for c in self.checks:
                per_layer[c.layer] += c.checked
            lines.append("records checked per layer: " + ", ".join(f"{k} {v:,}" for k, v in per_layer.items()))
        lines += self.notes
        lines.append("durations: " + ", ".join(f"{k} {_secs(v)}" for k, v in self.durations.items()))
        if self.error:
            lines.append(f"error: {self.error}")
        lines.append(f"differences: {self.differences}")
        lines.append(f"result: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _span(values: Sequence[float], unit: str = "") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    fmt = (lambda v: f"{v:.1f}") if unit else (lambda v: f"{v:g}")
    return f"min {fmt(min(values))}{unit}, median {fmt(statistics.median(values))}{unit}, max {fmt(max(values))}{unit}"


# ------------------------------------------------------------------ the drills

def _flows(tables: Sequence[str]) -> list[Any]:
    from lakehouse.streaming.continuous import flows_for
    from lakehouse.streaming.flows import FLOWS

    return flows_for(FLOWS, tables)


def _finish(report: DrillReport, stream: StreamProcess, producer: SteadyProducer, flows: Sequence[Any],
            settings: Any, env: dict[str, str], spark: Any | Callable[[], Any], t0: float, catch_up_s: float,
            verify_layers: Sequence[str]) -> None:
    """Producer done, stream caught up and stopped by SIGTERM, then the checks."""
    t = time.monotonic()
    producer.finish()
    report.durations["producing"] = producer.ended_at - producer.started_at
    report.sent, report.acked, report.failed, report.unresolved = (
        producer.sent, len(producer.acked), len(producer.failed), producer.unresolved)
    from lakehouse.schemas.topics import TopicSpec

    streamed = {f.source.name for f in flows if isinstance(f.source, TopicSpec)}
    report.acked_streamed = sum(1 for r, _ in acked_records(producer) if r.topic in streamed)
    say(f"producer done: {report.sent:,} sent, {report.acked:,} acknowledged, {report.failed:,} failed; "
        "waiting for the stream to catch up")
    report.durations["catch-up"] = wait_caught_up(stream, flows, settings, catch_up_s)
    t = time.monotonic()
    report.exit_code = stream.terminate()
    report.durations["SIGTERM to exit"] = time.monotonic() - t
    report.stream_restarts = stream.count("restarting it in")
    report.watchdog_stops = stream.count("stopping query")
    report.durations["stream run"] = time.monotonic() - t0
    say(f"stream stopped (exit {report.exit_code}); checking the lake")
    t = time.monotonic()
    session = spark() if callable(spark) else spark
    report.checks = check_lake(session, env, flows, producer, verify_layers=verify_layers)
    report.durations["checks"] = time.monotonic() - t


def _kill(stream: StreamProcess, n: int, t0: float, delay: float, after: str, producer: SteadyProducer) -> Event:
    """SIGKILL to the stream's whole process group, recorded as kill `n`."""
    event = Event(n, time.monotonic() - t0, delay, after, producer.running(), len(producer.acked),
                  stream=_mode(stream.env))
    event.killed = stream.kill()
    return event


def _repace(producer: SteadyProducer, t0: float, done: int, total: int) -> None:
    """Pace the rest of the events over the cycles left, at the mean cycle time so far (plus a margin)."""
    if done >= total:
        return
    cycle = (time.monotonic() - t0) / done
    left = max(1, producer.total - producer.sent)
    producer.rate = min(400.0, max(1.0, left / (cycle * (total - done) + 30)))


def run_crash(settings: Any, *, kills: int = 20, events: int = 20_000, seed: int = 7,
              tables: Sequence[str] = DEFAULT_TABLES, spark: Any | Callable[[], Any], workdir: Path,
              max_delay_s: float = 15.0, reach_s: float = 300.0, targets: Sequence[str] | None = None,
              rate: float | None = None, cycle_guess_s: float = 90.0, commit_timeout_s: float = 600,
              catch_up_s: float = 900, extra_env: dict[str, str] | None = None,
              verify_layers: Sequence[str] = ("silver", "gold"), alternate: bool = False) -> DrillReport:
    """Kill -9 `lakehouse stream` `kills` times while producing, restart it each time, then check the lake.

    With `alternate`, the stream's modes take turns: the first start runs a query per flow, the next one
    query per topic (LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC), and so on, so each restart hands over between them.

    Kill n comes a random 0..`max_delay_s` after a commit of flow `targets[n % len(targets)]` (default: a layer
    drawn at random, then one of its flows), or of any flow when that one commits nothing within `reach_s` of
    the run's first commit. Aiming at a layer matters on a loaded machine: a restarted stream commits bronze
    within a minute but silver and gold only after their first (larger) batch, so kills after any commit
    would all come after bronze's, and the downstream flows would never commit between kills.
    """
    rng = random.Random(seed)
    env = stream_env(settings, **(extra_env or {}))

    def env_of(start: int) -> dict[str, str]:
        return {**env, ONE_QUERY_PER_TOPIC: "true" if start % 2 else "false"} if alternate else env

    flows = _flows(tables)
    report = DrillReport("crash", list(tables), [f.name for f in flows])
    stream = StreamProcess(env_of(0), tables, Path(workdir) / "stream.log")
    # A first guess of a kill cycle; the rate follows the cycles measured so that production spans every kill.
    producer = SteadyProducer(settings.kafka_bootstrap, total=events, rate=rate or events / (kills * cycle_guess_s + 30),
                              seed=seed, start=events_start(events), mix=drill_mix())
    t0 = time.monotonic()
    try:
        stream.start()
        producer.start()
        say(f"lakehouse stream (pid {stream.pid}) started; producing {events:,} events from {producer.rate:.1f}/s")
        before = newest_batches(flows, settings.lake_root)
        for n in range(1, kills + 1):
            # A random flow of the stream: the kill comes after one of its commits (any flow's if it has none
            # within `reach_s` of the run's first commit), so that kills land in every layer's batches.
            by_name = {f.name: f for f in flows}
            if targets:
                target = by_name[targets[(n - 1) % len(targets)]]
            else:
                layer = rng.choice(sorted({f.target.layer for f in flows}))
                target = rng.choice([f for f in flows if f.target.layer == layer])
            after = wait_for_commit(stream, flows, settings.lake_root, before, commit_timeout_s,
                                    f"a batch before kill {n}")
            if n > 1:
                report.events[-1].recovered_s = time.monotonic() - stream.started_at
            after = wait_for_commit(stream, [target], settings.lake_root, before, reach_s,
                                    f"a batch of {target.name}", required=False) or after
            delay = rng.uniform(0, max_delay_s)
            sleep_alive(stream, delay, f"before kill {n}")
            event = _kill(stream, n, t0, delay, after, producer)
            report.events.append(event)
            say(f"kill {n}/{kills}: SIGKILL to group {stream.pid} ({', '.join(f'{p} {c}' for p, c in event.killed)}) "
                f"{delay:.1f} s after a commit of {after} ({event.stream}); {event.acked:,} records acknowledged so far")
            before = newest_batches(flows, settings.lake_root)
            stream.env = env_of(n)
            stream.start()
            report.restarts += 1
            if rate is None:
                _repace(producer, t0, n, kills)
        wait_for_commit(stream, flows, settings.lake_root, before, commit_timeout_s, "a batch after the last restart")
        if report.events:
            report.events[-1].recovered_s = time.monotonic() - stream.started_at
        say(f"last restart committed; {producer.total - producer.sent:,} events left to send")
        _finish(report, stream, producer, flows, settings, env, spark, t0, catch_up_s, verify_layers)
    except (DrillError, KeyboardInterrupt) as exc:
        report.error = str(exc) or type(exc).__name__
    finally:
        stream.ensure_stopped()
        if producer.sent and report.sent == 0:
            report.sent, report.acked, report.failed = producer.sent, len(producer.acked), len(producer.failed)
        report.durations["total"] = time.monotonic() - t0
    return report


def run_broker_loss(settings: Any, *, losses: int = 3, down_s: Sequence[float] = (5.0, 30.0), events: int = 8_000,
                    seed: int = 7, tables: Sequence[str] = DEFAULT_TABLES, spark: Any | Callable[[], Any],
                    workdir: Path, rate: float | None = None, settle_s: float = 20.0,
                    commit_timeout_s: float = 600, catch_up_s: float = 900,
                    extra_env: dict[str, str] | None = None,
                    verify_layers: Sequence[str] = ("silver", "gold"), node: Any = None,
                    warm_up_rate: float | None = None, commit_while_down: bool = False,
                    stream_kills: int = 0) -> DrillReport:
    """Kill -9 the broker `losses` times mid-stream while producing, start it again after `down_s` (cycled);
    the stream must resume by itself; then `stream_kills` kill -9s of the stream itself (each a random 0-2 s after
    a commit, restarted at once); then check the lake. The broker is running again at the end.

    `node` (an infra.kafka_broker.KafkaNode) is the broker to kill: by default the settings' one node; one node of
    a cluster (infra.kafka_cluster), and the others carry producing and the stream meanwhile. With `warm_up_rate`,
    the producer sends at that rate until the stream's first commit and at `rate` from then on, so that a slow
    start (minutes on a loaded machine) does not see most events sent before the first loss. With
    `commit_while_down` (a cluster), the broker stays away at least `down_s` and until a Kafka flow has committed
    a batch and the others have acknowledged a record without it (up to `commit_timeout_s` each).
    """
    from lakehouse.infra.kafka_broker import BrokerError, local_node
    from lakehouse.schemas.topics import TopicSpec

    rng = random.Random(seed)
    env = stream_env(settings, **(extra_env or {}))
    flows = _flows(tables)
    kafka_flows = [f for f in flows if isinstance(f.source, TopicSpec)]
    node = node or local_node(settings)
    report = DrillReport("broker-loss", list(tables), [f.name for f in flows])
    stream = StreamProcess(env, tables, Path(workdir) / "stream.log")
    steady = rate or events / (losses * 90.0 + 30)
    producer = SteadyProducer(settings.kafka_bootstrap, total=events, rate=warm_up_rate or steady,
                              seed=seed, start=events_start(events), mix=drill_mix())
    t0 = time.monotonic()
    try:
        stream.start()
        producer.start()
        say(f"lakehouse stream (pid {stream.pid}) started; producing {events:,} events from {producer.rate:.1f}/s")
        before = newest_batches(flows, settings.lake_root)
        for n in range(1, losses + 1):
            after = wait_for_commit(stream, flows, settings.lake_root, before, commit_timeout_s,
                                    f"a batch before loss {n}")
            if n == 1 and warm_up_rate:
                producer.rate = steady
            delay = rng.uniform(settle_s / 2, settle_s)
            sleep_alive(stream, delay, f"before broker loss {n}")
            pid = node.read_pid()
            if pid is None:
                raise DrillError(f"the broker on {node.bootstrap} is not running before loss {n}")
            event = Event(n, time.monotonic() - t0, delay, after, producer.running(), len(producer.acked))
            os.kill(pid, signal.SIGKILL)
            lost_at = time.monotonic()
            while _pid_alive(pid):
                time.sleep(0.05)
            away = down_s[(n - 1) % len(down_s)]
            say(f"loss {n}/{losses}: SIGKILL to the broker {node.bootstrap} (pid {pid}); {event.acked:,} records "
                f"acknowledged so far; starting it again in {away:.0f} s")
            at_loss = newest_batches(kafka_flows, settings.lake_root)
            sleep_alive(stream, away, f"while the broker was away (loss {n})")
            if commit_while_down:
                wait_for_commit(stream, kafka_flows, settings.lake_root, at_loss, commit_timeout_s,
                                f"a batch of a Kafka flow while the broker was away (loss {n})")
                # And a record acknowledged by the others: the producer may need the dead node's leadership moved
                # first (its session timeout), and a bronze commit can come sooner.
                deadline = time.monotonic() + commit_timeout_s
                while len(producer.acked) <= event.acked and producer.running():
                    if time.monotonic() > deadline:
                        raise DrillError(f"no record was acknowledged within {commit_timeout_s:.0f} s while the "
                                         f"broker {node.bootstrap} was away (loss {n})")
                    sleep_alive(stream, 0.5, f"while the broker was away (loss {n})")
            event.acked_while_down = len(producer.acked) - event.acked
            moved = newest_batches(kafka_flows, settings.lake_root)
            event.committed_while_down = [f for f in moved if moved[f] > at_loss.get(f, -1)]
            new_pid = node.start(settings.jars_dir)
            event.down_s = time.monotonic() - lost_at
            report.restarts += 1
            report.events.append(event)
            say(f"broker back (pid {new_pid}) after {event.down_s:.1f} s; waiting for the stream to commit again")
            back = time.monotonic()
            before = newest_batches(flows, settings.lake_root)
            # Kafka flows must move again (not only the Delta flows downstream, which never lost anything).
            wait_for_commit(stream, kafka_flows, settings.lake_root, before, commit_timeout_s, f"a batch after loss {n}")
            event.recovered_s = time.monotonic() - back
            before = newest_batches(flows, settings.lake_root)
            if rate is None:
                _repace(producer, t0, n, losses + stream_kills)
        for n in range(1, stream_kills + 1):
            after = wait_for_commit(stream, flows, settings.lake_root, before, commit_timeout_s,
                                    f"a batch before stream kill {n}")
            delay = rng.uniform(0, 2)
            sleep_alive(stream, delay, f"before stream kill {n}")
            event = _kill(stream, n, t0, delay, after, producer)
            report.stream_kills.append(event)
            say(f"stream kill {n}/{stream_kills}: SIGKILL to group {stream.pid} "
                f"({', '.join(f'{p} {c}' for p, c in event.killed)}) {delay:.1f} s after a commit of {after}")
            before = newest_batches(flows, settings.lake_root)
            stream.start()
            wait_for_commit(stream, flows, settings.lake_root, before, commit_timeout_s, f"a batch after stream kill {n}")
            event.recovered_s = time.monotonic() - stream.started_at
            before = newest_batches(flows, settings.lake_root)
            if rate is None:
                _repace(producer, t0, losses + n, losses + stream_kills)
        _finish(report, stream, producer, flows, settings, env, spark, t0, catch_up_s, verify_layers)
    except (DrillError, BrokerError, KeyboardInterrupt) as exc:
        report.error = str(exc) or type(exc).__name__
    finally:
        stream.ensure_stopped()
        if node.read_pid() is None:              # leave the broker as it was found: running
            try:
                node.start(settings.jars_dir)
            except Exception as exc:  # noqa: BLE001 - reported, the drill has failed anyway
                report.notes.append(f"could not start the broker again: {exc}")
        if producer.sent and report.sent == 0:
            report.sent, report.acked, report.failed = producer.sent, len(producer.acked), len(producer.failed)
        report.durations["total"] = time.monotonic() - t0
    return report


def _pid_alive(pid: int) -> bool:
    from lakehouse.infra.kafka_broker import pid_alive

    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return pid_alive(pid)


# ------------------------------------------------------------------ command line

def _home(name: str) -> tuple[Any, Path]:
    from lakehouse.infra.settings import Settings

    home = Path(tempfile.mkdtemp(prefix=f"drill-{name}-"))
    port, controller = PORTS[name]
    jars = os.environ.get("LAKEHOUSE_JARS_DIR") or str(ROOT / ".lakehouse" / "jars")
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars,
                                  "LAKEHOUSE_KAFKA_PORT": str(port), "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(controller),
                                  "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"})
    return settings, home


def _parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m bench.drill_{name.replace('-', '_')}",
                                description=__doc__.split("\n\n")[0])
    if name == "crash":
        p.add_argument("--kills", type=int, default=20, help="kill -9 of the stream's process group (default 20)")
        p.add_argument("--events", type=int, default=20_000, help="events produced over the drill (default 20000)")
        p.add_argument("--max-delay", type=float, default=15.0,
                       help="each kill comes a random 0..this many seconds after a commit (default 15)")
        p.add_argument("--reach", type=float, default=300.0,
                       help="each kill waits up to this many seconds after the run's first commit for a commit of "
                            "a flow of a layer drawn at random, so that kills land in every layer (default 300)")
        p.add_argument("--rate", type=float, default=None,
                       help="events per second (default: paced so that production spans every kill)")
    else:
        p.add_argument("--losses", type=int, default=3, help="kill -9 of the broker (default 3)")
        p.add_argument("--events", type=int, default=8_000, help="events produced over the drill (default 8000)")
        p.add_argument("--down", default="5,30",
                       help="seconds the broker stays dead, cycled over the losses (default 5,30: one short "
                            "loss the Kafka client rides out, one past the stream's 20 s broker watchdog)")
        p.add_argument("--rate", type=float, default=None,
                       help="events per second (default: paced so that production spans every loss)")
    p.add_argument("--seed", type=int, default=7, help="generator and timing seed (default 7)")
    p.add_argument("--tables", nargs="+", default=list(DEFAULT_TABLES), metavar="TABLE",
                   help=f"tables to stream (default: {' '.join(DEFAULT_TABLES)})")
    p.add_argument("--quality", action="store_true", help="run the quality checks in the stream (default: off)")
    p.add_argument("--query-per-topic", action="store_true",
                   help="the stream with LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC=true: each topic's flows as one query")
    if name == "crash":
        p.add_argument("--alternate", action="store_true",
                       help="the stream's modes take turns at each restart: a query per flow, then one query per topic, ...")
    p.add_argument("--keep", action="store_true", help="keep the state folder (kept anyway when the drill fails)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`crash ...` or `broker-loss ...`: run the drill, print its report; 0 only when every difference is 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in PORTS:
        print(f"usage: drills.py {{{' | '.join(PORTS)}}} [options]; one of {', '.join(PORTS)} is needed", file=sys.stderr)
        return 2
    name, args = argv[0], _parser(argv[0]).parse_args(argv[1:])
    from lakehouse.infra.kafka_broker import BrokerError, local_node, port_is_free

    for port in PORTS[name]:
        if not port_is_free("127.0.0.1", port):
            print(f"error: port {port} is taken; the {name} drill's broker uses ports {PORTS[name][0]} and "
                  f"{PORTS[name][1]}: stop what holds it (another drill?) and run it again.", file=sys.stderr)
            return 2

    def terminated(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminated)
    settings, home = _home(name)
    node = local_node(settings)
    spark_box: list[Any] = []

    def spark() -> Any:
        from lakehouse.infra.spark import get_spark

        spark_box.append(get_spark(settings, f"drill-{name}"))
        return spark_box[-1]

    report: DrillReport | None = None
    extra = {} if not args.quality else {"LAKEHOUSE_QUALITY": "true"}
    if args.query_per_topic:
        extra[ONE_QUERY_PER_TOPIC] = "true"
    try:
        from lakehouse.schemas import topics
        from lakehouse.streaming.kafka_topics import ensure_topics

        pid = node.start(settings.jars_dir)
        say(f"Kafka broker pid {pid} on {node.bootstrap}, state in {home}")
        ensure_topics(node.bootstrap, topics.ALL)
        if name == "crash":
            report = run_crash(settings, kills=args.kills, events=args.events, seed=args.seed, tables=args.tables,
                               spark=spark, workdir=home, max_delay_s=args.max_delay, reach_s=args.reach, rate=args.rate,
                               extra_env=extra, alternate=args.alternate)
        else:
            down = [float(x) for x in args.down.split(",") if x.strip()]
            report = run_broker_loss(settings, losses=args.losses, down_s=down, events=args.events, seed=args.seed,
                                     tables=args.tables, spark=spark, workdir=home, rate=args.rate, extra_env=extra)
    except (BrokerError, KeyboardInterrupt) as exc:
        print(f"error: {exc}", file=sys.stderr)
    finally:
        for session in spark_box:
            session.stop()
        stopped = node.stop()
        if stopped:
            say(f"stopped the Kafka broker (pid {stopped})")
        signal.signal(signal.SIGTERM, previous)
        keep = args.keep or report is None or not report.passed
        if report is not None:
            print(report.text(), flush=True)
        if keep:
            print(f"state kept in {home} (stream log: {home / 'stream.log'})")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return 0 if report is not None and report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
