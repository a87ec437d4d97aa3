"""Table maintenance: compaction (OPTIMIZE, bin-packing and Z-order) and VACUUM under the replay window.

Both are safe while streams append. OPTIMIZE commits with dataChange=false: a Delta stream reading the
table skips that commit (the rows it rewrites were read already, from the files they came in), and a
writer's blind append never conflicts with it. VACUUM deletes only files that no version inside the
table's `delta.deletedFileRetentionDuration` references, and the policy makes that the replay window
(infra/retention.py), so a stream that is less than the window behind still finds every file it needs.

Both carry a stateful gold table's newest watermark forward in their commits (`carried_watermark`): its
flow records it in its own MERGE's commit, and log cleanup would delete that commit from a table that is
compacted for weeks while its flow has nothing to write.

One case is not safe, and is avoided instead: a table whose writer rewrites files in place (MERGE,
UPDATE, DELETE, an overwrite: the gold and dimension tables, and a table a backfill replaced). Such a
writer reads files and then commits; if OPTIMIZE removed those files in between, Delta fails the
writer's commit (ConcurrentDeleteReadException / ConcurrentAppendException), and a stream whose commit
fails stops. So a rewritten table is compacted only when no writer of it is running (`busy` says which
is); otherwise it is skipped with the reason, and the next run compacts it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from lakehouse.infra.retention import (
    DELETED_FILES, DELTA_DEFAULTS, Finding, check_session_defaults, check_table, check_topic, duration_ms, vacuum_blocker,
)
from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.delta_log import commits_after, table_version
from lakehouse.streaming.gold_batches import carried_watermark
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.positions import UserMetadata

log = logging.getLogger(__name__)

# Commits that read files and replace them: their writers conflict with a concurrent OPTIMIZE.
REWRITES = {"MERGE", "UPDATE", "DELETE"}
HISTORY_LOOKBACK = 50          # commits read to tell a rewritten table from an appended one

# Why a table must not be compacted now (a writer that rewrites it is running), or None.
Busy = Callable[[TableSpec], "str | None"]


@dataclass(frozen=True)
class Layout:
    """A table's current version as DESCRIBE DETAIL reports it."""

    files: int
    bytes: int


def layout(spark: SparkSession, path: str) -> Layout:
    row = DeltaTable.forPath(spark, path).detail().select("numFiles", "sizeInBytes").first()
    return Layout(int(row["numFiles"] or 0), int(row["sizeInBytes"] or 0))


def table_properties(spark: SparkSession, path: str) -> dict[str, str] | None:
    """The table's properties (None when there is no Delta table at `path` yet)."""
    if not has_delta_log(spark, path):
        return None
    return dict(DeltaTable.forPath(spark, path).detail().select("properties").first()["properties"] or {})


def rewritten_in_place(spark: SparkSession, path: str, lookback: int = HISTORY_LOOKBACK) -> bool:
    """Whether the table's recent writers rewrite files (MERGE, UPDATE, DELETE, overwrite) rather than append."""
    rows = DeltaTable.forPath(spark, path).history(lookback).select("operation", "operationParameters").collect()
    return any(
        r["operation"] in REWRITES
        or (r["operation"] == "WRITE" and (r["operationParameters"] or {}).get("mode") == "Overwrite")
        for r in rows
    )


def merged_by_its_flow(spec: TableSpec) -> bool:
    """Whether the table's own flow MERGEs into it (gold and dimensions; silver's writer only appends), whatever its
    history shows yet: the first batch into a new table is an append (streaming/gold_batches.py, `Step._merge`)."""
    from lakehouse.streaming.flows import FLOWS

    return any(f.target.name == spec.name and f.output == "batch" and f.schema is None for f in FLOWS)


def writer_flows(spec: TableSpec) -> tuple[str, ...]:
    """Names of the flows (streaming queries) that write the table."""
    from lakehouse.streaming.flows import FLOWS

    return tuple(f.name for f in FLOWS if spec.name in (f.target.name, *(t.name for t in f.also_writes)))


def running_writers(spark: SparkSession, spec: TableSpec) -> list[str]:
    """Streaming queries of this Spark session that write the table (query names are flow names)."""
    names = set(writer_flows(spec))
    return sorted(q.name for q in spark.streams.active if q.name in names)


@dataclass
class Compaction:
    """What OPTIMIZE did to one table."""

    table: str
    layer: str
    status: str                      # compacted, skipped or failed
    reason: str = ""
    zorder_by: tuple[str, ...] = ()
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    files_removed: int = 0
    files_added: int = 0
    duration_s: float = 0.0
    version: int | None = None       # the OPTIMIZE commit, when there was one

    def row(self) -> dict[str, object]:
        out = asdict(self)
        out["zorder_by"] = ", ".join(self.zorder_by)
        out["version"] = -1 if self.version is None else self.version
        return out


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def compact_table(spark: SparkSession, spec: TableSpec, lake_root: str, *, busy: Busy | None = None) -> Compaction:
    """OPTIMIZE one table (ZORDER BY its `zorder_by` columns, if any) and report its layout before and after."""
    path = spec.path(lake_root)
    result = Compaction(spec.name, spec.layer, "skipped", zorder_by=spec.zorder_by)
    if not has_delta_log(spark, path):
        result.reason = "not created yet: its flow has written no rows"
        return result
    before = layout(spark, path)
    result.files_before, result.bytes_before = before.files, before.bytes
    result.files_after, result.bytes_after = before.files, before.bytes
    if before.files == 0:
        result.reason = "empty: nothing to compact"
        return result
    if merged_by_its_flow(spec) or rewritten_in_place(spark, path):
        writers = running_writers(spark, spec)
        reason = (f"its writer {', '.join(writers)} is running in this process" if writers
                  else busy(spec) if busy else None)
        if reason:
            result.reason = (f"{reason}; it rewrites files in place (MERGE), so OPTIMIZE committing under it would "
                             "fail its commit and stop it. Compacted on the next run.")
            return result
    statement = f"OPTIMIZE delta.`{path}`"
    if spec.zorder_by:
        statement += " ZORDER BY (" + ", ".join(f"`{c}`" for c in spec.zorder_by) + ")"
    started = time.monotonic()
    try:
        with UserMetadata(spark, carried_watermark(spark, path)):
            metrics = spark.sql(statement).first()["metrics"]
    except Exception as exc:  # noqa: BLE001 - reported per table; the caller decides whether the run fails
        message = _short(exc)
        # A writer committed first on the same files: Delta rejected OPTIMIZE, the writer is unharmed.
        result.status = "skipped" if "DELTA_CONCURRENT" in message else "failed"
        result.reason = ("a concurrent commit touched the same files first (OPTIMIZE gave way); compacted on the "
                         f"next run: {message}") if result.status == "skipped" else message
        result.duration_s = round(time.monotonic() - started, 2)
        return result
    result.duration_s = round(time.monotonic() - started, 2)
    after = layout(spark, path)
    result.status = "compacted"
    result.files_after, result.bytes_after = after.files, after.bytes
    result.files_removed = int(metrics["numFilesRemoved"] or 0)
    result.files_added = int(metrics["numFilesAdded"] or 0)
    if result.files_removed or result.files_added:
        result.version = table_version(spark, path)
    else:
        result.reason = "nothing to compact"
    log.info("compacted %s: %d files (%d bytes) -> %d files (%d bytes) in %.1fs", spec.name, before.files,
             before.bytes, after.files, after.bytes, result.duration_s)
    return result


def compact_tables(spark: SparkSession, specs: Iterable[TableSpec], lake_root: str, *,
                   busy: Busy | None = None) -> list[Compaction]:
    return [compact_table(spark, spec, lake_root, busy=busy) for spec in specs]


@dataclass
class Vacuum:
    """What VACUUM did to one table."""

    table: str
    layer: str
    status: str                      # vacuumed, skipped or failed
    reason: str = ""
    retention: str = ""              # the table's delta.deletedFileRetentionDuration, which VACUUM obeys
    files_deleted: int = 0
    bytes_deleted: int = 0
    live_files: int = 0
    duration_s: float = 0.0

    def row(self) -> dict[str, object]:
        return asdict(self)


def _vacuum_metrics(spark: SparkSession, path: str, after_version: int) -> tuple[int, int]:
    """Files and bytes deleted, from the VACUUM START and VACUUM END commits after `after_version`."""
    files = size = 0
    for commit in commits_after(spark, path, after_version):
        if commit.operation == "VACUUM START":
            size += int(commit.metrics.get("sizeOfDataToDelete", 0))
        elif commit.operation == "VACUUM END":
            files += int(commit.metrics.get("numDeletedFiles", 0))
    return files, size


def vacuum_table(spark: SparkSession, spec: TableSpec, lake_root: str, *, window_ms: int) -> Vacuum:
    """VACUUM one table with its own deleted-file retention, if that covers the replay window; else skip it.

    The retention is not passed: Delta 4.4 ignores a RETAIN other than 0 by default (and one below the
    table's retention with the safety check on), so the table property, set to the window when the table was
    created, is the retention. A table whose property is shorter is skipped: VACUUM would delete inside the window.
    """
    path = spec.path(lake_root)
    result = Vacuum(spec.name, spec.layer, "skipped")
    properties = table_properties(spark, path)
    if properties is None:
        result.reason = "not created yet: its flow has written no rows"
        return result
    result.retention = properties.get(DELETED_FILES, f"{DELTA_DEFAULTS[DELETED_FILES]} (Delta's default)")
    result.live_files = layout(spark, path).files
    if (blocker := vacuum_blocker(spec.name, properties, window_ms)) is not None:
        result.reason = blocker
        return result
    before = table_version(spark, path)
    started = time.monotonic()
    try:
        with UserMetadata(spark, carried_watermark(spark, path)):
            DeltaTable.forPath(spark, path).vacuum()
    except Exception as exc:  # noqa: BLE001 - reported per table
        result.status, result.reason = "failed", _short(exc)
        result.duration_s = round(time.monotonic() - started, 2)
        return result
    result.duration_s = round(time.monotonic() - started, 2)
    result.status = "vacuumed"
    result.files_deleted, result.bytes_deleted = _vacuum_metrics(spark, path, before)
    log.info("vacuumed %s: %d files (%d bytes) deleted, retention %s", spec.name, result.files_deleted,
             result.bytes_deleted, result.retention)
    return result


def vacuum_tables(spark: SparkSession, specs: Iterable[TableSpec], lake_root: str, *, window_ms: int) -> list[Vacuum]:
    return [vacuum_table(spark, spec, lake_root, window_ms=window_ms) for spec in specs]


# ---------------------------------------------------------------- retention facts

def topic_configs(bootstrap: str, specs: Iterable[TopicSpec]) -> dict[str, dict[str, str] | None]:
    """Every live topic's configuration (None for a topic that does not exist yet)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    from lakehouse.streaming.kafka_topics import admin_client

    admin = admin_client(bootstrap)
    names = [s.name for s in specs]
    existing = set(admin.list_topics(timeout=10).topics)
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names if n in existing]
    live = {res.name: fut.result() for res, fut in admin.describe_configs(resources).items()} if resources else {}
    return {n: ({k: str(v.value) for k, v in live[n].items()} if n in live else None) for n in names}


def topic_findings(bootstrap: str, specs: Iterable[TopicSpec], window: str) -> list[Finding]:
    configs = topic_configs(bootstrap, specs)
    return [f for name, config in configs.items() for f in check_topic(name, config, duration_ms(window), bootstrap)]


def table_findings(spark: SparkSession, specs: Iterable[TableSpec], lake_root: str, window: str) -> list[Finding]:
    return [f for spec in specs
            for f in check_table(spec.name, spec.path(lake_root), table_properties(spark, spec.path(lake_root)), window)]


def retention_findings(
    spark: SparkSession, *, bootstrap: str, lake_root: str, window: str, topics: Iterable[TopicSpec],
    tables: Iterable[TableSpec], session_conf: Mapping[str, str],
) -> list[Finding]:
    """Every retention the replay window depends on: live topics, the session's table defaults, each table."""
    return [
        *topic_findings(bootstrap, topics, window),
        *check_session_defaults(session_conf, window),
        *table_findings(spark, tables, lake_root, window),
    ]
