"""The benches' shared harness: a private broker, preloaded events, alternating rounds, peak memory, records.

- `bench_home(name)`: a temporary state folder and the Settings of a bench (ports 19400/19401 ONLY, jars
  from the project's folder); removed at the end. SIGTERM is turned into an exception while it is open,
  so that the `finally` blocks below stop what they started.
- `private_broker(settings)`: a Kafka broker (KRaft, from the Maven jars) with its state in that folder,
  the topics created from their specs (streaming.kafka_topics.ensure_topics), stopped by its PID in a
  `finally`. Events are preloaded with `send` (streaming.producer.produce, acks=all, idempotent); the
  producing rate is logged, never a figure.
- `order_events` / `shop_events`: the generator the other benches use (streaming.generator.ShopGenerator,
  `lakehouse produce`'s default fault mix), orders only or the shop's mixed topics.
- `alternate(sides, rounds)`: one warm-up run of each side, then `rounds` rounds of one run per side;
  the side that goes first rotates each round (two sides: they swap). Each run is timed (wall clock, or
  the "seconds" a side returns when it times the measured part itself) and its peak memory is read.
- `median_ratio(a, b)`: the median over rounds of a[i] / b[i] (each round's sides ran back to back, so the
  round's ratio cancels most of the machine's drift; the median drops an outlier round).
- `PeakMemory`: the peak resident set size of a process during one run. It resets the kernel's high-water
  mark VmHWM by writing 5 to /proc/<pid>/clear_refs before the run and reads VmHWM after it; where that
  write is refused it samples VmRSS every 0.5 s in a thread instead (a sample can miss a short peak). Its
  `method` says which one was used. A JVM's RSS is mostly its committed heap, which it rarely gives
  back: a side that runs after a hungrier one inherits that footprint, so a run's peak is at least the
  RSS it started with.
- `linear_fit(xs, ys)`: least squares time = intercept + slope x events, with R^2 and residuals.
- `record(name, result, row)`: writes the run's JSON to <home>/bench/results/<name>.json (`results_dir`:
  the project's state folder, Settings.from_env().home, by default <checkout>/.lakehouse, outside git),
  says where, and prints the summary row a maintainer may fold into the bench's row of docs/benchmarks.md
  by hand (no file in git is written); `previous(name)` reads the last run's JSON back (None if there is
  none). `recording_options(parser)` gives a bench its --quick / --record / --no-record, `keeps(args)`
  says whether this run records.

Figures never go into tests; tests/unit/test_bench_harness.py checks only the pure logic here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from bench.compaction import HEADER, ROOT, TABLE_MD, machine
from lakehouse.pipelines import shop

KAFKA_PORT, KAFKA_CONTROLLER_PORT = 19400, 19401   # these benches' ports: tests pick free ones, the default is 9092
EVENTS_PER_SECOND_OF_EVENT_TIME = 20.0             # the generator's clock, as `lakehouse produce`
SEED = 7                                           # lakehouse produce's default seed

__all__ = ["HEADER", "ROOT", "TABLE_MD", "machine", "say", "this_checkout", "bench_home", "private_broker",
           "spark_session", "send", "order_events", "shop_events", "alternate", "median_ratio", "round_order", "linear_fit",
           "PeakMemory", "QueryClock", "record", "previous", "results_dir", "docs_row", "utc_now", "project_context"]


def this_checkout(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this checkout first on PYTHONPATH, for a `lakehouse` process a bench starts.

    The `lakehouse` script of an editable install imports the tree the venv was installed from; a bench
    run from another checkout (a git worktree of the code before a change) must measure its own code.
    """
    paths = [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def free_port() -> int:
    """A loopback port no one listens on now (the system's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def say(message: str) -> None:
    """One progress line with the time, so that a person sees the bench working."""
    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {message}", flush=True)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


# ---------------------------------------------------------------- pure logic (unit-tested)

def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The order of the sides in round `round_index`: rotated by one each round (two sides swap)."""
    names = list(names)
    if not names:
        return []
    k = round_index % len(names)
    return names[k:] + names[:k]


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median over rounds of numerators[i] / denominators[i]."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError(f"need as many numerators as denominators, at least one ({len(numerators)} and "
                         f"{len(denominators)} given)")
    return statistics.median(n / d for n, d in zip(numerators, denominators))


@dataclass(frozen=True)
class Fit:
    """time = intercept + slope x events, by least squares."""

    slope: float            # seconds per event
    intercept: float        # seconds: the fixed cost of a run
    r2: float | None        # None with two points (the line goes through both)
    residuals: tuple[float, ...]

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x

    def as_dict(self) -> dict[str, Any]:
        return {"slope_us_per_event": round(self.slope * 1e6, 3), "intercept_s": round(self.intercept, 3),
                "r2": None if self.r2 is None else round(self.r2, 5),
                "residuals_s": [round(r, 3) for r in self.residuals]}


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """Least-squares line through (x, y); R^2 only from three points on (two points fit exactly)."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError("need as many ys as xs and at least two different xs")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    residuals = tuple(y - (intercept + slope * x) for x, y in zip(xs, ys))
    r2 = None
    if n >= 3:
        syy = sum((y - my) ** 2 for y in ys)
        r2 = 1.0 - sum(r * r for r in residuals) / syy if syy else 1.0
    return Fit(slope, intercept, r2, residuals)


def docs_row(*cells: str) -> str:
    """One summary row for docs/benchmarks.md, as `record` prints it (a '|' inside a cell is escaped, newlines
    become spaces)."""
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ").strip() for c in cells) + " |\n"


# ---------------------------------------------------------------- state folder, broker, Spark

@contextlib.contextmanager
def bench_home(name: str) -> Iterator[Any]:
    """A temporary state folder and its Settings (bench ports, the project's jars); removed at the end.

    The environment's LAKEHOUSE_SPARK_* settings (master, driver memory and JVM options, shuffle
    partitions, extra conf) apply, so a bench can measure the engine as configured; nothing else does.
    """
    from lakehouse.infra.settings import Settings

    home = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    settings = Settings.from_env({
        **{k: v for k, v in os.environ.items() if k.startswith("LAKEHOUSE_SPARK_")},
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
        shutil.rmtree(home, ignore_errors=True)


def drop_lake(spark, folder: Path) -> None:
    """Delete a run's lake, and forget Delta's cached logs of every table (the next read loads a table afresh).

    Delta keeps each table's log and latest snapshot, with its query plans, in a JVM-wide cache for an hour
    after its last use. A bench that runs each catch-up in a fresh lake would keep every run's tables: 84
    runs in one session (2026-11-28) filled a 2g driver's old generation with 839 tables' snapshots, and
    full collections made each run three times slower.
    """
    shutil.rmtree(folder, ignore_errors=True)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@dataclass
class Broker:
    node: Any               # infra.kafka_broker.KafkaNode
    pid: int
    bootstrap: str


@contextlib.contextmanager
def private_broker(settings, *, folder: str = "kafka", topic_specs: Iterable[Any] | None = None) -> Iterator[Broker]:
    """A fresh broker with its state in <home>/<folder>, the topics created from their specs; stopped by PID."""
    from lakehouse.infra.kafka_broker import local_node
    from lakehouse.infra.retention import duration_ms
    from lakehouse.schemas import topics
    from lakehouse.streaming.kafka_topics import ensure_topics

    node = dataclasses.replace(local_node(settings), directory=Path(settings.home) / folder)
    try:
        pid = node.start(settings.jars_dir)
        say(f"Kafka broker pid {pid} on {node.bootstrap}, state in {node.directory}")
        specs = list(topics.ALL if topic_specs is None else topic_specs)
        ensure_topics(node.bootstrap, specs, replication_factor=1,
                      replay_window_ms=duration_ms(settings.replay_window))
        say("topics: " + ", ".join(f"{s.name} ({s.partitions} partitions)" for s in specs))
        yield Broker(node, pid, node.bootstrap)
    finally:
        stopped = node.stop()
        if stopped:
            say(f"stopped the Kafka broker (pid {stopped})")


@contextlib.contextmanager
def spark_session(settings, name: str) -> Iterator[tuple[Any, int | None]]:
    """The Spark session with the project's configuration (infra.spark.get_spark), and its driver JVM's PID."""
    from lakehouse.infra.spark import get_spark

    spark = None
    try:
        spark = get_spark(settings, f"bench-{name}")
        pid = driver_jvm_pid()
        say(f"Spark {spark.version} ({settings.spark_master}, {settings.spark_shuffle_partitions} shuffle partitions), "
            f"driver JVM pid {pid}")
        yield spark, pid
    finally:
        if spark is not None:
            spark.stop()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def driver_jvm_pid() -> int | None:
    """The Spark driver JVM pyspark launched: the java process below this one running SparkSubmit (None if not found).

    The bench's broker is a java child of this process too; it runs kafka.Kafka, not SparkSubmit.
    """
    from lakehouse.infra.kafka_broker import process_args

    kids = _children()
    todo = list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop(0)
        try:
            is_java = Path(f"/proc/{pid}/comm").read_text().strip() == "java"
        except OSError:
            continue
        if is_java and "org.apache.spark.deploy.SparkSubmit" in process_args(pid):
            return pid
        todo.extend(kids.get(pid, []))
    return None


def project_context(settings, lake_root: str):
    """The FlowContext `lakehouse run` builds (orchestration.resources: quality gate on by default) for a lake."""
    from lakehouse.orchestration.resources import build_resources

    resources = build_resources(dataclasses.replace(settings, lake_root=lake_root))
    return resources["lake"].flow_context(resources["kafka"])


class QueryClock:
    """How long each streaming query spent in its micro-batches (Spark's triggerExecution), by a query listener.

    A run's time minus its queries' batch time is what it spends outside them: starting and stopping
    queries, checkpoint and Delta-history reads, the runner's own bookkeeping. Listener events arrive
    asynchronously; `since` waits (at most `wait_s`) until the queries it reports have terminated.
    """

    def __init__(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        clock = self
        self.queries: dict[str, dict[str, Any]] = {}      # query id -> name, order, batch ms, batches, done
        self._lock = threading.Lock()

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                with clock._lock:
                    clock.queries[str(event.id)] = {"name": event.name, "order": len(clock.queries),
                                                    "trigger_ms": 0, "batches": 0, "done": False}

            def onQueryProgress(self, event):
                progress = event.progress
                with clock._lock:
                    query = clock.queries.setdefault(str(progress.id), {
                        "name": progress.name, "order": len(clock.queries), "trigger_ms": 0, "batches": 0,
                        "done": False})
                    query["trigger_ms"] += int((progress.durationMs or {}).get("triggerExecution", 0))
                    query["batches"] += 1

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                with clock._lock:
                    if str(event.id) in clock.queries:
                        clock.queries[str(event.id)]["done"] = True

        self.listener = Listener()
        spark.streams.addListener(self.listener)

    def mark(self) -> int:
        with self._lock:
            return len(self.queries)

    def since(self, mark: int, *, wait_s: float = 5.0) -> dict[str, float]:
        """Seconds in micro-batches per query name, for the queries started after `mark`."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                found = [q for q in self.queries.values() if q["order"] >= mark]
                if all(q["done"] for q in found) or time.monotonic() > deadline:
                    out: dict[str, float] = {}
                    for q in found:
                        out[q["name"]] = out.get(q["name"], 0.0) + q["trigger_ms"] / 1000
                    return out
            time.sleep(0.05)

    def close(self, spark) -> None:
        with contextlib.suppress(Exception):
            spark.streams.removeListener(self.listener)


# ---------------------------------------------------------------- events

def start_for(events: int, *, now: datetime | None = None) -> datetime:
    """A generator start such that `events` events end ten minutes before now (nothing is ahead of the broker)."""
    now = now or utc_now()
    span = timedelta(seconds=events / EVENTS_PER_SECOND_OF_EVENT_TIME)
    return (now - span - timedelta(minutes=10)).replace(second=0, microsecond=0)


def shop_events(total: int, *, seed: int = SEED) -> Iterator[Any]:
    """The shop's mixed events (every topic), `lakehouse produce`'s fault mix; the first `total` end before now."""
    from lakehouse.pipelines.shop.generator import Mix, ShopGenerator

    return iter(ShopGenerator(seed=seed, start=start_for(total), events_per_second=EVENTS_PER_SECOND_OF_EVENT_TIME,
                              mix=Mix()))


def order_events(total: int, *, seed: int = SEED) -> Iterator[Any]:
    """Only the generator's shop.orders.v1 records (valid, duplicates and malformed ones, in its mix)."""
    from lakehouse.schemas import topics

    name = shop.ORDERS.topic_spec.name
    # About one record in six is an order: the clock covers six times as many ticks.
    return (r for r in shop_events(total * 6, seed=seed) if r.topic == name)


def send(records: Iterator[Any], count: int, bootstrap: str) -> Any:
    """Send the next `count` records and wait for every acknowledgement; raises if any failed."""
    from itertools import islice

    from lakehouse.streaming.producer import produce

    def progress(report) -> None:
        say(f"  sent {report.sent:,} of {count:,}")

    report = produce(islice(records, count), bootstrap=bootstrap, progress=progress, progress_every_s=15.0)
    if report.failed or report.delivered != count:
        raise RuntimeError(f"sent {count} events, {report.delivered} acknowledged, {report.failed} failed: "
                           f"{'; '.join(report.errors[:3])}")
    report.deliveries.clear()       # one Delivery per record: memory a large preload does not need
    say(f"preloaded {report.delivered:,} events in {report.duration_s:.0f} s (not a figure): "
        + ", ".join(f"{t} {n:,}" for t, n in sorted(report.by_topic.items())))
    return report


# ---------------------------------------------------------------- memory

def _status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakMemory:
    """Peak RSS of one process during a run: VmHWM reset per run, or VmRSS sampled every 0.5 s."""

    VMHWM = "VmHWM of /proc/<pid>/status, reset before each run (echo 5 > /proc/<pid>/clear_refs)"
    SAMPLED = "VmRSS sampled every 0.5 s during each run (VmHWM could not be reset here)"

    def __init__(self, name: str, pid: int | None, *, every_s: float = 0.5):
        self.name, self.pid, self.every_s = name, pid, every_s
        self.method: str | None = None
        self._peak_kb = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.pid is None:
            return
        if self.method != self.SAMPLED:
            try:
                Path(f"/proc/{self.pid}/clear_refs").write_text("5")
                self.method = self.VMHWM
                return
            except OSError:
                self.method = self.SAMPLED
        self._peak_kb = _status_kb(self.pid, "VmRSS") or 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name=f"rss-{self.name}", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self._peak_kb = max(self._peak_kb, _status_kb(self.pid, "VmRSS") or 0)

    def stop(self) -> int | None:
        """The peak in bytes since start() (None without a process)."""
        if self.pid is None:
            return None
        if self.method == self.VMHWM:
            kb = _status_kb(self.pid, "VmHWM")
            return None if kb is None else kb * 1024
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._peak_kb = max(self._peak_kb, _status_kb(self.pid, "VmRSS") or 0)
        return self._peak_kb * 1024


def mib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)


# ---------------------------------------------------------------- alternating runs

Side = Callable[[str], Mapping[str, Any] | None]


def run_once(side: Side, label: str, probes: Sequence[PeakMemory] = ()) -> dict[str, Any]:
    """One timed run of a side; its peak memory per probe (MiB); what the side returned besides."""
    for probe in probes:
        probe.start()
    began = time.perf_counter()
    try:
        extra = dict(side(label) or {})
    finally:
        wall = time.perf_counter() - began
        peaks = {probe.name: mib(probe.stop()) for probe in probes}
    seconds = float(extra.pop("seconds", wall))
    return {"seconds": seconds, "wall_s": wall, "peak_rss_mib": {**peaks, **extra.pop("peak_rss_mib", {})}, **extra}


def alternate(sides: Mapping[str, Side], rounds: int, *, probes: Sequence[PeakMemory] = (),
              warm_up: bool = True, describe: Callable[[str, dict], str] | None = None) -> dict[str, list[dict]]:
    """One warm-up run of each side (not kept), then `rounds` rounds of one run per side, first side rotating.

    Returns each side's timed runs in round order. A side is called with a label unique to the run
    (for its folders) and may return a dict: "seconds" replaces the wall clock, the rest is kept.
    """
    def show(name: str, label: str, run: dict) -> None:
        more = describe(name, run) if describe else ""
        memory = ", ".join(f"{k} {v:.0f} MiB" for k, v in run["peak_rss_mib"].items() if v is not None)
        say(f"  {label}: {run['seconds']:.2f} s{more}" + (f" (peak RSS {memory})" if memory else ""))

    names = list(sides)
    if warm_up:
        say("warm-up: one run of each side (" + ", ".join(names) + "), not counted")
        for name in names:
            show(name, f"warm-up {name}", run_once(sides[name], f"warm-up-{name}", probes))
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        order = round_order(names, r)
        say(f"round {r + 1} of {rounds}: " + " -> ".join(order))
        for name in order:
            run = run_once(sides[name], f"round{r + 1}-{name}", probes)
            run["round"], run["position"] = r + 1, order.index(name) + 1
            runs[name].append(run)
            show(name, name, run)
    return runs


def rounded(runs: Sequence[dict]) -> list[dict]:
    """The runs for the JSON, seconds to the millisecond."""
    out = []
    for run in runs:
        out.append({k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()})
    return out


# ---------------------------------------------------------------- records

def results_dir() -> Path:
    """Where bench runs keep their JSON: <home>/bench/results, in the project's state folder (LAKEHOUSE_HOME, by
    default <checkout>/.lakehouse), which git ignores. Not the bench's own temporary home: that is removed."""
    from lakehouse.infra.settings import Settings

    return Path(Settings.from_env().home) / "bench" / "results"


def previous(name: str) -> dict[str, Any] | None:
    """The JSON the last recorded run of bench `name` wrote on this machine; None if there is none (or it is not JSON)."""
    try:
        found = json.loads((results_dir() / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def record(name: str, result: Mapping[str, Any], row: str) -> Path:
    """Write <home>/bench/results/<name>.json (replacing the last run's), say where, and print the summary row.

    Nothing in git is written: docs/benchmarks.md keeps one current figure per bench, and the maintainer
    updates the bench's row there by hand from the printed figures (git log keeps the earlier ones).
    """
    path = results_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {path}")
    print(f"\nThe run's summary row; update the bench's row in {TABLE_MD.relative_to(ROOT)} from it by hand:\n"
          + HEADER + row, end="" if row.endswith("\n") else "\n", flush=True)
    return path


def publish(name: str, result: Mapping[str, Any], text: str, row: Callable[[Mapping[str, Any]], str], keep: bool) -> None:
    """Print a bench's summary; then record it (`keep`) or print its JSON instead."""
    print("\n" + text, flush=True)
    if keep:
        record(name, result, row(result))
    else:
        print(json.dumps(result, indent=2))


def met(ok: bool) -> str:
    return "met" if ok else "missed"


def load_now() -> float:
    return round(os.getloadavg()[0], 1)


def recording_options(parser: argparse.ArgumentParser, quick: str | None = None) -> None:
    """Add --no-record, and with `quick` (what a smoke run does) --quick and --record: a smoke run records only if asked."""
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}; records nothing unless --record")
        parser.add_argument("--record", action="store_true", help="with --quick: write the JSON anyway")
    parser.add_argument("--no-record", action="store_true",
                        help="print only; do not write the JSON (<home>/bench/results/NAME.json)")


def keeps(args: argparse.Namespace) -> bool:
    """Whether this run writes its JSON: not with --no-record, and a --quick run only with --record."""
    return not args.no_record and (getattr(args, "record", False) or not getattr(args, "quick", False))


def log_warnings() -> None:
    """A bench's log: warnings and errors only, with their time (its own progress goes through `say`)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How the bench was started, for the record (argv None: this process's own arguments)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python -m", module, *args])
