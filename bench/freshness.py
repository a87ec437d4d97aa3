"""Bench: how fresh `lakehouse stream` keeps silver and gold at a fixed production rate (send -> visible delay).

    .venv/bin/python -m bench.freshness [--rates 1000,5000,20000] [--minutes 3] [--warm-up 30] [--quick]
                                        [--tables TABLE ... | --floor [--hops N | --work [--exactly-once]]] [--query-per-topic]
                                        [--record] [--no-record]

Issue 9, item 5. For each rate (events per second), in a fresh temporary folder:

1. A private Kafka broker (KRaft, ports 19430/19431, state in the folder, stopped by its PID at the end, also
   on error; bench.harness.private_broker) with the topics from their specs.
2. The shop's events (streaming.generator.ShopGenerator, `lakehouse produce`'s fault mix: about 2% malformed,
   2% duplicated, 3% out of order, 1% late; its clock ticks at the rate, so event time keeps pace with the
   wall clock) are generated and encoded *before* the stream starts, with a placeholder where the send time
   goes: generating costs more CPU than sending (about 9,000 records/s on this machine), and the bench must
   not take the stream's cores while it measures. Records beyond the pre-generated ones (a slow start) are
   generated on the fly; the JSON says how many.
3. `lakehouse stream [TABLE ...]` as a user runs it (a subprocess in its own process group, the project's
   defaults: every flow unless --tables names some, LAKEHOUSE_STREAM_TRIGGER = auto (sized triggers), quality gate
   on, shuffle partitions 4, reports to the folder's Dagster instance). Once its bronze queries are
   streaming, one idempotent producer (acks=all, linger 5 ms, as streaming.producer) sends at the rate,
   paced by the monotonic clock, and stamps each record's `sent_at` field (which silver keeps) with the wall
   clock just before handing it to librdkafka: that is the event's send time. (The topics stamp
   LogAppendTime, the broker's clock, as `appended_at`; send -> append is reported as a side figure.)
4. Warm-up, discarded: from the first send until --warm-up seconds (30) after the last flow's query started
   (gold flows wait for their input tables: Spark's start, the first batches, the initial snapshots) *and*
   the stream has worked off the backlog its start left (Kafka lag under 5 s of production, no input table
   more than 2 versions ahead), but at most --start-limit seconds (300) after the first send: a stream that
   cannot catch up is then measured as it is (the JSON says which ended the warm-up). Then --minutes of
   measurement: every event *sent* in that window counts. Then the producer stops, the stream
   runs until every flow has caught up (streaming.health, what `lakehouse status` reads; at most
   --drain seconds), is stopped by SIGTERM (SIGKILL of its process group if it hangs), and the lake is read
   from its files (pyarrow, no Spark: the bench takes no CPU from the stream while it runs).

Figures, per rate, over the events sent in the window:

- send -> silver: the time the Delta commit that added the event's silver file became visible, i.e. the
  modification time of `_delta_log/<version>.json` (Delta writes the commit file atomically; without
  in-commit timestamps, which these tables do not enable, DESCRIBE HISTORY's timestamp is this same mtime).
  A reader can see the event from that instant and not before: the figure is exact up to the file system's
  clock. The lower bound is the modification time of the data file (`_metadata.file_modification_time`):
  written before the commit, so readers could not see it yet. p50/p95/p99 over silver_page_views,
  silver_orders and silver_payments together, and per table.
- send -> gold (gold_revenue_per_minute): the commit time of the first gold commit whose recorded source
  position (streaming.positions: commitInfo.userMetadata "sources" -> silver_orders) covers the silver
  version (and file index) that added the order: {"version": V} covers everything before V, {"version": V,
  "index": I} also files 0..I of V. Positions of an initial snapshot are not counted as covering (a
  conservative upper bound; they fall in the warm-up). Orders the gold flow sent to late_arrivals (behind
  its watermark) are left out: they never reach gold by design.
- kept up: the Kafka lag of the bronze queries when the window ended (streaming.health, what `lakehouse
  status` shows), in records and in seconds of production; the trend of the delay over the window (median
  delay per 30 s of send time, least-squares slope in seconds per minute); whether the drain finished. The
  rate is *sustained* when the stream kept up (lag at the end under 10 s of production, the median delay grew
  by less than 5 s over the window, the drain finished) and p99 to silver was at most 10 s.
- where the time goes: per flow, from stream_progress (one row per micro-batch that read rows) in the window:
  batches, rows per batch, batch_ms p50/p95 and its parts (durationMs: addBatch, latestOffset, queryPlanning,
  walCommit, commitOffsets, ...), the gap between a flow's batches, and the sum of every query's batch time
  per wall-clock second (above 2 on 2 cores means the queries wait for each other).
- peak RSS of the stream's Spark driver JVM and of the broker over the whole run (bench.harness.PeakMemory:
  VmHWM reset at the start), the CPU seconds each used in the window, and the machine's load and busy share.

The floor (--floor): instead of `lakehouse stream`, bench.bare_stream, the barest continuous Spark job that
does the first hop's work: one query subscribed to every shop topic, Kafka straight into one Delta table
(key, value, topic, partition, offset, timestamp; no parse, no headers), the same trigger and Spark
settings, fed the same paced events. Its figure is send -> visible in that table, over every record sent in
the window (the send stamp is read from the record's bytes; a truncated record has none and is placed in
the window by its broker time), with the same warm-up, drain and kept-up rule (lag from the topics' end
offsets minus the table's rows). Send -> silver can be no better than this on the machine: it is the
yardstick for target 3, recorded as the scope "floor". With --hops N the job is a chain of N such hops, as
the layers are (each further query a Delta stream of the table before it, appended unchanged to the next,
on the same trigger), and the figure is send -> visible in the last table: two hops are what silver is
(Kafka -> bronze -> silver), three what a gold table is. Recorded as the scope "floor, N hops".
With --work the job does the orders path's writes instead, in one query: each micro-batch appended to a
bronze table, parsed into a silver table and its revenue per minute MERGEd into a gold table
(bench.bare_stream --work); the figure is send -> the gold commit of the batch that carried the order.
It is the floor of target 3's gold figure for any design that keeps the three tables with one query and
no hop between them. Recorded as the scope "floor, same work"; with --exactly-once each write carries Delta's
txn app id and version, as the flows' writes do ("floor, same work, exactly once").

Targets: p99 send -> silver <= 3 s at 5,000 events/s on 2 cores; p99 send -> gold <= 5 s (at 5,000 events/s).
It writes <home>/bench/results/freshness.json (bench.harness.record: the project's state folder, outside git;
figures per scope: a run keeps the other scopes' latest figures from that file, if there is one) and prints
the summary row for docs/benchmarks.md. --quick is a smoke run (1,000 events/s, 1 minute, 20 s warm-up)
that records nothing unless --record is given. BENCH_KEEP=1 keeps each rate's temporary folder. A figure,
never a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import unquote

from bench import harness
from bench.bare_stream import WORK_TOPIC, hop_table, work_table
from bench.harness import ROOT, say
from lakehouse.pipelines import shop

NAME = "freshness"
KAFKA_PORT, KAFKA_CONTROLLER_PORT = 19430, 19431       # this bench's ports only
TARGET_RATE = 5000
TARGET_SILVER_P99_S = 3.0
TARGET_GOLD_P99_S = 5.0
SUSTAINED_SILVER_P99_S = 10.0
LAG_LIMIT_S = 10.0            # Kafka lag at the end of the window, in seconds of production
TREND_LIMIT_S = 5.0           # growth of the median delay from the first to the last 30 s of the window
BUCKET_S = 30.0
FLOOR_WHAT = "the barest continuous Spark job (bench.bare_stream: every shop topic, one query, Kafka straight into one Delta table, no parse)"
# What a chain of that many hops is the floor for: silver is two hops from Kafka, a gold table three.
FLOOR_FOR = {1: "silver", 2: "silver (bronze, then silver)", 3: "gold (bronze, silver, then gold)",
             "work": "gold (bronze, silver and gold written by one query, one hop)"}
FLOOR_WORK_WHAT = ("one query doing the orders path's writes per micro-batch (bench.bare_stream --work): shop.orders.v1 "
                   "appended to a bronze table, parsed into a silver table, revenue per minute MERGEd into a gold "
                   "table; {txn}quarantine, watermark or checks; send -> the gold commit of the order's batch")
GOLD_TABLE = "gold_revenue_per_minute"
GOLD_SOURCE = "silver_orders"
CAUGHT_UP_S = 5.0             # the warm-up ends once the Kafka lag is under this many seconds of production
FLAT_SPAN_S = 600             # the first and last ten minutes a long window compares (batch time flat over an hour)
MAX_PREGENERATED = 3_000_000  # records generated before the stream starts (beyond: generated live, ~1 KB each)
PLACEHOLDER_AT = datetime(1999, 1, 1, tzinfo=timezone.utc)
LAKEHOUSE = Path(sys.executable).with_name("lakehouse")


# ---------------------------------------------------------------- state folder (the harness's, on our ports)

@contextmanager
def bench_home(label: str) -> Iterator[Any]:
    """A temporary state folder and its Settings (ports 19430/19431, the project's jars); removed at the end
    unless BENCH_KEEP is set. SIGTERM becomes an exception while it is open, so every finally block runs."""
    from lakehouse.infra.settings import Settings

    home = Path(tempfile.mkdtemp(prefix=f"bench-{NAME}-{label}-"))
    settings = Settings.from_env({
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_JARS_DIR": str(ROOT / ".lakehouse" / "jars"),
        "LAKEHOUSE_KAFKA_PORT": str(KAFKA_PORT),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(KAFKA_CONTROLLER_PORT),
    })

    def terminated(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield settings
    finally:
        signal.signal(signal.SIGTERM, previous)
        if os.environ.get("BENCH_KEEP"):
            say(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


def stream_env(settings) -> dict[str, str]:
    env = harness.this_checkout(os.environ)
    env.update({
        "LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_JARS_DIR": settings.jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
    })
    return env


# ---------------------------------------------------------------- processes

def descendants(pid: int) -> list[int]:
    kids = harness._children()
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def spark_driver_of(pid: int) -> int | None:
    """The Spark driver JVM below process `pid` (the java process running SparkSubmit)."""
    from lakehouse.infra.kafka_broker import process_args

    for p in descendants(pid):
        try:
            if Path(f"/proc/{p}/comm").read_text().strip() == "java" and \
                    "org.apache.spark.deploy.SparkSubmit" in process_args(p):
                return p
        except OSError:
            continue
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process so far (None if it is gone)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts) - idle, sum(parts)


def trace_heads(text: str, most: int = 3, lines: int = 4) -> list[str]:
    """The first lines of each distinct JVM or Python trace in a log (a tail of 1,500 characters cuts them off)."""
    heads: list[str] = []
    rows = text.splitlines()
    for i, row in enumerate(rows):
        if not row.startswith(("\tat ", "\t...")) and ("Exception" in row or "Error" in row):
            head = "\n".join(rows[i:i + lines])
            if head not in heads:
                heads.append(head)
            if len(heads) == most:
                break
    return heads


class Stream:
    """`lakehouse stream [TABLE ...]` (or, for --floor, bench.bare_stream) in its own process group; stopped by
    SIGTERM, killed if it hangs."""

    def __init__(self, settings, command: Sequence[str], log: Path):
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(list(command), env=stream_env(settings),
                                     stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
        self.driver: int | None = None
        say(f"{' '.join(Path(c).name if i == 0 else c for i, c in enumerate(command))}: pid {self.proc.pid}, log {log}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def streaming(self) -> dict[str, float]:
        """Flows whose query has started, with the time their log line was read (first seen)."""
        found = {}
        for line in self.text().splitlines():
            if " is streaming into " in line and "flow " in line:
                name = line.split("flow ", 1)[1].split(" ", 1)[0]
                found[name] = 0.0
        return found

    def stop(self, timeout: float = 180.0) -> int | None:
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            say(f"lakehouse stream did not stop within {timeout:.0f} s of SIGTERM: SIGKILL to its process group")
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            code = self.proc.wait(30)
        # Its driver JVM exits with it; if it did not, end it by its PID.
        if self.driver is not None:
            for _ in range(40):
                if not Path(f"/proc/{self.driver}").exists():
                    break
                time.sleep(0.25)
            else:
                say(f"the stream's Spark driver (pid {self.driver}) outlived it: SIGKILL")
                try:
                    os.kill(self.driver, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._out.close()
        return code


# ---------------------------------------------------------------- the producer

def pregenerate(rate: int, count: int, seed: int) -> tuple[Any, list[tuple]]:
    """The generator (for more on the fly) and its first `count` records, encoded with a placeholder send time."""
    from lakehouse.pipelines.shop.generator import Mix, ShopGenerator

    gen = ShopGenerator(seed=seed, start=datetime.now(timezone.utc), events_per_second=float(rate), mix=Mix())
    it = iter(gen)
    began = time.perf_counter()
    out = [encoded(next(it)) for _ in range(count)]
    say(f"pre-generated {count:,} records in {time.perf_counter() - began:.0f} s (not a figure)")
    return it, out


def encoded(record) -> tuple:
    kind = "late" if record.kind == "valid" and record.late else record.kind
    return (record.topic, record.key, record.encode(PLACEHOLDER_AT), list(record.headers) or None, kind)


class Producer(threading.Thread):
    """Sends at `rate` records per second, stamping each record's sent_at with the wall clock as it goes."""

    def __init__(self, bootstrap: str, rate: int, records: list[tuple], more: Iterator[Any]):
        super().__init__(name="freshness-producer", daemon=True)
        from lakehouse.pipelines.shop.generator import iso

        self.bootstrap, self.rate, self.records, self.more = bootstrap, rate, records, more
        self.placeholder = iso(PLACEHOLDER_AT).encode()
        self.stop_event = threading.Event()
        self.started_at: float | None = None     # wall clock of the first send
        self.sent = self.delivered = self.failed = self.live = 0
        self.errors: list[str] = []
        self.per_second: collections.Counter = collections.Counter()   # (second, topic, kind) -> records
        self._counting = threading.Lock()          # the sender thread adds while the main thread reads
        self.behind_max = 0                      # most records the pacing was ever behind
        self.exc: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.exc = exc

    def _run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        from lakehouse.streaming.producer import producer_config

        producer = KafkaProducer(producer_config(self.bootstrap))

        def delivered(err, _msg) -> None:
            if err is None:
                self.delivered += 1
            else:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(str(err))

        stamp_second, stamp_prefix = -1, ""
        placeholder = self.placeholder
        records, n_pre = self.records, len(self.records)
        t0 = time.monotonic()
        self.started_at = time.time()
        i = 0
        while not self.stop_event.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            if i >= due:
                producer.poll(0)
                time.sleep(max(0.0005, min(0.005, (i + 1) / self.rate - (time.monotonic() - t0))))
                continue
            self.behind_max = max(self.behind_max, due - i)
            while i < due and not self.stop_event.is_set():
                if i < n_pre:
                    topic, key, value, headers, kind = records[i]
                    records[i] = None          # sent: let it go
                else:
                    topic, key, value, headers, kind = encoded(next(self.more))
                    self.live += 1
                now = time.time()
                second = int(now)
                if second != stamp_second:
                    stamp_second = second
                    stamp_prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
                stamp = f"{stamp_prefix}.{int((now - second) * 1000):03d}Z".encode()
                value = value.replace(placeholder, stamp, 1)
                while True:
                    try:
                        if headers:
                            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
                        else:
                            producer.produce(topic, value=value, key=key, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
                with self._counting:
                    self.per_second[(second, topic, kind)] += 1
                i += 1
                self.sent = i
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining:
            self.failed += remaining
            self.errors.append(f"{remaining} records unacknowledged 60 s after the last send")

    def sent_between(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """Records sent in [start, end) (whole seconds), by topic and kind."""
        out: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
        for (second, topic, kind), n in self._counts():
            if start <= second < end:
                out[topic][kind] += n
        return {t: dict(k) for t, k in out.items()}

    def rate_between(self, start: float, end: float) -> float:
        n = sum(n for (second, _t, _k), n in self._counts() if start <= second < end)
        return n / max(1.0, end - start)

    def _counts(self) -> list[tuple[tuple[int, str, str], int]]:
        with self._counting:
            return list(self.per_second.items())


# ---------------------------------------------------------------- reading the lake from its files

@dataclass
class Version:
    version: int
    committed_ns: int                  # mtime of _delta_log/<version>.json: when readers could see it
    commit_info_ms: int | None         # commitInfo.timestamp (the writer's clock when it began the commit)
    operation: str | None
    user_metadata: dict | None
    adds: list[str] = field(default_factory=list)     # data file paths (relative, decoded), in commit order
    removes: int = 0
    rewritten: int = 0                 # files added with dataChange=false (compaction): rows already counted
    records_added: int = 0             # numRecords of the added files' stats


def delta_log(table: Path) -> list[Version]:
    """Every version of a Delta table, read from its JSON commit files."""
    log_dir = table / "_delta_log"
    out = []
    if not log_dir.is_dir():
        return out
    for entry in sorted(log_dir.glob("[0-9]" * 20 + ".json")):
        version = Version(int(entry.stem), entry.stat().st_mtime_ns, None, None, None)
        for line in entry.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action and action["add"].get("dataChange") is False:
                version.rewritten += 1   # OPTIMIZE (also Delta's auto compaction) rewrites rows already added
            elif "add" in action:
                version.adds.append(unquote(action["add"]["path"]))
                version.records_added += json.loads(action["add"].get("stats") or "{}").get("numRecords", 0)
            elif "remove" in action:
                version.removes += 1
            elif "commitInfo" in action:
                info = action["commitInfo"]
                version.commit_info_ms = info.get("timestamp")
                version.operation = info.get("operation")
                meta = info.get("userMetadata")
                if meta:
                    try:
                        version.user_metadata = json.loads(meta)
                    except ValueError:
                        version.user_metadata = None
        out.append(version)
    return out


def physical_names(table: Path) -> dict[str, str]:
    """Logical -> physical column names (column mapping), from the newest metaData action; identity if none."""
    names: dict[str, str] = {}
    for entry in sorted((table / "_delta_log").glob("[0-9]" * 20 + ".json")):
        for line in entry.read_text().splitlines():
            if '"metaData"' in line:
                schema = json.loads(json.loads(line)["metaData"]["schemaString"])
                names = {f["name"]: f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"])
                         for f in schema["fields"]}
    return names


def read_rows(table: Path, versions: list[Version], columns: Sequence[str]) -> dict[str, Any]:
    """The given columns of every row, with its file's version, index in that version, commit and file mtimes."""
    import numpy as np
    import pyarrow.parquet as pq

    names = physical_names(table)
    physical = [names.get(c, c) for c in columns]
    cols: dict[str, list] = {c: [] for c in columns}
    meta: dict[str, list] = {"version": [], "index": [], "committed_ns": [], "file_ns": []}
    for v in versions:
        for index, rel in enumerate(v.adds):
            path = table / rel
            t = pq.read_table(path, columns=physical)
            n = t.num_rows
            for c, p in zip(columns, physical):
                col = t.column(p)
                if str(col.type).startswith("timestamp"):
                    col = col.cast("int64")       # microseconds since the epoch (UTC)
                cols[c].append(col.to_numpy(zero_copy_only=False))
            meta["version"].append(np.full(n, v.version, dtype=np.int64))
            meta["index"].append(np.full(n, index, dtype=np.int64))
            meta["committed_ns"].append(np.full(n, v.committed_ns, dtype=np.int64))
            meta["file_ns"].append(np.full(n, path.stat().st_mtime_ns, dtype=np.int64))
    out = {}
    for k, parts in {**cols, **meta}.items():
        out[k] = np.concatenate(parts) if parts else np.array([], dtype=np.int64)
    return out


def covers(position: dict | None, version: int, index: int) -> bool:
    """Whether a recorded source position (streaming.positions) covers file `index` of source version `version`."""
    if not position or position.get("snapshot") or "version" not in position:
        return False
    at = int(position["version"])
    return at > version or (at == version and int(position.get("index", -1)) >= index)


def gold_visibility(gold: list[Version], source: str, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """For each (source version, file index): the commit mtime (ns) of the first gold commit that covers it."""
    commits = [(v.committed_ns, (v.user_metadata or {}).get("sources", {}).get(source)) for v in gold
               if v.user_metadata and source in (v.user_metadata.get("sources") or {})]
    out = {}
    for key in sorted(set(keys)):
        for committed, position in commits:
            if covers(position, *key):
                out[key] = committed
                break
    return out


# ---------------------------------------------------------------- figures

def pct(values, qs=(50, 95, 99)) -> dict[str, float | None]:
    import numpy as np

    if len(values) == 0:
        return {f"p{q}": None for q in qs}
    got = np.percentile(values, qs)
    return {f"p{q}": round(float(x), 3) for q, x in zip(qs, got)}


def trend(sent_us, delay_s, start: float, end: float) -> dict[str, Any]:
    """Median and p99 delay per BUCKET_S of send time; least-squares slope of the medians (seconds per minute)."""
    import numpy as np

    buckets = []
    t = start
    while t < end - 1e-9:
        mask = (sent_us >= t * 1e6) & (sent_us < min(end, t + BUCKET_S) * 1e6)
        if mask.any():
            d = delay_s[mask]
            buckets.append({"from_s": round(t - start), "events": int(mask.sum()),
                            "p50_s": round(float(np.percentile(d, 50)), 3),
                            "p99_s": round(float(np.percentile(d, 99)), 3)})
        t += BUCKET_S
    slope = None
    if len(buckets) >= 2:
        fit = harness.linear_fit([b["from_s"] for b in buckets], [b["p50_s"] for b in buckets])
        slope = round(fit.slope * 60, 3)
    growth = round(buckets[-1]["p50_s"] - buckets[0]["p50_s"], 3) if len(buckets) >= 2 else None
    return {"buckets": buckets, "p50_slope_s_per_min": slope, "p50_growth_s": growth}


def progress_figures(lake: Path, start: float, end: float) -> dict[str, Any]:
    """Per flow, from stream_progress: micro-batches in [start, end) and where their time went."""
    import numpy as np
    import pyarrow.parquet as pq

    from lakehouse.schemas.tables import STREAM_PROGRESS

    table = Path(STREAM_PROGRESS.path(str(lake)))
    rows = []
    for v in delta_log(table):
        for rel in v.adds:
            rows.extend(pq.read_table(table / rel, columns=[
                "recorded_at", "query", "batch_id", "input_rows", "batch_ms", "duration_ms", "lag_records"]).to_pylist())
    by_query: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        at = r["recorded_at"].replace(tzinfo=timezone.utc).timestamp()
        if start <= at < end:
            r["at"] = at
            by_query[r["query"]].append(r)
    out: dict[str, Any] = {}
    busy_ms = 0
    for query, rs in sorted(by_query.items()):
        rs.sort(key=lambda r: r["at"])
        ms = [r["batch_ms"] or 0 for r in rs]
        busy_ms += sum(ms)
        parts: dict[str, list[int]] = collections.defaultdict(list)
        for r in rs:
            for k, v in (dict(r["duration_ms"]) if r["duration_ms"] else {}).items():
                parts[k].append(v)
        gaps = [b["at"] - a["at"] for a, b in zip(rs, rs[1:])]
        lags = [r["lag_records"] for r in rs if r["lag_records"] is not None]
        out[query] = {
            "batches": len(rs),
            "rows_per_batch_p50": int(statistics.median([r["input_rows"] for r in rs])),
            "batch_ms_p50": int(statistics.median(ms)), "batch_ms_p95": int(np.percentile(ms, 95)),
            "batch_ms_mean": int(statistics.fmean(ms)),
            "batch_ms_max": int(max(ms)),
            "parts_ms_mean": {k: round(statistics.fmean(v)) for k, v in sorted(parts.items())
                              if k != "triggerExecution"},
            "gap_between_batches_s_p50": round(statistics.median(gaps), 2) if gaps else None,
            "kafka_lag_records_max": max(lags) if lags else None,
            "kafka_lag_records_last": lags[-1] if lags else None,
        }
    return {"flows": out, "query_seconds_per_second": round(busy_ms / 1000 / max(1.0, end - start), 2)}


def flatness(lake: Path, start: float, end: float) -> dict[str, Any]:
    """Per query: batch time in the window's first and last FLAT_SPAN_S, and last / first (issue 47: <= 1.2)."""
    first = progress_figures(lake, start, start + FLAT_SPAN_S)["flows"]
    last = progress_figures(lake, end - FLAT_SPAN_S, end)["flows"]
    out = {}
    for query in sorted(first.keys() & last.keys()):
        a, b = first[query], last[query]
        out[query] = {"first": {k: a[k] for k in ("batches", "batch_ms_p50", "batch_ms_mean", "rows_per_batch_p50")},
                      "last": {k: b[k] for k in ("batches", "batch_ms_p50", "batch_ms_mean", "rows_per_batch_p50")},
                      "ratio_p50": round(b["batch_ms_p50"] / max(1, a["batch_ms_p50"]), 3),
                      "ratio_mean": round(b["batch_ms_mean"] / max(1, a["batch_ms_mean"]), 3)}
    return out


def table_files(lake: Path) -> dict[str, dict[str, int]]:
    """Per table of the lake: commits, live data files (added less removed) and commits that compacted it."""
    out = {}
    for log_dir in sorted(lake.glob("*/*/_delta_log")):
        versions = delta_log(log_dir.parent)
        out[log_dir.parent.name] = {
            "commits": len(versions), "live_files": sum(len(v.adds) + v.rewritten - v.removes for v in versions),
            "compactions": sum(v.operation == "OPTIMIZE" for v in versions)}
    return out


def health_now(flows, settings) -> dict[str, Any]:
    """What `lakehouse status` shows (streaming.health): each flow's lag."""
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.health import stream_health

    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap=settings.kafka_bootstrap)
    health = stream_health(flows, ctx)
    behind: dict[str, int] = {}     # per topic partition: one-hop queries report a topic's lag for two flows
    for h in health:
        for partition, n in h.kafka_lag.items():
            behind[partition] = max(behind.get(partition, 0), n)
    return {
        "flows": {h.flow: h.lag_text() for h in health},
        "kafka_lag_records": sum(behind.values()),
        "versions_behind_max": max([max(h.versions_behind.values(), default=0) for h in health], default=0),
        "caught_up": all(h.caught_up for h in health),
    }


# ---------------------------------------------------------------- one rate

def measure_rate(rate: int, *, minutes: float, warm_up_s: float, tables: Sequence[str], seed: int,
                 drain_s: float, start_limit_s: float, floor: bool = False, hops: int = 1,
                 work: bool = False, exactly_once: bool = False) -> dict[str, Any]:
    """One rate: `lakehouse stream` (or with `floor` the barest job, bench.bare_stream) fed at `rate` events/s."""
    from lakehouse.streaming.continuous import flows_for
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.pipelines.shop.gold import EVENT_SOURCES

    flows = [] if floor else flows_for(FLOWS, tables)
    names = ["bare"] if floor else [f.name for f in flows]
    silver_tables = [s.silver_table.name for s in EVENT_SOURCES if s.silver_table.name in names]
    has_gold = GOLD_TABLE in names
    window_s = minutes * 60
    shape = ("--work --exactly-once" if exactly_once else "--work") if work else f"{hops} hop{'s' * (hops > 1)}"
    say(f"=== {rate:,} events/s: " + (f"the barest job (bench.bare_stream, {shape})"
                                        if floor else f"{len(flows)} flows")
        + f", {window_s:.0f} s measured after a {warm_up_s:.0f} s warm-up")
    result: dict[str, Any] = {"rate": rate, "flows": names, "load_start": harness.load_now()}
    more, records = pregenerate(rate, min(MAX_PREGENERATED, int(rate * (start_limit_s + window_s + 10))), seed)

    with bench_home(str(rate)) as settings:
        home = Path(settings.home)
        lake = Path(settings.lake_root)
        bare_table = hop_table(lake / "bare", hops)   # the chain's last table: what the figure is about
        if floor:
            command = [sys.executable, "-m", "bench.bare_stream", str(lake / "bare"),
                       *(shape.split() if work else ["--hops", str(hops)])]

            def health() -> dict[str, Any]:
                return floor_health(settings, lake / "bare" if work else bare_table, orders_only=work)
        else:
            command = [str(LAKEHOUSE), "stream", *tables]

            def health() -> dict[str, Any]:
                return health_now(flows, settings)
        with harness.private_broker(settings) as broker:
            stream = producer = None
            probes: list[harness.PeakMemory] = []
            try:
                stream = Stream(settings, command, home / "stream.log")
                bronze = ["bare"] if floor else [f.name for f in flows if f.name.startswith("bronze_")]
                began = time.monotonic()
                while not set(bronze) <= set(stream.streaming()):
                    if not stream.alive():
                        raise RuntimeError("lakehouse stream exited during its start:\n" + stream.text()[-3000:])
                    if time.monotonic() - began > 600:
                        raise RuntimeError("the bronze queries did not start within 600 s:\n" + stream.text()[-3000:])
                    time.sleep(0.5)
                result["stream_start_s"] = round(time.monotonic() - began, 1)
                stream.driver = spark_driver_of(stream.proc.pid)
                say(f"{'the query' if floor else 'bronze queries'} streaming after {result['stream_start_s']} s; Spark driver pid {stream.driver}, "
                    f"broker pid {broker.pid}")
                probes = [harness.PeakMemory("spark_driver", stream.driver), harness.PeakMemory("broker", broker.pid)]
                for probe in probes:
                    probe.start()

                producer = Producer(broker.bootstrap, rate, records, more)
                records = []                    # the producer owns them now (it frees what it sent)
                producer.start()
                while producer.started_at is None:
                    time.sleep(0.01)
                send_start = producer.started_at
                while True:
                    up = stream.streaming()
                    if set(names) <= set(up):
                        break
                    if not stream.alive():
                        raise RuntimeError("lakehouse stream exited:\n" + stream.text()[-3000:])
                    if producer.exc:
                        raise RuntimeError(f"the producer failed: {producer.exc}")
                    if time.time() - send_start > start_limit_s:
                        say(f"not every flow is streaming {start_limit_s:.0f} s after the first send (still waiting "
                            f"for its input: {', '.join(sorted(set(names) - set(up)))}); measuring anyway")
                        break
                    time.sleep(0.5)
                all_up = time.time()
                result["all_flows_streaming_s_after_first_send"] = (
                    round(all_up - send_start, 1) if set(names) <= set(stream.streaming()) else None)
                # Warm-up: warm_up_s more, and until the backlog of the start is gone (Kafka lag under
                # CAUGHT_UP_S of production, no input table more than 2 versions ahead), within the start limit.
                ended_by = "start limit"
                while time.time() - send_start < start_limit_s:
                    if not stream.alive():
                        raise RuntimeError("lakehouse stream exited:\n" + stream.text()[-3000:])
                    if time.time() >= all_up + warm_up_s:
                        h = health()
                        if h["kafka_lag_records"] <= rate * CAUGHT_UP_S and h["versions_behind_max"] <= 2:
                            ended_by = "caught up"
                            break
                    time.sleep(2)
                start = float(int(time.time()) + 1)
                end = start + window_s
                result["flows_not_streaming_at_window_start"] = sorted(set(names) - set(stream.streaming()))
                result["warm_up"] = {"ended_by": ended_by, "s_after_first_send": round(start - send_start, 1)}
                say(f"warm-up over ({ended_by}) {start - send_start:.0f} s after the first send"
                    + (f"; flows not streaming yet: {', '.join(result['flows_not_streaming_at_window_start'])}"
                       if result["flows_not_streaming_at_window_start"] else "")
                    + f"; measuring until {datetime.fromtimestamp(end, timezone.utc):%H:%M:%S} UTC")
                while time.time() < start:
                    time.sleep(0.05)
                cpu0 = {"spark_driver": cpu_seconds(stream.driver), "broker": cpu_seconds(broker.pid),
                        "bench": cpu_seconds(os.getpid()), "stream_python": cpu_seconds(stream.proc.pid)}
                machine0 = machine_cpu()
                result["load_measure_start"] = harness.load_now()
                next_note = time.time() + 30
                while time.time() < end:
                    if not stream.alive():
                        raise RuntimeError("lakehouse stream exited while measuring:\n" + stream.text()[-3000:])
                    if producer.exc:
                        raise RuntimeError(f"the producer failed: {producer.exc}")
                    if time.time() >= next_note:
                        say(f"  sent {producer.sent:,} ({producer.rate_between(time.time() - 30, time.time()):,.0f}/s "
                            f"over 30 s), load {harness.load_now()}")
                        next_note += 30
                    time.sleep(0.5)
                producer.stop_event.set()
                machine1 = machine_cpu()
                cpu1 = {"spark_driver": cpu_seconds(stream.driver), "broker": cpu_seconds(broker.pid),
                        "bench": cpu_seconds(os.getpid()), "stream_python": cpu_seconds(stream.proc.pid)}
                result["load_measure_end"] = harness.load_now()
                result["status_at_end"] = health()
                producer.join(90)
                say(f"window over: {producer.sent:,} records sent, {producer.delivered:,} acknowledged, "
                    f"{producer.failed} failed; Kafka lag at the end {result['status_at_end']['kafka_lag_records']:,} "
                    f"records")
                result["cpu_cores_in_window"] = {
                    k: (None if cpu0[k] is None or cpu1[k] is None else round((cpu1[k] - cpu0[k]) / window_s, 2))
                    for k in cpu0}
                busy = (machine1[0] - machine0[0]) / max(1, machine1[1] - machine0[1])
                result["machine_busy_share_in_window"] = round(busy, 3)

                # Drain: until every flow has caught up (what lakehouse status reads), or drain_s.
                began = time.monotonic()
                drained = False
                while time.monotonic() - began < drain_s:
                    if not stream.alive():
                        raise RuntimeError("lakehouse stream exited while draining:\n" + stream.text()[-3000:])
                    if health()["caught_up"]:
                        drained = True
                        break
                    time.sleep(3)
                result["drain_s"] = round(time.monotonic() - began, 1)
                result["drained"] = drained
                say(f"drain: {'caught up' if drained else 'NOT caught up'} after {result['drain_s']} s")
                peaks = {p.name: harness.mib(p.stop()) for p in probes}
                probes = []
                result["peak_rss_mib"] = peaks
                result["peak_rss_method"] = harness.PeakMemory.VMHWM
            finally:
                for p in probes:
                    p.stop()
                if producer is not None:
                    producer.stop_event.set()
                    producer.join(90)
                if stream is not None:
                    code = stream.stop()
                    result["observed_until"] = time.time()      # its last commits land while it stops
                    say(f"{'bench.bare_stream' if floor else 'lakehouse stream'} stopped (exit {code})")
                    result["stream_exit"] = code
                    result["stream_log_tail"] = stream.text()[-1500:]
                    result["trigger_sizing"] = next(
                        (line for line in stream.text().splitlines() if "triggers sized for" in line), None)
                    result["stream_log_traces"] = trace_heads(stream.text())
        # The broker is stopped; the lake stays until the folder is removed.
        result["producer"] = {
            "sent": producer.sent, "delivered": producer.delivered, "failed": producer.failed,
            "errors": producer.errors, "generated_live": producer.live,
            "rate_in_window": round(producer.rate_between(start, end)),
            "most_records_behind_pace": producer.behind_max,
            "sent_in_window": producer.sent_between(start, end),
        }
        result["window_utc"] = [datetime.fromtimestamp(start, timezone.utc).isoformat(timespec="seconds"),
                                datetime.fromtimestamp(end, timezone.utc).isoformat(timespec="seconds")]
        if floor and work:
            result["bare"] = floor_work_analyse(lake / "bare", start, end, result)
        elif floor:
            result["bare"] = floor_analyse(bare_table, start, end, result)
        else:
            result.update(analyse(lake, silver_tables, has_gold, start, end, result))
            result["progress"] = progress_figures(lake, start, end)
            if window_s >= 2 * FLAT_SPAN_S:
                result["flatness"] = flatness(lake, start, end)
            result["table_files"] = table_files(lake)
    return result


def censored_pct(delays, missing: int, floor_s: float) -> dict[str, Any]:
    """Percentiles with `missing` events not visible by the end counted at `floor_s` (their least possible delay):
    with any missing, the figures are lower bounds."""
    import numpy as np

    values = np.concatenate([delays, np.full(max(0, missing), max(0.0, floor_s))]) if missing > 0 else delays
    out: dict[str, Any] = pct(values)
    out["lower_bound"] = missing > 0
    return out


def analyse(lake: Path, silver_tables: Sequence[str], has_gold: bool, start: float, end: float,
            result: dict) -> dict[str, Any]:
    """Send -> silver and send -> gold delays of the events sent in [start, end).

    Events sent in the window that no silver commit holds by the end of the observation (the stream was
    stopped) are counted at (stop - end of window), the least delay they can have, so that a stream that
    fell behind does not look fresh: the percentiles are then lower bounds ("lower_bound": true).
    """
    import numpy as np

    from lakehouse.schemas import tables as table_specs
    from lakehouse.streaming.flows import BY_NAME

    observed_until = result["observed_until"]
    sent_in_window = result["producer"]["sent_in_window"]
    late_path = Path(table_specs.LATE_ARRIVALS.path(str(lake)))
    late_rows = (read_rows(late_path, delta_log(late_path), ["flow", "topic", "partition", "offset", "appended_at"])
                 if late_path.is_dir() else None)

    def late_of(flow: str, in_window: bool) -> set[tuple[str, int, int]]:
        if late_rows is None:
            return set()
        return {(t, int(p), int(o)) for f, t, p, o, a in zip(late_rows["flow"], late_rows["topic"], late_rows["partition"],
                                                            late_rows["offset"], late_rows["appended_at"])
                if f == flow and (not in_window or start * 1e6 <= a < end * 1e6)}

    out: dict[str, Any] = {"silver": {}, "gold": None, "observed_until_s_after_window": round(observed_until - end, 1)}
    parts: dict[str, list] = {"commit": [], "file": [], "sent": [], "append": []}
    missing_all = 0
    orders = None
    for name in silver_tables:
        path = Path(BY_NAME[name].target.path(str(lake)))
        topic = BY_NAME[BY_NAME[name].sources[0].name].sources[0].name
        versions = delta_log(path)
        rows = read_rows(path, versions, ["sent_at", "appended_at", "topic", "partition", "offset"])
        sent = rows["sent_at"]
        mask = (sent >= start * 1e6) & (sent < end * 1e6)
        commit_s = (rows["committed_ns"][mask] / 1e3 - sent[mask]) / 1e6
        file_s = (rows["file_ns"][mask] / 1e3 - sent[mask]) / 1e6
        append_s = (rows["appended_at"][mask] - sent[mask]) / 1e6
        kinds = sent_in_window.get(topic, {})
        late_n = len(late_of(name, True))
        expected = kinds.get("valid", 0) + kinds.get("late", 0) - late_n
        missing = max(0, expected - int(mask.sum()))
        missing_all += missing
        out["silver"][name] = {
            "events": int(mask.sum()), "expected": expected, "missing": missing, "late_arrivals": late_n,
            "versions": len(versions), "files_removed": sum(v.removes for v in versions),
            "commit": censored_pct(commit_s, missing, observed_until - end),
            "commit_visible_only": pct(commit_s),
            "data_file_lower_bound": pct(file_s), "send_to_append": pct(append_s),
        }
        for k, v in (("commit", commit_s), ("file", file_s), ("sent", sent[mask]), ("append", append_s)):
            parts[k].append(v)
        if name == GOLD_SOURCE:
            orders = {k: v[mask] for k, v in rows.items()}
            orders["delay_s"] = commit_s
            orders["missing"] = missing
    commit_s, file_s, sent = (np.concatenate(parts[k]) for k in ("commit", "file", "sent"))
    out["silver_all"] = {
        "tables": list(silver_tables), "events": int(len(sent)), "missing": missing_all,
        "commit": censored_pct(commit_s, missing_all, observed_until - end), "commit_visible_only": pct(commit_s),
        "data_file_lower_bound": pct(file_s), "send_to_append": pct(np.concatenate(parts["append"])),
        "trend": trend(sent, commit_s, start, end),
    }
    if has_gold and orders is not None:
        gold = delta_log(Path(shop.GOLD_REVENUE_PER_MINUTE.path(str(lake))))
        late = late_of(GOLD_TABLE, False)
        keep = np.array([(t, int(p), int(o)) not in late for t, p, o in
                         zip(orders["topic"], orders["partition"], orders["offset"])], dtype=bool)
        keys = list(zip(orders["version"][keep].tolist(), orders["index"][keep].tolist()))
        seen = gold_visibility(gold, GOLD_SOURCE, keys)
        visible = np.array([seen.get(k, -1) for k in keys], dtype=np.int64)
        sent_o = orders["sent_at"][keep]
        ok = visible >= 0
        gold_s = (visible[ok] / 1e3 - sent_o[ok]) / 1e6
        hop_s = gold_s - orders["delay_s"][keep][ok]
        uncovered = (observed_until * 1e6 - sent_o[~ok]) / 1e6      # their least possible delay, each
        with_uncovered = np.concatenate([gold_s, uncovered])
        out["gold"] = {
            "table": GOLD_TABLE, "source": GOLD_SOURCE, "orders": int(keep.sum()),
            "late_left_out": int((~keep).sum()), "never_covered": int((~ok).sum()),
            "missing_in_silver": orders["missing"], "gold_commits": len(gold),
            "commit": censored_pct(with_uncovered, orders["missing"], observed_until - end),
            "commit_visible_only": pct(gold_s), "silver_to_gold": pct(hop_s),
            "trend": trend(sent_o[ok], gold_s, start, end),
        }
        out["gold"]["commit"]["lower_bound"] = bool(orders["missing"] or (~ok).any())
    return out


# ---------------------------------------------------------------- the floor (--floor): bench.bare_stream

STAMP = re.compile(rb'"sent_at":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z"')


def floor_health(settings, table: Path, orders_only: bool = False) -> dict[str, Any]:
    """The bare job's Kafka lag: records on the shop's topics (the orders topic only) minus the rows its table holds."""
    from lakehouse.schemas import topics
    from lakehouse.streaming.health import end_offsets

    read = [t for t in topics.ALL if t.name == WORK_TOPIC] if orders_only else topics.ALL
    on_topics = sum(high - low for partitions in end_offsets(settings.kafka_bootstrap, read).values()
                    for low, high in partitions.values())
    done = delta_log(table)
    if orders_only:
        # A record is through once its batch's gold MERGE committed (--work): bronze rows of a batch cut short do not count.
        merged = merged_batches(work_table(table, "gold"))
        done = [v for v in done if v.user_metadata and v.user_metadata.get("batch") in merged]
    lag = max(0, on_topics - sum(v.records_added for v in done))
    return {"flows": {"bare": f"{lag:,} records behind"}, "kafka_lag_records": lag, "versions_behind_max": 0,
            "caught_up": lag == 0}


def sent_micros(values) -> tuple[Any, Any]:
    """The producer's send stamp of each record value, in µs since the epoch, and whether it had one (a
    truncated record lost it)."""
    import calendar

    import numpy as np

    seconds: dict[bytes, int] = {}
    out = np.zeros(len(values), dtype=np.int64)
    has = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        m = STAMP.search(value) if value is not None else None
        if m is None:
            continue
        whole = seconds.get(m.group(1))
        if whole is None:
            whole = seconds[m.group(1)] = calendar.timegm(time.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S"))
        out[i] = whole * 1_000_000 + int(m.group(2)) * 1000
        has[i] = True
    return out, has


def floor_analyse(table: Path, start: float, end: float, result: dict) -> dict[str, Any]:
    """Send -> visible in the bare job's table for the records sent in [start, end), every topic and kind.

    Records sent in the window that the table does not hold by the end count at (stop - end of window),
    as in analyse. Window membership of a record without a stamp (truncated JSON) is its broker time."""
    import numpy as np

    observed_until = result["observed_until"]
    versions = delta_log(table)
    rows = read_rows(table, versions, ["value", "timestamp"])
    sent, stamped = sent_micros(rows["value"])
    mask = stamped & (sent >= start * 1e6) & (sent < end * 1e6)
    unstamped_in_window = int((~stamped & (rows["timestamp"] >= start * 1e6) & (rows["timestamp"] < end * 1e6)).sum())
    commit_s = (rows["committed_ns"][mask] / 1e3 - sent[mask]) / 1e6
    file_s = (rows["file_ns"][mask] / 1e3 - sent[mask]) / 1e6
    append_s = (rows["timestamp"][mask] - sent[mask]) / 1e6
    expected = sum(sum(kinds.values()) for kinds in result["producer"]["sent_in_window"].values())
    missing = max(0, expected - int(mask.sum()) - unstamped_in_window)
    in_window = [v.committed_ns / 1e9 for v in versions if start <= v.committed_ns / 1e9 < end]
    gaps = [b - a for a, b in zip(in_window, in_window[1:])]
    return {
        "table": str(table.name), "events": int(mask.sum()), "expected": expected, "missing": missing,
        "without_stamp_in_window": unstamped_in_window, "versions": len(versions),
        "commit": censored_pct(commit_s, missing, observed_until - end), "commit_visible_only": pct(commit_s),
        "data_file_lower_bound": pct(file_s), "send_to_append": pct(append_s),
        "trend": trend(sent[mask], commit_s, start, end),
        "commits_in_window": len(in_window),
        "gap_between_commits_s": pct(gaps) if gaps else None,
    }


def merged_batches(gold: Path, versions: list[Version] | None = None) -> dict[int, int]:
    """The batches the --work job's gold table merged: batch id -> the mtime (ns) of its MERGE commit."""
    return {int(v.user_metadata["batch"]): v.committed_ns for v in (delta_log(gold) if versions is None else versions)
            if v.operation == "MERGE" and v.user_metadata and "batch" in v.user_metadata}


def floor_work_analyse(bronze: Path, start: float, end: float, result: dict) -> dict[str, Any]:
    """Send -> the gold commit of the batch that carried it, for the orders sent in [start, end) (--work).

    Each bronze row holds its batch's id, and each gold MERGE commit records the batch it merged; an order
    sent in the window whose batch has no gold commit by the end counts as in floor_analyse."""
    import numpy as np

    observed_until = result["observed_until"]
    rows = read_rows(bronze, delta_log(bronze), ["value", "timestamp", "batch"])
    gold = delta_log(work_table(bronze, "gold"))
    merged = merged_batches(work_table(bronze, "gold"), gold)
    sent, stamped = sent_micros(rows["value"])
    visible_ns = np.array([merged.get(int(b), -1) for b in rows["batch"]], dtype=np.int64)
    in_window = stamped & (sent >= start * 1e6) & (sent < end * 1e6)
    mask = in_window & (visible_ns >= 0)
    unstamped_in_window = int((~stamped & (rows["timestamp"] >= start * 1e6) & (rows["timestamp"] < end * 1e6)).sum())
    commit_s = (visible_ns[mask] / 1e3 - sent[mask]) / 1e6
    expected = sum(result["producer"]["sent_in_window"].get(WORK_TOPIC, {}).values())
    missing = max(0, expected - int(mask.sum()) - unstamped_in_window)
    commits = sorted(ns / 1e9 for ns in merged.values() if start <= ns / 1e9 < end)
    gaps = [b - a for a, b in zip(commits, commits[1:])]
    return {
        "table": work_table(bronze, "gold").name, "events": int(mask.sum()), "expected": expected, "missing": missing,
        "without_stamp_in_window": unstamped_in_window, "versions": len(gold),
        "commit": censored_pct(commit_s, missing, observed_until - end), "commit_visible_only": pct(commit_s),
        "in_bronze": pct((rows["committed_ns"][in_window] / 1e3 - sent[in_window]) / 1e6),
        "data_file_lower_bound": pct((rows["file_ns"][in_window] / 1e3 - sent[in_window]) / 1e6),
        "trend": trend(sent[mask], commit_s, start, end),
        "commits_in_window": len(commits), "gap_between_commits_s": pct(gaps) if gaps else None,
    }


def floor_verdicts(rates: dict[str, dict]) -> None:
    """Whether the bare job kept up at each rate, by the same rule as the stream's."""
    for r in rates.values():
        r["kept_up"] = kept_up(r, r["bare"])


def floor_what(hops: int, work: bool = False, exactly_once: bool = False) -> str:
    """What the floor measured, with its number of hops (or the orders path's writes, --work)."""
    if work:
        return FLOOR_WORK_WHAT.format(txn="each write with Delta's txn app id and version (exactly once); no "
                                      if exactly_once else "no txn ids, ")
    if hops == 1:
        return FLOOR_WHAT
    return (f"{FLOOR_WHAT}, then {hops - 1} more quer{'ies' if hops > 2 else 'y'}, each a Delta stream of the table "
            f"before it appended unchanged to the next: {hops} hops, send -> visible in the last table")


def floor_summary(result: dict) -> str:
    lines = [f"freshness floor: {floor_what(result.get('hops', 1), result.get('work', False), result.get('exactly_once', False))}, trigger {result['trigger']}, {result['minutes']} min per rate after a "
             f"{result['warm_up_s']:.0f} s warm-up (p50/p95/p99):"]
    for r in result["rates"].values():
        b, gaps = r["bare"], r["bare"]["gap_between_commits_s"] or {}
        lines.append(
            f"  {r['rate']:,}/s (sent {r['producer']['rate_in_window']:,}/s in the window): send->visible "
            f"{fmt(b['commit'])} ({b['events']:,} records, {b['missing']:,} not by the end; data-file lower bound "
            f"{fmt(b['data_file_lower_bound'])}); {b['commits_in_window']} commits in the window, one every "
            f"{gaps.get('p50')} s (p50); kept up: {'yes' if r['kept_up']['kept_up'] else 'no'} (lag "
            f"{r['kept_up']['lag_at_end_s_of_production']} s of production at the end); driver used "
            f"{r['cpu_cores_in_window'].get('spark_driver')} cores; peak RSS driver "
            f"{r['peak_rss_mib'].get('spark_driver')} MiB; load {r['load_measure_start']} -> {r['load_measure_end']}")
    return "\n".join(lines)


def floor_docs_row(result: dict) -> str:
    per_rate, kept = [], []
    for r in result["rates"].values():
        b, gaps = r["bare"], r["bare"]["gap_between_commits_s"] or {}
        per_rate.append(f"{r['rate']:,}/s: {fmt(b['commit'])} (one commit every {gaps.get('p50')} s at p50; the "
                        f"driver used {r['cpu_cores_in_window'].get('spark_driver')} of 2 cores)")
        kept.append(f"{r['rate']:,}/s " + ("kept up" if r["kept_up"]["kept_up"] else
                                           f"fell behind ({r['kept_up']['lag_at_end_s_of_production']} s of production)"))
    loads = ", ".join(f"{r['rate']:,}/s {r['load_measure_start']}-{r['load_measure_end']}" for r in result["rates"].values())
    return harness.docs_row(
        result["date"][:16].replace("T", " "), f"`{result['command']}`",
        f"the floor for send -> {FLOOR_FOR.get('work' if result.get('work') else result.get('hops', 1), 'the last table')}: "
        f"{floor_what(result.get('hops', 1), result.get('work', False), result.get('exactly_once', False))}, trigger {result['trigger']}, the project's Spark settings, fresh "
        f"broker and table per rate; the same paced shop events as the stream's runs; {result['minutes']:g} min "
        f"measured per rate after a {result['warm_up_s']:.0f} s warm-up; p50/p95/p99 send -> visible (mtime of the "
        f"commit file that added the record), " + ("every order" if result.get("work") else "every record of every topic"),
        "-", "; ".join(per_rate), "; ".join(kept) + " (not a target: the yardstick for target 3)",
        f"{result['machine']}; load in the windows {loads}",
    )


# ---------------------------------------------------------------- verdicts, summary, record

def kept_up(r: dict, trend_of: dict) -> dict[str, Any]:
    """Whether a rate's run kept up: small Kafka lag at the end, a median delay that did not grow, a finished drain."""
    lag_s = r["status_at_end"]["kafka_lag_records"] / r["rate"]
    growth = trend_of["trend"]["p50_growth_s"]
    ok = r["drained"] and lag_s <= LAG_LIMIT_S and (growth is None or growth <= TREND_LIMIT_S)
    return {"kept_up": bool(ok), "lag_at_end_s_of_production": round(lag_s, 2), "p50_growth_s": growth,
            "drained": r["drained"],
            "rule": f"lag at the end <= {LAG_LIMIT_S:.0f} s of production, median delay grew <= "
                    f"{TREND_LIMIT_S:.0f} s over the window, drain finished"}


def verdicts(rates: dict[str, dict]) -> dict[str, Any]:
    sustained = []
    for key, r in rates.items():
        silver = r["silver_all"]["commit"]["p99"]
        r["kept_up"] = kept_up(r, r["silver_all"])
        r["sustained"] = bool(r["kept_up"]["kept_up"] and silver is not None and silver <= SUSTAINED_SILVER_P99_S)
        if r["sustained"]:
            sustained.append(r["rate"])
    at = rates.get(str(TARGET_RATE))
    out = {"highest_sustained_rate": max(sustained) if sustained else None,
           "sustained_rule": f"kept up and p99 send -> silver <= {SUSTAINED_SILVER_P99_S:.0f} s"}
    if at is None:
        out["silver_p99_at_5000"] = out["gold_p99_at_5000"] = None
        out["silver_target"] = out["gold_target"] = "not run (no 5000 events/s rate)"
    else:
        s = at["silver_all"]["commit"]["p99"]
        g = (at.get("gold") or {}).get("commit", {}).get("p99")
        out["silver_p99_at_5000"], out["gold_p99_at_5000"] = s, g
        out["lower_bounds_at_5000"] = bool(at["silver_all"]["commit"].get("lower_bound") or
                                           (at.get("gold") or {}).get("commit", {}).get("lower_bound"))
        out["silver_target"] = harness.met(s is not None and s <= TARGET_SILVER_P99_S)
        out["gold_target"] = "not measured" if g is None else harness.met(g <= TARGET_GOLD_P99_S)
    return out


def fmt(p: dict | None) -> str:
    """p50/p95/p99 of a percentile dict, with ">=" when they are lower bounds."""
    if not p or p.get("p50") is None:
        return "-"
    ge = ">= " if p.get("lower_bound") else ""
    return f"{ge}{p['p50']:.2f}/{p['p95']:.2f}/{p['p99']:.2f} s"


def summary(result: dict) -> str:
    lines = [f"freshness of lakehouse stream ({result['scope']}), {result['minutes']} min per rate after a "
             f"{result['warm_up_s']:.0f} s warm-up, trigger {result['trigger']} (p50/p95/p99):"]
    for r in result["rates"].values():
        s, g = r["silver_all"], r.get("gold") or {}
        prod = r["producer"]
        lines.append(
            f"  {r['rate']:,}/s (sent {prod['rate_in_window']:,}/s in the window): send->silver {fmt(s['commit'])} "
            f"({s['events']:,} events visible, {s['missing']:,} not by the end; data-file lower bound "
            f"{fmt(s['data_file_lower_bound'])}); send->gold {fmt(g.get('commit'))}"
            + (f" ({g['orders']:,} orders, {g['never_covered']:,} never covered; silver->gold {fmt(g['silver_to_gold'])})"
               if g else ""))
        lines.append(
            f"      kept up: {'yes' if r['kept_up']['kept_up'] else 'no'} (Kafka lag at the end "
            f"{r['status_at_end']['kafka_lag_records']:,} records = {r['kept_up']['lag_at_end_s_of_production']} s of "
            f"production, median delay grew {r['kept_up']['p50_growth_s']} s, drain "
            f"{'done' if r['drained'] else 'NOT done'} in {r['drain_s']} s); flows not streaming at the window's start: "
            f"{', '.join(r['flows_not_streaming_at_window_start']) or 'none'}")
        lines.append(
            f"      peak RSS driver {r['peak_rss_mib'].get('spark_driver')} MiB, broker {r['peak_rss_mib'].get('broker')} "
            f"MiB; cores used in the window {r['cpu_cores_in_window']}; query-seconds per second "
            f"{r['progress']['query_seconds_per_second']}; load {r['load_measure_start']} -> {r['load_measure_end']}, "
            f"machine busy {r['machine_busy_share_in_window']:.0%}")
        if r.get("trigger_sizing"):
            lines.append("      " + r["trigger_sizing"].split("triggers sized for", 1)[-1].join(("triggers sized for", "")))
        for query, f in (r.get("flatness") or {}).items():
            lines.append(f"      {query}: batch p50 {f['first']['batch_ms_p50']:,} ms in the first {FLAT_SPAN_S // 60} "
                         f"min, {f['last']['batch_ms_p50']:,} ms in the last: {f['ratio_p50']}x (mean {f['ratio_mean']}x)")
        for flow in ("bronze_orders", "bronze_page_views", "silver_orders", "silver_page_views", GOLD_TABLE):
            p = r["progress"]["flows"].get(flow)
            if p:
                top = sorted(p["parts_ms_mean"].items(), key=lambda kv: -kv[1])[:3]
                lines.append(f"      {flow}: {p['batches']} batches, {p['rows_per_batch_p50']:,} rows/batch, batch "
                             f"p50 {p['batch_ms_p50']:,} ms p95 {p['batch_ms_p95']:,} ms, one every "
                             f"{p['gap_between_batches_s_p50']} s; mean " + ", ".join(f"{k} {v:,} ms" for k, v in top))
    v = result["verdicts"]
    lines.append(f"  targets at {TARGET_RATE:,}/s: p99 to silver {v['silver_p99_at_5000']} s (<= {TARGET_SILVER_P99_S:.0f} "
                 f"s) {v['silver_target']}; p99 to gold {v['gold_p99_at_5000']} s (<= {TARGET_GOLD_P99_S:.0f} s) "
                 f"{v['gold_target']}; highest rate sustained: {v['highest_sustained_rate']}")
    return "\n".join(lines)


def docs_row(result: dict) -> str:
    v = result["verdicts"]
    per_rate_s, per_rate_g = [], []
    for r in result["rates"].values():
        s, g = r["silver_all"], (r.get("gold") or {}).get("commit")
        ku = ("kept up" if r["kept_up"]["kept_up"] else
              f"fell behind: lag {r['kept_up']['lag_at_end_s_of_production']} s of production at the end")
        slowest = max(r["progress"]["flows"].items(), key=lambda kv: kv[1]["batch_ms_p50"], default=None)
        silver_batch = r["progress"]["flows"].get("silver_orders", {}).get("batch_ms_p50")
        per_rate_s.append(
            f"{r['rate']:,}/s: {fmt(s['commit'])} ({ku}; batch p50 silver_orders "
            + (f"{silver_batch:,} ms" if silver_batch is not None else "none finished in the window")
            + (f", slowest {slowest[0]} {slowest[1]['batch_ms_p50']:,} ms" if slowest else "")
            + f"; the driver used {r['cpu_cores_in_window'].get('spark_driver')} of 2 cores, machine busy "
              f"{r['machine_busy_share_in_window']:.0%}; peak RSS driver {r['peak_rss_mib'].get('spark_driver')} MiB, "
              f"broker {r['peak_rss_mib'].get('broker')} MiB)")
        per_rate_g.append(f"{r['rate']:,}/s: {fmt(g)}")
    loads = ", ".join(f"{r['rate']:,}/s {r['load_measure_start']}-{r['load_measure_end']}" for r in result["rates"].values())
    ge = ">= " if v.get("lower_bounds_at_5000") else ""
    ended = ", ".join(f"{r['rate']:,}/s {r.get('warm_up', {}).get('ended_by', '?')} after "
                      f"{r.get('warm_up', {}).get('s_after_first_send', '?')} s" for r in result["rates"].values())
    return harness.docs_row(
        result["date"][:16].replace("T", " "), f"`{result['command']}`",
        f"`lakehouse stream` {result['scope']}, trigger {result['trigger']}, quality gate on, fresh broker and lake "
        f"per rate; shop events paced to each rate, send time stamped by the producer; {result['minutes']:g} min "
        f"measured per rate after a discarded warm-up (from the first send until {result['warm_up_s']:.0f} s after "
        f"the last query started and the start's backlog was worked off, at most {result.get('start_limit_s', 300):.0f} s; "
        f"ended by: {ended}); p50/p95/p99; before = send -> silver (mtime of the commit file of the version that added "
        f"the event), after = send -> {GOLD_TABLE} (first gold commit whose recorded position covers it); '>=' = "
        f"events not visible by the end counted at their least delay",
        "; ".join(per_rate_s), "; ".join(per_rate_g),
        f"p99 to silver at 5,000/s {ge}{v['silver_p99_at_5000']} s vs <= {TARGET_SILVER_P99_S:.0f} s {v['silver_target']}; "
        f"p99 to gold {ge}{v['gold_p99_at_5000']} s vs <= {TARGET_GOLD_P99_S:.0f} s {v['gold_target']}; highest rate "
        f"sustained (kept up, p99 silver <= 10 s): {v['highest_sustained_rate'] or 'none of those run'}",
        f"{result['machine']}; load in the windows {loads}",
    )


def with_scope(scope_key: str, result: dict) -> dict[str, Any]:
    """What a recorded run writes: its result under its scope, beside the other scopes' latest results from the
    JSON the last recorded run wrote on this machine (bench.harness.previous; none there: this scope alone)."""
    scopes = (harness.previous(NAME) or {}).get("scopes")
    scopes = dict(scopes) if isinstance(scopes, dict) else {}
    scopes[scope_key] = result
    return {"latest": scope_key, "scopes": scopes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000,20000", help="events per second, comma-separated")
    parser.add_argument("--minutes", type=float, default=3.0, help="measured minutes per rate (default 3)")
    parser.add_argument("--warm-up", type=float, default=30.0,
                        help="seconds after the last query started that are discarded too (default 30)")
    parser.add_argument("--drain", type=float, default=300.0, help="most seconds to wait for the stream to catch up")
    parser.add_argument("--start-limit", type=float, default=300.0,
                        help="most seconds after the first send before measuring, even if the stream has not caught "
                             "up with its start or not every query runs yet (default 300)")
    parser.add_argument("--tables", nargs="*", default=[], metavar="TABLE",
                        help="stream only these tables and what they need (default: every flow)")
    parser.add_argument("--floor", action="store_true",
                        help="measure the yardstick instead of the stream: the barest continuous Spark job "
                             "(bench.bare_stream: every topic, one query, Kafka straight into one Delta table), "
                             "send -> visible there; recorded as the scope 'floor'")
    parser.add_argument("--hops", type=int, default=1, metavar="N",
                        help="with --floor: a chain of N bare queries, each reading the table before it, as the "
                             "layers do (2: what silver is, 3: what a gold table is; default 1)")
    parser.add_argument("--work", action="store_true",
                        help="with --floor: one bare query doing the orders path's writes per micro-batch (bronze "
                             "append, silver append, gold MERGE), send -> gold; the floor of the gold figure with "
                             "no hop between the layers; recorded as the scope 'floor, same work'")
    parser.add_argument("--exactly-once", action="store_true",
                        help="with --work: each of the floor's writes carries Delta's txn app id and version, as the "
                             "flows' writes do; recorded as the scope 'floor, same work, exactly once'")
    parser.add_argument("--query-per-topic", action="store_true",
                        help="the stream with LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC=true: one query per topic "
                             "(streaming/topic_query.py) instead of one per flow")
    parser.add_argument("--seed", type=int, default=harness.SEED)
    harness.recording_options(parser, quick="1000/s, 1 minute, 20 s warm-up")
    args = parser.parse_args(argv)
    if args.floor and args.tables:
        parser.error("--floor measures the barest job, which has no tables to choose: drop --tables")
    if args.hops < 1 or (args.hops > 1 and not args.floor):
        parser.error("--hops N (N at least 1) is the floor's chain of queries: give it with --floor")
    if args.exactly_once and not args.work:
        parser.error("--exactly-once is a variant of the floor's --work: give it with --floor --work")
    if args.work and (not args.floor or args.hops > 1):
        parser.error("--work is a floor of its own (one query doing the three layers' writes): give it with "
                     "--floor and without --hops")
    rates = [int(r) for r in args.rates.split(",") if r.strip()]
    if args.quick:
        rates, args.minutes, args.warm_up = rates[:1] if args.rates != "1000,5000,20000" else [1000], 1.0, 20.0
    record = harness.keeps(args)
    harness.log_warnings()
    from lakehouse.infra.settings import Settings

    defaults = Settings.from_env({})
    scope = ("the floor: " + floor_what(args.hops, args.work, args.exactly_once) if args.floor else
             ("tables " + " ".join(args.tables) + " and what they read") if args.tables else "all flows (the default)")
    scope_key = (("floor, same work" + (", exactly once" if args.exactly_once else "") if args.work
                  else "floor" if args.hops == 1 else f"floor, {args.hops} hops")
                 if args.floor
                 else " ".join(args.tables) or "all")
    if args.query_per_topic and not args.floor:
        os.environ["LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC"] = "true"   # the stream's process inherits it
    per_topic = Settings.from_env().stream_one_query_per_topic and not args.floor
    if per_topic:
        scope += ", one query per topic (LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC)"
        scope_key += ", per topic"
    result: dict[str, Any] = {
        "bench": NAME, "date": harness.utc_now().isoformat(timespec="seconds"), "machine": harness.machine(),
        "command": harness.command_line("bench.freshness", argv), "scope": scope, "tables": args.tables,
        "hops": args.hops, "work": args.work, "exactly_once": args.exactly_once, "one_query_per_topic": per_topic, "minutes": args.minutes, "warm_up_s": args.warm_up, "start_limit_s": args.start_limit,
        # the stream's processes inherit this environment: its LAKEHOUSE_STREAM_TRIGGERS apply to them
        "trigger": defaults.stream_trigger + "".join(f", {name} every {every}" for name, every in
                                                     Settings.from_env().stream_triggers.items()),
        "shuffle_partitions": defaults.spark_shuffle_partitions, "quality": defaults.quality,
        "targets": {"silver_p99_s_at_5000": TARGET_SILVER_P99_S, "gold_p99_s_at_5000": TARGET_GOLD_P99_S,
                    "sustained_silver_p99_s": SUSTAINED_SILVER_P99_S},
        "rates": {},
    }
    for rate in rates:
        result["rates"][str(rate)] = measure_rate(rate, minutes=args.minutes, warm_up_s=args.warm_up,
                                                  tables=args.tables, seed=args.seed, drain_s=args.drain,
                                                  start_limit_s=args.start_limit, floor=args.floor, hops=args.hops,
                                                  work=args.work, exactly_once=args.exactly_once)
        if args.floor:
            floor_verdicts(result["rates"])
            print(floor_summary(result), flush=True)
        else:
            result["verdicts"] = verdicts(result["rates"])
            print(summary(result), flush=True)
    result["load_end"] = harness.load_now()
    if record:
        harness.record(NAME, with_scope(scope_key, result),
                       floor_docs_row(result) if args.floor else docs_row(result))
    else:
        print(json.dumps(result, indent=2, default=str)[:20000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
