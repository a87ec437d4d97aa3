"""Start flows as streaming queries and run them to catch up (availableNow), reporting what they did."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import Commit, commits_after, table_version
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.kafka_topics import KafkaUnreachable, admin_client
from lakehouse.streaming.lake_files import children, has_delta_log
from lakehouse.streaming.gold_batches import GoldBatchStats
from lakehouse.streaming.positions import (
    Recorded, StreamBinding, bronze_positions, commit_metadata, describe, inspect_checkpoint, is_exact_version,
    kafka_starting_offsets, move_aside, rebuild_checkpoint, resume_point, table_id,
)
from lakehouse.streaming.shared_tables import ensure_shared_tables
from lakehouse.streaming.progress import progress_row
from lakehouse.streaming.silver_batches import SilverBatchStats
from lakehouse.streaming.fingerprints import DefinitionChanged, check_definition
from lakehouse.streaming.sources import read_delta_stream, read_kafka_stream, stream_path

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class FlowRun:
    """What one catch-up run of a flow did."""

    flow: str
    table: str
    batches: int = 0
    input_rows: int = 0
    rows_written: int = 0
    delta_version: int | None = None
    version_before: int | None = None        # the table's version when the run started (None: no table yet)
    kafka_offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # "topic/partition" -> from, to, count
    duration_s: float = 0.0
    waiting_for: tuple[str, ...] = ()        # input tables that do not exist yet: the run did nothing
    silver: SilverBatchStats | None = None   # what a silver flow split off: quarantine, late, duplicates
    gold: GoldBatchStats | None = None       # what a stateful gold flow merged, routed late, keeps in state
    commits: dict[str, str] = field(default_factory=dict)  # Delta version -> what that commit of the run did
    progress: list[dict[str, Any]] = field(default_factory=list)   # its micro-batches as stream_progress rows


class KafkaLost(KafkaUnreachable):
    """The broker went away while a flow was reading from it."""


def start_flow(
    spark: SparkSession, flow: Flow, ctx: FlowContext, *, trigger: dict[str, Any] | None = None,
    writer: Any = None,
) -> StreamingQuery:
    """Start the flow's streaming query; `trigger` defaults to availableNow (catch up, then stop).

    A checkpoint that is missing or corrupt while the flow's tables record where it stood is
    recovered first (`prepare_checkpoint`): the query resumes from those positions.
    """
    check_definition(spark, flow, ctx)   # a changed definition never meets its old checkpoint unannounced
    ensure_shared_tables(spark, ctx.lake_root)   # flows running at once never race to create them
    if flow.output == "batch":
        writer = writer or flow.batch_writer(ctx)
    resume = prepare_checkpoint(spark, flow, ctx, writer=writer)
    inputs = []
    for source in flow.sources:
        if isinstance(source, TopicSpec):
            # Spark's Kafka source retries an absent broker for a long time; say so at once instead.
            admin_client(ctx.kafka_bootstrap)
            inputs.append(read_kafka_stream(spark, source, ctx, starting_offsets=resume.kafka.get(source.name)))
        else:
            inputs.append(read_delta_stream(spark, source, ctx, starting_version=resume.versions.get(source.name)))
    out = flow.apply(*inputs, ctx=ctx)
    path = flow.target.path(ctx.lake_root)
    checkpoint = flow.checkpoint(ctx)
    query_writer = out.writeStream.queryName(flow.name).option("checkpointLocation", checkpoint)
    query_writer = query_writer.trigger(**(trigger or {"availableNow": True}))
    if flow.output == "batch":
        # The writer records with each commit where the batch's sources stood, and writes with txn app
        # ids that carry the id of the query that first ran the batch (streaming/positions.py).
        writer.bind_stream(StreamBinding(
            flow=flow.name, app=flow.app_id, checkpoint=checkpoint,
            sources={s.name: "" if isinstance(s, TopicSpec) else stream_path(s, ctx) for s in flow.sources},
            starting=resume.starting,
        ))
        return in_flow_pool(spark, flow, lambda: query_writer.foreachBatch(writer).start())
    if flow.target.partition_by:
        query_writer = query_writer.partitionBy(*flow.target.partition_by)
    # Delta's streaming sink commits (query id, batch id) with each write: a replayed batch is skipped.
    # Its rows carry their Kafka coordinates, which are its positions (bronze_positions); the commits name the flow.
    query_writer = query_writer.option("userMetadata", commit_metadata(flow.name, None, None))
    return in_flow_pool(spark, flow, lambda: query_writer.format("delta").outputMode("append").start(path))


def in_flow_pool(spark: SparkSession, flow: Flow, start: Callable[[], T]) -> T:
    """Call `start` with the jobs it starts in a fair-scheduler pool named after the flow.

    Several queries share the session (a stream runs every flow, a catch-up several at once, the batch
    lane several recomputations); with spark.scheduler.mode=FAIR (infra/spark.py) each pool gets its share
    of the cores, so a small flow's jobs are not queued behind a big flow's. A query's thread inherits the
    property when it starts.
    """
    sc = spark.sparkContext
    before = sc.getLocalProperty("spark.scheduler.pool")
    sc.setLocalProperty("spark.scheduler.pool", flow.name)
    try:
        return start()
    finally:
        sc.setLocalProperty("spark.scheduler.pool", before)


@dataclass
class Resume:
    """Where a query without a usable checkpoint starts (empty: as a new flow, or from its checkpoint)."""

    kafka: dict[str, str] = field(default_factory=dict)      # topic -> startingOffsets JSON
    versions: dict[str, int] = field(default_factory=dict)   # source table -> startingVersion
    starting: dict[str, dict[str, int]] | None = None        # what batch 0 of the new checkpoint starts from


class CheckpointUnusable(RuntimeError):
    """A flow's checkpoint is gone and the positions recorded for it cannot be used; the message says why."""


def prepare_checkpoint(spark: SparkSession, flow: Flow, ctx: FlowContext, *, writer: Any = None) -> Resume:
    """Recover a flow's missing or corrupt checkpoint from the positions its tables record, and say so in the log.

    - checkpoint readable: nothing to do;
    - corrupt (unreadable metadata, offsets or commit file): moved aside to `<checkpoint>.corrupt-<utc>`,
      then as missing;
    - missing (no folder, or no offsets in it): a bronze flow starts at the Kafka offsets after those
      its table holds; another flow rebuilds its checkpoint from the newest batch it recorded (same
      batch numbers and exact offsets, a new query id: see streaming/positions.py), or, after a replay's swap
      (positions without a query), starts a new checkpoint at startingVersion per source. A flow that
      has recorded nothing starts as a new flow.
    """
    checkpoint = flow.checkpoint(ctx)
    state = inspect_checkpoint(spark, checkpoint)
    if state.state == "ok":
        return Resume()
    lost = state.state
    if lost == "corrupt":
        aside = move_aside(spark, checkpoint, "corrupt")
        log.warning("checkpoint of flow %s at %s was corrupt (%s); moved it aside to %s",
                    flow.name, checkpoint, state.reason, aside)
    folder = lost == "missing" and state.folder_exists   # a folder with no offsets yet
    if isinstance(flow.source, TopicSpec):
        return _resume_bronze(spark, flow, ctx, checkpoint, lost)
    names = {t.path(ctx.lake_root): t.name for t in (flow.target, *flow.also_writes)}
    for table in _state_tables(spark, writer):
        names[table] = table[len(ctx.lake_root.rstrip("/")) + 1:]
    found = resume_point(spark, flow.name, flow.app_id, names)
    if found is None:
        if lost == "corrupt":
            log.warning("flow %s has recorded no positions in its tables; it starts from the beginning of %s",
                        flow.name, ", ".join(s.name for s in flow.sources))
        return Resume()
    _check_sources(spark, flow, ctx, found)
    where = f"{names[found.table]} version {found.table_version}"
    if found.query is None:
        # The batch lane's replay wrote this table and said where each source stands: a new checkpoint there.
        versions = {name: int(pos["version"]) for name, pos in found.sources.items()}
        log.warning("checkpoint of flow %s at %s was %s; resuming from the positions recorded in %s: %s "
                    "(a new checkpoint)", flow.name, checkpoint, lost, where, describe(found.sources))
        return Resume(versions=versions, starting={name: {"version": v} for name, v in versions.items()})
    if folder:
        move_aside(spark, checkpoint, "empty")
    rebuild_checkpoint(spark, checkpoint, found)
    replay = "" if found.record.get("final") else (
        f"; batch {found.batch} did not record its last write, so it runs again with the same input and "
        "Delta skips the writes it had made")
    log.warning("checkpoint of flow %s at %s was %s; resuming from the positions recorded in %s: %s "
                "(rebuilt the checkpoint of query %s at batch %d%s)", flow.name, checkpoint, lost, where,
                describe(_plain(found.sources)), found.query, found.batch, replay)
    start = found.record.get("from") if found.batch == 0 else None
    versions = {name: int(pos["version"]) for name, pos in (start or {}).items() if pos}
    return Resume(versions=versions, starting=start)


def after_bronze(spark: SparkSession, flow: Flow, ctx: FlowContext) -> tuple[str | None, str]:
    """Where a bronze flow's query starts without a checkpoint: the Kafka offsets after the highest its table holds.

    Returns Spark's startingOffsets JSON (None when the table holds no rows: from the earliest offsets)
    and the same in words, per partition.
    """
    topic = flow.source
    positions = bronze_positions(spark, flow.target.path(ctx.lake_root))
    if not positions:
        return None, f"{topic.name} from the earliest offsets"
    metadata = admin_client(ctx.kafka_bootstrap).list_topics(topic.name, timeout=10).topics.get(topic.name)
    partitions = sorted(metadata.partitions) if metadata is not None and metadata.partitions else []
    partitions = sorted(set(partitions) | set(positions.get(topic.name, {})))
    at = positions.get(topic.name, {})
    said = ", ".join(f"partition {p} at offset {at[p]}" if p in at else f"partition {p} from the earliest offset"
                     for p in partitions)
    return kafka_starting_offsets(positions, {topic.name: partitions}), f"{topic.name} {said}"


def _resume_bronze(spark: SparkSession, flow: Flow, ctx: FlowContext, checkpoint: str, lost: str) -> Resume:
    """A bronze flow resumes at the Kafka offsets after the highest its table holds, per partition."""
    starting, said = after_bronze(spark, flow, ctx)
    if starting is None:
        if lost == "corrupt":
            log.warning("%s holds no rows; flow %s starts from the earliest offsets of %s",
                        flow.target.name, flow.name, flow.source.name)
        return Resume()
    log.warning("checkpoint of flow %s at %s was %s; resuming from the positions recorded in %s version %s: "
                "%s (after the Kafka coordinates of its rows)", flow.name, checkpoint, lost, flow.target.name,
                table_version(spark, flow.target.path(ctx.lake_root)), said)
    return Resume(kafka={flow.source.name: starting})


def _state_tables(spark: SparkSession, writer: Any) -> list[str]:
    """The Delta tables in a stateful writer's state folder (its watermark, a join's buffer)."""
    root = getattr(writer, "state_root", "") or ""
    if not root:
        return []
    return [f"{root}/{path.rsplit('/', 1)[-1]}" for path in children(spark, root, folders_only=True)]


def _plain(positions: dict[str, Any]) -> dict[str, Any]:
    return {name: {k: v for k, v in (pos or {}).items() if k != "table_id"} if pos else pos
            for name, pos in positions.items()}


def _check_sources(spark: SparkSession, flow: Flow, ctx: FlowContext, found: Recorded) -> None:
    """The recorded positions name every source of the flow, as the same tables (not replaced since)."""
    names = {s.name for s in flow.sources}
    recorded = found.sources
    where = f"version {found.table_version} of {found.table}"
    if set(recorded) != names:
        raise CheckpointUnusable(
            f"The positions recorded for flow {flow.name} in {where} name {', '.join(sorted(recorded)) or 'no source'}, "
            f"but the flow reads {', '.join(sorted(names))}; replay its table (lakehouse replay {flow.target.name}).")
    if found.query is None:
        inexact = [n for n, pos in recorded.items() if not is_exact_version(pos)]
        if inexact:
            raise CheckpointUnusable(
                f"The positions recorded for flow {flow.name} in {where} are not whole versions for "
                f"{', '.join(inexact)}; record {{\"version\": V}} per source.")
        return
    by_name = {s.name: s for s in flow.sources}
    for positions in (recorded, found.record.get("from") or {}):
        for name, pos in positions.items():
            if not pos or "table_id" not in pos or isinstance(by_name[name], TopicSpec):
                continue
            if pos["table_id"] != table_id(spark, stream_path(by_name[name], ctx)):
                raise CheckpointUnusable(
                    f"Flow {flow.name} cannot resume from the positions recorded in {where}: {name} has been "
                    f"replaced by another table since; replay {flow.target.name} (lakehouse replay {flow.target.name}).")


def rows_written(commits: list[Commit], query_id: str | None = None) -> int:
    """Rows the commits wrote; with `query_id`, only that streaming query's appends count (several may append to one table)."""
    return sum(c.rows for c in commits
               if not (query_id and c.operation == "STREAMING UPDATE" and c.parameters.get("queryId") != query_id))


_SAID = {
    "CREATE TABLE": "created the table, empty, with its schema (the data follows in the next versions)",
    "WRITE": "appended a micro-batch", "STREAMING UPDATE": "appended a micro-batch",
    "MERGE": "merged a micro-batch", "UPDATE": "updated rows the watermark closed", "DELETE": "deleted rows",
    "OPTIMIZE": "compacted files",
}


def describe_commits(commits: list[Commit]) -> dict[str, str]:
    """What each commit did, in words: why a first run's data is at version 1, not 0."""
    said = {}
    for c in commits:
        rows = sum(int(c.metrics.get(n, 0)) for n in ("numOutputRows", "numTargetRowsInserted", "numTargetRowsUpdated")
                   if c.operation != "MERGE" or n != "numOutputRows")
        words = _SAID.get(c.operation, c.operation.lower())
        said[str(c.version)] = f"{c.operation}: {words}" + (f", {rows} rows" if rows else "")
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


_ran = threading.local()


@contextmanager
def ran_already(runs: dict[str, FlowRun]) -> Iterator[None]:
    """Within the block, `run_flow` in this thread returns these runs instead of running their flows again.

    A topic's flows caught up in one query (streaming/topic_runs.py); the caller's per-flow handling of
    each run (a catch-up's materializations) then goes through `run_flow` as for a flow run on its own.
    """
    _ran.runs = runs
    try:
        yield
    finally:
        _ran.runs = {}


def run_flow(spark: SparkSession, flow: Flow, ctx: FlowContext) -> FlowRun:
    """Run one flow until it has caught up with its source, then report batches, rows, offsets, version."""
    done = getattr(_ran, "runs", {}).get(flow.name)
    if done is not None:
        return done
    path = flow.target.path(ctx.lake_root)
    started = time.monotonic()
    missing = tuple(
        t.name for t in (*flow.sources, *flow.lookups)
        if isinstance(t, TableSpec) and not has_delta_log(spark, t.path(ctx.lake_root))
    )
    if missing:
        # An upstream table is created by its first row (a topic no one has sent to yet): wait for it.
        log.info("flow %s: %s has no rows yet; nothing to do", flow.name, ", ".join(missing))
        version = table_version(spark, path)
        return FlowRun(flow=flow.name, table=flow.target.name, waiting_for=missing, delta_version=version,
                       version_before=version)
    # A Delta sink's rows are counted from the history after this version; batch writers count their own.
    before = table_version(spark, path)
    for attempt in (1, 2):
        writer = flow.batch_writer(ctx) if flow.output == "batch" else None
        query = start_flow(spark, flow, ctx, writer=writer)
        watchdog = BrokerWatchdog(query, ctx.kafka_bootstrap) if isinstance(flow.source, TopicSpec) else None
        try:
            query.awaitTermination()  # raises the query's own error if it failed
            break
        except Exception as exc:
            _raise_if_kafka_lost(flow, ctx, exc)
            _raise_if_quality_breach(exc)
            _raise_if_sources_changed(flow, exc)
            if attempt == 1 and not query.recentProgress and _unreadable_checkpoint(exc):
                # Spark could not read what the checkpoint holds: recover it as a corrupt one, once.
                aside = move_aside(spark, flow.checkpoint(ctx), "corrupt")
                log.warning("checkpoint of flow %s at %s could not be read when the query started (%s); moved it "
                            "aside to %s", flow.name, flow.checkpoint(ctx), str(exc).splitlines()[0][:300], aside)
                continue
            raise
        finally:
            if watchdog:
                watchdog.close()
            if ctx.quality is not None:
                ctx.quality.flush(spark)
    if watchdog and watchdog.lost:
        raise _lost(flow, ctx)
    return finished_run(spark, flow, ctx, query.recentProgress, writer, before, started, query_id=str(query.id))


def finished_run(spark: SparkSession, flow: Flow, ctx: FlowContext, progress: list[Any], writer: Any,
                 before: int | None, started: float, *, query_id: str | None = None) -> FlowRun:
    """What a flow's finished catch-up did: its query's micro-batches, its writer's counts, its table's new commits."""
    run = FlowRun(flow=flow.name, table=flow.target.name, version_before=before)
    run.batches = sum(1 for p in progress if p.numInputRows > 0)
    run.input_rows = sum(int(p.numInputRows) for p in progress)
    run.kafka_offsets = _kafka_ranges(progress)
    run.progress = [progress_row(p, "catch-up") for p in progress if p.numInputRows > 0]
    commits = commits_after(spark, flow.target.path(ctx.lake_root), before)
    run.delta_version = commits[-1].version if commits else before
    run.commits = describe_commits(commits)
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
        run.rows_written = rows_written(commits, query_id=query_id)
    run.duration_s = round(time.monotonic() - started, 2)
    log.info(
        "flow %s: %d input rows, %d written, %s is at version %s (%.1fs)",
        flow.name, run.input_rows, run.rows_written, flow.target.name, run.delta_version, run.duration_s,
    )
    return run


# What Spark and Delta say when a checkpoint's offset or commit log cannot be used (not a data error).
_CHECKPOINT_ERRORS = (
    "DELTA_INVALID_SOURCE_OFFSET_FORMAT", "DELTA_INVALID_SOURCE_VERSION", "DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION",
    "Log file was malformed", "INVALID_LOG_VERSION", "UnsupportedLogVersion", "ChecksumException",
    "Checksum error",
)


def _unreadable_checkpoint(exc: Exception) -> bool:
    text = str(exc)
    return any(marker in text for marker in _CHECKPOINT_ERRORS)


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


class QualityStopped(RuntimeError):
    """A fail-severity expectation stopped the flow's query (the sentence names it and the batch's offsets)."""


_BREACH = re.compile(r"QualityBreach: (.+)")


def _raise_if_quality_breach(exc: Exception) -> None:
    """A breach raised in foreachBatch reaches here inside Spark's error text: keep only its sentence."""
    found = _BREACH.search(str(exc))
    if found:
        raise QualityStopped(found.group(1).strip()) from None


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


_SOURCES_CHANGED = re.compile(r"There are \[(\d+)\] sources in the checkpoint offsets and now there are \[(\d+)\]")


def _raise_if_sources_changed(flow: Flow, exc: Exception) -> None:
    """A checkpoint started with another number of sources (a flow from before definitions were recorded, whose
    pipeline gained or lost a source): the table's definition changed, said as every such change is."""
    found = _SOURCES_CHANGED.search(str(exc))
    if found:
        changed = DefinitionChanged(flow.target.name, [f"its checkpoint reads {found.group(1)} sources, the flow now "
                                                       f"reads {found.group(2)}"])
        changed.raw = str(exc)
        raise changed from None


_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Exception|Error|Breach)): (.+)$")


def first_line(exc: BaseException) -> str:
    """The sentence that names what went wrong: a foreachBatch error's own exception line, not py4j's wrapper."""
    lines = str(exc).strip().splitlines()
    named = [m for line in lines if (m := _ERROR_LINE.match(line)) and "Python Proxy" not in line]
    text = f"{named[-1].group(1)}: {named[-1].group(2)}" if named else (lines[0] if lines else type(exc).__name__)
    return text[:300]
