"""The lake's tables by name: one table's snapshot, every table in the session catalog, a table's Delta history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas import tables
from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.lake_files import hadoop_fs, has_delta_log


def read_table(spark: SparkSession, table: TableSpec, lake_root: str) -> DataFrame:
    """The table's current snapshot."""
    return spark.read.format("delta").load(table.path(lake_root))


def existing_tables(spark: SparkSession, lake_root: str) -> list[TableSpec]:
    """The declared tables that have been created under this lake root."""
    return [spec for spec in tables.ALL if has_delta_log(spark, spec.path(lake_root))]


def register_tables(spark: SparkSession, lake_root: str) -> list[str]:
    """Register each existing table by its name in the session's catalog; returns the names registered.

    Each is an external Delta table at its path (in Spark's in-memory catalog: nothing outside this session
    learns of it), so a query can read it as of a version or a time (`VERSION AS OF 3`,
    `TIMESTAMP AS OF '2026-11-22 09:00:00'`), which a temporary view cannot. Registering commits nothing to the
    table. A name registered for another lake root, or whose table is gone, is unregistered first: dropping
    an external table forgets the name and leaves its files.
    """
    names = []
    existing = {spec.name for spec in existing_tables(spark, lake_root)}
    for spec in tables.ALL:
        spark.catalog.dropTempView(spec.name)  # a view of the same name would hide the table
        path = spec.path(lake_root)
        registered = _registered_location(spark, spec.name)
        if registered is not None and (spec.name not in existing or registered != _qualified(spark, path)):
            spark.sql(f"DROP TABLE IF EXISTS `{spec.name}`")
            registered = None
        if spec.name in existing:
            if registered is None:
                spark.catalog.createTable(spec.name, path=path, source="delta")
            names.append(spec.name)
    return names


def _registered_location(spark: SparkSession, name: str) -> str | None:
    """Where the session catalog's external table `name` points, or None if there is none.

    A managed table of that name (not created here) is an error: dropping it would delete its files.
    """
    catalog = spark._jsparkSession.sessionState().catalog()
    ident = spark._jvm.org.apache.spark.sql.catalyst.TableIdentifier(name)
    if not catalog.tableExists(ident):
        return None
    table = catalog.getTableMetadata(ident)
    if table.tableType().name() != "EXTERNAL":
        raise RuntimeError(f"The session catalog holds a {table.tableType().name()} table named {name}; "
                           "lakehouse tables are registered as external tables only.")
    return table.location().toString()


def _qualified(spark: SparkSession, path: str) -> str:
    """A path as the catalog stores it (scheme and authority included)."""
    fs, hadoop_path = hadoop_fs(spark, path)
    return fs.makeQualified(hadoop_path).toUri().toString()


@dataclass(frozen=True)
class Commit:
    """One version of a Delta table: what wrote it and what it changed."""

    version: int
    committed_at: datetime  # UTC
    operation: str
    metrics: dict[str, str]
    user_metadata: str | None

    def changed(self) -> str:
        """What the commit wrote, in words, from Delta's operationMetrics ('' if it wrote no rows or files)."""
        m = {k: int(v) for k, v in self.metrics.items() if str(v).isdigit()}
        op = self.operation
        if op == "MERGE":
            return (f"{m.get('numTargetRowsInserted', 0)} inserted, {m.get('numTargetRowsUpdated', 0)} updated, "
                    f"{m.get('numTargetRowsDeleted', 0)} deleted")
        if op == "OPTIMIZE":
            return f"{m.get('numRemovedFiles', 0)} files rewritten into {m.get('numAddedFiles', 0)}"
        if op.startswith("VACUUM"):
            if "numDeletedFiles" in m:
                return f"{m['numDeletedFiles']} files deleted"
            return f"{m['numFilesToDelete']} files to delete" if "numFilesToDelete" in m else ""
        if op == "DELETE" and "numDeletedRows" in m:
            return f"{m['numDeletedRows']} deleted"
        if op == "UPDATE" and "numUpdatedRows" in m:
            return f"{m['numUpdatedRows']} updated"
        if "numOutputRows" in m:
            return f"{m['numOutputRows']} row{'' if m['numOutputRows'] == 1 else 's'} written"
        return ""


def table_history(spark: SparkSession, path: str, limit: int | None = None) -> list[Commit]:
    """The table's commits, newest first (at most `limit`)."""
    # SQL rather than DeltaTable: a Spark Connect session (lakehouse serve's clients) has no Delta Python API.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`" + (f" LIMIT {int(limit)}" if limit else ""))
    # As microseconds: PySpark would turn a timestamp into the local time of this Python process.
    rows = history.select("version", F.unix_micros("timestamp").alias("micros"), "operation", "operationMetrics",
                          "userMetadata").collect()
    return [
        Commit(r["version"], datetime.fromtimestamp(r["micros"] / 1e6, timezone.utc), r["operation"],
               dict(r["operationMetrics"] or {}), r["userMetadata"])
        for r in rows
    ]


@dataclass(frozen=True)
class VersionRange:
    """The versions of a table that time travel can read, and when the first and last were committed."""

    earliest: int
    latest: int
    earliest_at: datetime
    latest_at: datetime


def version_range(spark: SparkSession, path: str) -> VersionRange:
    """The first and last version in the table's log (older log entries are removed after log retention)."""
    commits = table_history(spark, path)
    first, last = commits[-1], commits[0]
    return VersionRange(first.version, last.version, first.committed_at, last.committed_at)
