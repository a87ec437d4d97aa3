"""Start flows as streaming queries and run them to catch up (availableNow), reporting what they did."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from schemas.tables import TableSpec
from schemas.topics import TopicSpec
from streaming.context import FlowContext
from streaming.flows import Flow
from streaming.kafka_topics import KafkaUnreachable, admin_client
from streaming.gold_batches import GoldBatchStats
from streaming.silver_batches import SilverBatchStats
from streaming.sources import read_delta_stream, read_kafka_stream

log = logging.getLogger(__name__)

# Delta history's metric for rows a commit wrote, per operation.
_WRITTEN = {"STREAMING UPDATE": ("numOutputRows",), "MERGE": ("numTargetRowsInserted", "numTargetRowsUpdated")}


@dataclass
class FlowRun:
    """What one catch-up run of a flow did."""

    flow: str
    table: str
    batches: int = 0
    input_rows: int = 0
    rows_written: int = 0
    delta_version: int | None = None
    kafka_offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # "topic/partition" -> from, to, count
    duration_s: float = 0.0
    waiting_for: tuple[str, ...] = ()        # input tables that do not exist yet: the run did nothing
    silver: SilverBatchStats | None = None   # what a silver flow split off: quarantine, late, duplicates
    gold: GoldBatchStats | None = None       # what a stateful gold flow merged, routed late, keeps in state
    commits: dict[str, str] = field(default_factory=dict)  # Delta version -> what that commit of the run did


class KafkaLost(KafkaUnreachable):
    """The broker went away while a flow was reading from it."""


def start_flow(
    spark: SparkSession, flow: Flow, ctx: FlowContext, *, trigger: dict[str, Any] | None = None,
    writer: Any = None,
) -> StreamingQuery:
    """Start the flow's streaming query; `trigger` defaults to availableNow (catch up, then stop)."""
    inputs = []
    for source in flow.sources:
        if isinstance(source, TopicSpec):
            # Spark's Kafka source retries an absent broker for a long time; say so at once instead.
            admin_client(ctx.kafka_bootstrap)
            inputs.append(read_kafka_stream(spark, source, ctx))
        else:
            inputs.append(read_delta_stream(spark, source, ctx))
    out = flow.apply(*inputs, ctx=ctx)
    path = flow.target.path(ctx.lake_root)
    query_writer = out.writeStream.queryName(flow.name).option("checkpointLocation", flow.checkpoint(ctx))
    query_writer = query_writer.trigger(**(trigger or {"availableNow": True}))
    if flow.output == "batch":
        return query_writer.foreachBatch(writer or flow.batch_writer(ctx)).start()
    if flow.target.partition_by:
        query_writer = query_writer.partitionBy(*flow.target.partition_by)
    # Delta's streaming sink commits (query id, batch id) with each write: a replayed batch is skipped.
    return query_writer.format("delta").outputMode("append").start(path)


def table_version(spark: SparkSession, path: str) -> int | None:
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]


def rows_written_since(spark: SparkSession, path: str, after_version: int | None, query_id: str | None = None) -> int:
    """Rows the commits after `after_version` wrote, from Delta's own history."""
    if not DeltaTable.isDeltaTable(spark, path):
        return 0
    history = DeltaTable.forPath(spark, path).history()
    if after_version is not None:
        history = history.where(history.version > after_version)
    total = 0
    for row in history.select("operation", "operationMetrics", "operationParameters").collect():
        metrics = row["operationMetrics"] or {}
        if query_id and row["operation"] == "STREAMING UPDATE":
            # Several queries may append to one table (quarantine); count only this query's commits.
            if (row["operationParameters"] or {}).get("queryId") != query_id:
                continue
        total += sum(int(metrics.get(name, 0)) for name in _WRITTEN.get(row["operation"], ()))
    return total


_SAID = {
    "CREATE TABLE": "created the table, empty, with its schema (the data follows in the next versions)",
    "WRITE": "appended a micro-batch", "STREAMING UPDATE": "appended a micro-batch",
    "MERGE": "merged a micro-batch", "UPDATE": "updated rows the watermark closed", "DELETE": "deleted rows",
    "OPTIMIZE": "compacted files",
}


def commits_since(spark: SparkSession, path: str, after_version: int | None) -> dict[str, str]:
    """What each commit after `after_version` did, in words: why a first run's data is at version 1, not 0."""
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    history = DeltaTable.forPath(spark, path).history()
    if after_version is not None:
        history = history.where(history.version > after_version)
    said = {}
    for row in history.select("version", "operation", "operationMetrics").orderBy("version").collect():
        metrics = row["operationMetrics"] or {}
        rows = sum(int(metrics.get(n, 0)) for n in ("numOutputRows", "numTargetRowsInserted", "numTargetRowsUpdated")
                   if row["operation"] != "MERGE" or n != "numOutputRows")
        words = _SAID.get(row["operation"], row["operation"].lower())
        said[str(row["version"])] = f"{row['operation']}: {words}" + (f", {rows} rows" if rows else "")
    return said


def _kafka_ranges(progress: list[Any]) -> dict[str, dict[str, int]]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for p in progress:
        for src in p.sources:
            if not src.description.startswith("KafkaV2"):
                continue
            for attr, into in (("startOffset", first), ("endOffset", last)):
                raw = getattr(src, attr)
                offsets = (json.loads(raw) if isinstance(raw, str) and raw else raw) or {}
                for topic, parts in offsets.items():
                    for part, off in parts.items():
                        key = f"{topic}/{part}"
                        if into is first:
                            into.setdefault(key, int(off))
                        else:
                            into[key] = int(off)
    return {
        key: {"from": first.get(key, 0), "to": end, "count": end - first.get(key, 0)}
        for key, end in sorted(last.items())
    }


def run_flow(spark: SparkSession, flow: Flow, ctx: FlowContext) -> FlowRun:
    """Run one flow until it has caught up with its source, then report batches, rows, offsets, version."""
    path = flow.target.path(ctx.lake_root)
    started = time.monotonic()
    missing = tuple(
        t.name for t in (*flow.sources, *flow.lookups)
        if isinstance(t, TableSpec) and not DeltaTable.isDeltaTable(spark, t.path(ctx.lake_root))
    )
    if missing:
        # An upstream table is created by its first row (a topic no one has sent to yet): wait for it.
        log.info("flow %s: %s has no rows yet; nothing to do", flow.name, ", ".join(missing))
        return FlowRun(flow=flow.name, table=flow.target.name, waiting_for=missing,
                       delta_version=table_version(spark, path))
    writer = flow.batch_writer(ctx) if flow.output == "batch" else None
    # A Delta sink's rows are counted from the history after this version; batch writers count their own.
    before = table_version(spark, path)
    query = start_flow(spark, flow, ctx, writer=writer)
    watchdog = BrokerWatchdog(query, ctx.kafka_bootstrap) if isinstance(flow.source, TopicSpec) else None
    try:
        query.awaitTermination()  # raises the query's own error if it failed
    except Exception as exc:
        _raise_if_kafka_lost(flow, ctx, exc)
        raise
    finally:
        if watchdog:
            watchdog.close()
    if watchdog and watchdog.lost:
        raise _lost(flow, ctx)
    progress = query.recentProgress
    run = FlowRun(flow=flow.name, table=flow.target.name)
    run.batches = sum(1 for p in progress if p.numInputRows > 0)
    run.input_rows = sum(int(p.numInputRows) for p in progress)
    run.kafka_offsets = _kafka_ranges(progress)
    run.delta_version = table_version(spark, path)
    run.commits = commits_since(spark, path, before)
    if isinstance(getattr(writer, "stats", None), SilverBatchStats):
        run.silver = writer.stats
        run.rows_written = writer.stats.silver
    elif isinstance(getattr(writer, "stats", None), GoldBatchStats):
        writer.settle(spark)
        run.gold = writer.stats
        run.rows_written = writer.stats.rows_written
    elif writer is not None:
        run.rows_written = writer.stats.rows_written
    else:
        run.rows_written = rows_written_since(spark, path, before, query_id=str(query.id))
    run.duration_s = round(time.monotonic() - started, 2)
    log.info(
        "flow %s: %d input rows, %d written, %s is at version %s (%.1fs)",
        flow.name, run.input_rows, run.rows_written, flow.target.name, run.delta_version, run.duration_s,
    )
    return run


class BrokerWatchdog:
    """Stops a Kafka flow's query when no broker has answered for `grace_s`.

    Spark's Kafka source retries an offset fetch three times, a minute each, and then fails with a
    task error that reads like a disk problem; the user should hear within seconds that the broker is gone.
    """

    def __init__(self, query: StreamingQuery, bootstrap: str, *, grace_s: float = 20.0, every_s: float = 2.0):
        from confluent_kafka.admin import AdminClient

        self.query = query
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.grace_s = grace_s
        self.every_s = every_s
        self.lost = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="broker-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        silent_since: float | None = None
        while not self._done.wait(self.every_s):
            try:
                self.admin.list_topics(timeout=min(5.0, self.grace_s))
                silent_since = None
            except Exception:  # noqa: BLE001 - any client error means the broker did not answer
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= self.grace_s and self.query.isActive:
                    log.warning("no Kafka broker answered for %.0fs; stopping query %s", self.grace_s, self.query.name)
                    self.lost = True
                    self.query.stop()  # ends at a batch boundary: the checkpoint stays consistent
                    return

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


def _lost(flow: Flow, ctx: FlowContext) -> KafkaLost:
    return KafkaLost(
        f"The Kafka broker at {ctx.kafka_bootstrap} stopped answering while flow {flow.name} was reading "
        f"{flow.source.name}; start it again (`lakehouse kafka start`) and rerun: the flow resumes from its "
        "checkpoint, so nothing is lost or read twice."
    )


def _raise_if_kafka_lost(flow: Flow, ctx: FlowContext, exc: Exception) -> None:
    """Turn a Kafka flow's failure into one sentence when the broker is what went away."""
    if not isinstance(flow.source, TopicSpec):
        return
    try:
        admin_client(ctx.kafka_bootstrap, timeout_s=5)
    except KafkaUnreachable:
        raise _lost(flow, ctx) from None
    if "org.apache.kafka.common.errors.TimeoutException" in str(exc):
        raise KafkaLost(
            f"Kafka at {ctx.kafka_bootstrap} did not answer in time while flow {flow.name} was reading "
            f"{flow.source.name}; check the broker (`lakehouse kafka status`) and rerun: the flow resumes from "
            "its checkpoint."
        ) from None
