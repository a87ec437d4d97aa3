"""Continuous mode: the flows as long-running queries in one Spark session, restarted on failure, stopped cleanly."""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext, duration_micros
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.health import latest_version
from lakehouse.streaming.kafka_topics import KafkaUnreachable
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.topic_query import TopicGroup, start_topic_query, topic_groups
from lakehouse.streaming.progress import ProgressRecorder
from lakehouse.streaming.fingerprints import DefinitionChanged
from lakehouse.streaming.trigger_sizing import Query
from lakehouse.streaming.runner import (
    BrokerWatchdog, FlowRun, KafkaLost, QualityStopped, _raise_if_kafka_lost, _raise_if_quality_breach, first_line,
    start_flow,
)

log = logging.getLogger(__name__)


class StreamFailed(RuntimeError):
    """A flow kept failing after its restarts; the message is the last failure's sentence."""


class UnknownTable(ValueError):
    """`lakehouse stream` was given a table no flow writes."""


def query_count(flows: Iterable[Flow], one_query_per_topic: bool) -> int:
    """How many queries `lakehouse stream` runs for `flows`: one per flow, less what each topic query takes in."""
    return len(stream_queries(flows, one_query_per_topic))


def stream_queries(flows: Iterable[Flow], one_query_per_topic: bool,
                   triggers: Mapping[str, str] | None = None) -> list[Query]:
    """The queries `lakehouse stream` runs for `flows`, for sizing their triggers (streaming/trigger_sizing.py).

    A topic query takes its silver flow's trigger and writes its bronze, silver and members each batch;
    `triggers` are the ones the user set, by layer or flow name (a flow's own wins).
    """
    flows = list(flows)
    triggers = triggers or {}
    groups = topic_groups(flows) if one_query_per_topic else {}
    carried = {f.name for g in groups.values() for f in (g.bronze, *g.members)}
    queries = []
    for flow in flows:
        if flow.name in carried:
            continue
        pinned = triggers.get(flow.name) or triggers.get(flow.target.layer)
        group = groups.get(flow.name)
        queries.append(Query(flow.target.layer, 1 if group is None else 2 + len(group.members),
                             duration_micros(pinned) / 1e6 if pinned else None))
    return queries


def flows_for(flows: Iterable[Flow], names: Iterable[str]) -> list[Flow]:
    """The flows that write the named tables and every flow they need, in dependency order (all when none named)."""
    flows = list(flows)
    names = list(names)
    if not names:
        return flows
    writers = {f.target.name: f for f in flows}
    unknown = [n for n in names if n not in writers]
    if unknown:
        raise UnknownTable(f"No flow writes {', '.join(unknown)}; tables that stream: {', '.join(writers)}.")
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        flow = writers[todo.pop()]
        if flow.name in wanted:
            continue
        wanted.add(flow.name)
        todo.extend(s.name for s in (*flow.sources, *flow.lookups) if isinstance(s, TableSpec) and s.name in writers)
    return [f for f in flows if f.name in wanted]


@dataclass
class TableReport:
    """What a streamed table did since the last report: sent to Dagster and to the log."""

    table: str
    flow: str
    batches: int = 0                   # micro-batches that read rows
    input_rows: int = 0                # rows its source gave (Spark's count: a batch read twice counts twice)
    rows_written: int = 0              # rows it wrote to its table (silver: valid rows; gold: inserted or updated)
    quarantined: int = 0               # silver: rows it sent to quarantine
    late: int = 0                      # rows it sent to late arrivals (behind its watermark)
    total_rows: int = 0                # rows written since the stream started
    last_batch_id: int | None = None
    last_batch_ms: int | None = None
    rows_per_s: float = 0.0            # processed rows per second in its newest batch with rows
    lag_records: int | None = None     # Kafka records behind the newest offset (flows that read a topic)
    delta_version: int | None = None
    kafka_end_offsets: dict[str, int] = field(default_factory=dict)
    watermark: str | None = None


@dataclass
class _Running:
    flow: Flow
    query: StreamingQuery | None = None
    writer: Any = None                 # the (batch_df, batch_id) writer of a flow whose output is "batch"
    written: tuple[int, int, int] = (0, 0, 0)  # rows written, quarantined and late of earlier writers of this flow
    reported: tuple[int, int, int] = (0, 0, 0) # what the last report counted
    watchdog: BrokerWatchdog | None = None
    failures: int = 0                  # in a row, without a batch in between
    retry_at: float = 0.0
    last_error: str = ""
    group: TopicGroup | None = None    # a topic query: the flows this silver flow's query also runs
    carried_by: str | None = None      # a topic query's member: the silver flow whose query runs this flow
    members: list[str] = field(default_factory=list)   # a topic query: its members that it runs now


class Supervisor:
    """Runs flows as continuous queries with a processing-time trigger until told to stop.

    - A flow whose input table does not exist yet starts when it appears (silver after bronze's first batch).
    - A query that fails is restarted after a backoff (2 s, doubling up to a minute), its failure logged
      in one sentence; after `max_failures` failures in a row without a batch in between, every query
      is stopped and `run` raises StreamFailed with that sentence.
    - `stop` lets each query finish the micro-batch it is in, then stops it: offsets and commits stay
      consistent, and the writers' idempotent commits make a replayed batch harmless after a kill.
    - With `one_query_per_topic`, each topic's bronze and silver flows and the flows that read only its
      silver run as one query (streaming/topic_query.py), which reports as each of them. A member whose
      batch fails fails the query; if its catch-up at the restart fails too, it runs as its own query.
    """

    def __init__(self, spark: SparkSession, flows: Iterable[Flow], ctx: FlowContext, *, trigger: str = "1 second",
                 triggers: Mapping[str, str] | None = None, report: Callable[[list[TableReport]], None] | None = None,
                 report_every_s: float = 5.0,
                 metrics_every_s: float = 10.0, max_failures: int = 5, backoff_s: float = 2.0,
                 backoff_max_s: float = 60.0, record_metrics: bool = True, one_query_per_topic: bool = False,
                 catch_up_parallel: int = 3):
        self.spark = spark
        self.ctx = ctx
        self.trigger = trigger
        self.triggers = dict(triggers or {})   # per layer or flow name; a flow's own entry wins
        self.report = report
        self.report_every_s = report_every_s
        self.metrics_every_s = metrics_every_s
        self.max_failures = max_failures
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.running = {f.name: _Running(f) for f in flows}
        if one_query_per_topic:
            # Each topic's flows as one query (streaming/topic_query.py); its members wait for it to start.
            for silver, group in topic_groups(list(flows)).items():
                self.running[silver].group = group
                for flow in (group.bronze, *group.members):
                    self.running[flow.name].carried_by = silver
        self.catch_up_parallel = catch_up_parallel
        self._caught_up: dict[str, FlowRun] = {}   # the start's catch-up of the topic queries' flows, used once
        self.reports: dict[str, TableReport] = {}
        self.totals: dict[str, int] = {}        # rows written per flow since the stream started
        self._lock = threading.Lock()
        self.recorder = ProgressRecorder(ctx.lake_root, mode="continuous", on_progress=self._progress,
                                         keep=record_metrics, flows_of=self.flows_of)

    def plan(self) -> str:
        """How the flows are grouped into queries, in one sentence for the start-up log."""
        queries = [e for e in self.running.values() if e.carried_by is None or e.group is not None]
        said = []
        for entry in queries:
            if entry.group is not None:
                names = [f.name for f in (entry.group.bronze, entry.flow, *entry.group.members)]
                said.append(f"{entry.group.bronze.source.name} ({', '.join(names)})")
            else:
                said.append(entry.flow.name)
        return (f"{len(self.running)} flows as {len(queries)} queries, each a micro-batch every "
                f"{self.trigger}{' unless its layer or flow sets another' if self.triggers else ''}: "
                + "; ".join(said))

    def flows_of(self, row: dict[str, Any]) -> list[str]:
        """The flows the query of a progress row runs: a topic's query runs its bronze flow and members too.

        The catch-ups before a topic's query starts are queries of the flows' own names: each is just its flow.
        """
        entry = self.running.get(row["query"])
        query = entry.query if entry is not None else None
        if entry is None or entry.group is None or query is None or str(query.runId) != row["run_id"]:
            return [row["query"]]
        return [entry.group.bronze.name, row["query"], *entry.members]

    # -- progress, on Spark's listener thread
    def _progress(self, row: dict[str, Any]) -> None:
        entry = self.running.get(row["query"])
        if entry is None:
            return
        # A topic query's batch is also its bronze flow's and its members'.
        flows = [self.running[name].flow for name in self.flows_of(row) if name in self.running]
        with self._lock:
            for flow in flows:
                rep = self.reports.setdefault(flow.name, TableReport(flow.target.name, flow.name))
                if row["input_rows"]:
                    rep.batches += 1
                    rep.input_rows += row["input_rows"]
                    rep.last_batch_id = row["batch_id"]
                    rep.last_batch_ms = row["batch_ms"]
                    rep.rows_per_s = row["processed_rows_per_s"]
                    rep.kafka_end_offsets.update(row["kafka_end_offsets"])
                if row["lag_records"] is not None:
                    rep.lag_records = row["lag_records"]
                rep.watermark = row["watermark"] or rep.watermark
            entry.failures = 0       # a batch ran: the flow is healthy again

    # -- the loop
    # Every py4j proxy a micro-batch calls a method on sits in a reference cycle with its cached methods, so the
    # JVM keeps the plan, broadcasts and cached blocks behind it until Python's cyclic collector runs, which in
    # a process this size is rare. Collected every 10 s in a fused stream (2026-12-01): the live long arrays
    # 716 -> 89 MB after three 15,000-event bursts, full collections 23 (13.5 s) -> 16 (7.0 s), for about 0.3 s
    # of Python per collection.
    COLLECT_EVERY_S = 30.0

    def run(self, stop: threading.Event) -> None:
        """Start the flows and keep them running until `stop` is set; raises StreamFailed if one keeps failing."""
        log.info("%s", self.plan())
        self.spark.streams.addListener(self.recorder)
        self._catch_up_topic_flows()
        next_report = time.monotonic() + self.report_every_s
        next_flush = time.monotonic() + self.metrics_every_s
        next_collect = time.monotonic() + self.COLLECT_EVERY_S
        try:
            while not stop.is_set():
                for entry in self.running.values():
                    self._tend(entry)
                now = time.monotonic()
                if now >= next_report:
                    self._send_reports()
                    next_report = now + self.report_every_s
                if now >= next_flush:
                    self.recorder.flush(self.spark)
                    next_flush = now + self.metrics_every_s
                if now >= next_collect:
                    gc.collect()
                    next_collect = now + self.COLLECT_EVERY_S
                stop.wait(0.5)
        finally:
            self.stop_all()
            self.recorder.flush(self.spark)
            self._send_reports()
            self.spark.streams.removeListener(self.recorder)

    def _tend(self, entry: _Running) -> None:
        if entry.carried_by is not None:
            return
        query = entry.query
        if query is not None and query.isActive:
            return
        if query is not None:
            self._failed(entry, self._sentence(entry, query))
            return
        if time.monotonic() < entry.retry_at or (entry.group is None and self._waiting(entry.flow)):
            return
        trigger = {"processingTime": self.trigger_of(entry.flow)}
        try:
            if entry.group is not None:
                self._start_topic_query(entry, trigger)
            else:
                writer = entry.flow.batch_writer(self.ctx) if entry.flow.output == "batch" else None
                entry.query = start_flow(self.spark, entry.flow, self.ctx, trigger=trigger, writer=writer)
                entry.writer = writer
        except KafkaUnreachable as exc:
            self._failed(entry, str(exc))
            return
        except DefinitionChanged as exc:
            # Not retried, and not a reason to stop the others: this table waits for `lakehouse refresh`.
            entry.last_error, entry.retry_at = str(exc), float("inf")
            log.warning("flow %s is not streaming: %s", entry.flow.name, exc)
            return
        except Exception as exc:  # noqa: BLE001 - any start failure is retried like a query failure
            self._failed(entry, f"flow {entry.flow.name} could not start: {first_line(exc)}")
            return
        if isinstance(entry.flow.source, TopicSpec) or entry.group is not None:
            entry.watchdog = BrokerWatchdog(entry.query, self.ctx.kafka_bootstrap)
        together = [entry.flow] if entry.group is None else [
            entry.group.bronze, entry.flow, *(self.running[m].flow for m in entry.members)]
        for flow in together:
            others = [f.name for f in together if f is not flow]
            log.info("flow %s is streaming into %s (trigger every %s)%s%s", flow.name, flow.target.name,
                     self.trigger_of(entry.flow), f" in one query with {', '.join(others)}" if others else "",
                     f", after {entry.failures} failure(s)" if entry.failures else "")

    def _catch_up_topic_flows(self) -> None:
        """Catch up every flow the topic queries will run, several at once, before any query starts.

        Each topic query hands over from its flows' own queries; done one topic at a time while the
        queries started before it run, these catch-ups took a minute or more on two cores. A flow whose
        catch-up fails is caught up again by its topic query's start, which decides what to do about it.
        """
        carried = [e.flow for e in self.running.values() if e.carried_by is not None or e.group is not None]
        if not carried:
            return
        log.info("catching up the %d flows the topic queries will run, %d at once", len(carried),
                 self.catch_up_parallel)
        for outcome in run_flows(self.spark, carried, self.ctx, parallel=self.catch_up_parallel):
            if outcome.error is None and isinstance(outcome.run, FlowRun):
                self._caught_up[outcome.flow.name] = outcome.run

    def _start_topic_query(self, entry: _Running, trigger: dict[str, str]) -> None:
        """Start a topic's query over the members still carried by it; those it leaves out start on their own."""
        group = entry.group
        carried = tuple(f for f in group.members if self.running[f.name].carried_by == entry.flow.name)
        names = {f.name for f in (group.bronze, group.silver, *carried)}
        caught_up = {name: self._caught_up.pop(name) for name in names if name in self._caught_up}
        started = start_topic_query(self.spark, TopicGroup(group.bronze, group.silver, carried), self.ctx,
                                    trigger=trigger, caught_up=caught_up)
        entry.query, entry.writer = started.query, started.writer
        entry.members = list(started.writer.members)
        for name, run in started.caught_up.items():   # the catch-ups' rows count as the stream's
            done = self.running[name]
            quarantined, late = (run.silver.quarantined, run.silver.late) if run.silver is not None else (0, 0)
            done.written = (done.written[0] + run.rows_written, done.written[1] + quarantined, done.written[2] + late)
        for name in entry.members:
            self.running[name].writer = started.writer.members[name].writer
        for name, why in started.left_out.items():
            log.warning("flow %s runs as its own query, not in the query of %s: %s", name, group.bronze.source.name,
                        why)
            self.running[name].carried_by = None
            self.running[name].last_error = why

    def trigger_of(self, flow: Flow) -> str:
        """The flow's processing-time trigger: its own, else its layer's, else the stream's."""
        return self.triggers.get(flow.name) or self.triggers.get(flow.target.layer) or self.trigger

    def _waiting(self, flow: Flow) -> bool:
        """An input table is created by its first batch upstream; until then the flow waits."""
        return any(isinstance(t, TableSpec) and latest_version(self.ctx.input_path(t)) is None
                   for t in (*flow.sources, *flow.lookups))

    def _sentence(self, entry: _Running, query: StreamingQuery) -> str:
        reader = entry.group.bronze if entry.group is not None else entry.flow   # the flow that reads Kafka, if one does
        if entry.watchdog is not None:
            entry.watchdog.close()
            lost = entry.watchdog.lost
            entry.watchdog = None
            if lost:
                return (f"The Kafka broker at {self.ctx.kafka_bootstrap} stopped answering while flow "
                        f"{entry.flow.name} was reading {reader.source.name}")
        exc = query.exception()
        if exc is None:
            return f"flow {entry.flow.name} stopped without an error"
        try:
            _raise_if_quality_breach(exc)
            _raise_if_kafka_lost(reader, self.ctx, exc)
        except (QualityStopped, KafkaLost) as said:
            return str(said)
        return f"flow {entry.flow.name} failed: {first_line(exc)}"

    def _failed(self, entry: _Running, sentence: str) -> None:
        self._ended(entry)
        entry.failures += 1
        entry.last_error = sentence
        if entry.failures > self.max_failures:
            raise StreamFailed(f"{sentence} ({entry.failures} failures in a row; stopped every flow).")
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (entry.failures - 1))
        entry.retry_at = time.monotonic() + delay
        log.warning("%s; restarting it in %.0f s (failure %d of %d allowed)", sentence, delay, entry.failures,
                    self.max_failures)

    def _ended(self, entry: _Running) -> None:
        """A query is gone: keep what its writers counted; its members wait for it to start again."""
        for name in entry.members:
            member = self.running[name]
            member.written, member.writer = _counts(member), None
        entry.members = []
        entry.written = _counts(entry)
        entry.query, entry.writer = None, None

    def _send_reports(self) -> None:
        with self._lock:
            reports = [r for r in self.reports.values()]
            self.reports = {name: TableReport(r.table, r.flow, lag_records=r.lag_records, watermark=r.watermark)
                            for name, r in self.reports.items()}
        for rep in reports:
            entry = self.running[rep.flow]
            rep.delta_version = latest_version(entry.flow.target.path(self.ctx.lake_root))
            if entry.flow.output == "batch":
                now = _counts(entry)
                rep.rows_written, rep.quarantined, rep.late = (n - r for n, r in zip(now, entry.reported))
                entry.reported = now
            else:
                rep.rows_written = rep.input_rows     # Delta's sink appends every row it reads
            rep.total_rows = self.totals.get(rep.flow, 0) + rep.rows_written
            self.totals[rep.flow] = rep.total_rows
        if reports and self.report is not None:
            try:
                self.report(reports)
            except Exception:  # noqa: BLE001 - a report that cannot be delivered must not stop the stream
                log.warning("could not report the streams' progress", exc_info=True)

    def stop_all(self, grace_s: float = 60.0) -> None:
        """Let each query finish the micro-batch it is in, then stop it; all at once, each on its own thread.

        Past `grace_s` a query still in a batch is stopped mid-batch: that batch is not committed, and
        runs again on restart with the same offsets (the writers' commits are idempotent).
        """
        deadline = time.monotonic() + grace_s

        def stop(entry: _Running) -> None:
            query = entry.query
            if query is None:
                return
            try:
                while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                    time.sleep(0.05)
                query.stop()
            except Exception:  # noqa: BLE001 - stopping must reach every query
                log.debug("stopping %s", entry.flow.name, exc_info=True)
            finally:
                if entry.watchdog is not None:
                    entry.watchdog.close()
                    entry.watchdog = None
                self._ended(entry)

        # A batch interrupted at the deadline raises inside its foreachBatch function, and py4j logs the
        # whole Python trace of it; that batch simply runs again after a restart.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        threads = [threading.Thread(target=stop, args=(e,), name=f"stop-{e.flow.name}", daemon=True)
                   for e in self.running.values() if e.query is not None]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(1.0, deadline - time.monotonic() + 30))

    def active(self) -> list[str]:
        def running(e: _Running) -> bool:
            e = self.running[e.carried_by] if e.carried_by else e
            return e.query is not None and e.query.isActive

        return [name for name, e in self.running.items() if running(e)]


def _counts(entry: _Running) -> tuple[int, int, int]:
    """Rows written, quarantined and sent to late arrivals so far by this flow's writers, the current one included."""
    stats = getattr(entry.writer, "stats", None)
    if stats is None:
        return entry.written
    written = stats.silver if hasattr(stats, "silver") else int(getattr(stats, "rows_written", 0))
    return (entry.written[0] + written, entry.written[1] + int(getattr(stats, "quarantined", 0)),
            entry.written[2] + int(getattr(stats, "late", 0)))
