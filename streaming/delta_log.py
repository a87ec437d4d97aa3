"""A Delta table's newest version, its id and its recent commits, read without a Spark job.

`DeltaTable.history(n)` updates the table's snapshot and then runs a Spark job whose tasks read the
commit files: 0.2-0.9 s on 2 cores, for each question a run asks before and after its query. A run only
needs the newest version (the snapshot update alone gives it) and the few commits it made, each in its
commit file `_delta_log/<version>.json` as the `commitInfo` action the Delta protocol defines. Read
through Hadoop's FileSystem, that takes milliseconds and works alike on a local folder and an object store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Generator, Iterator

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from lakehouse.streaming.lake_files import hadoop_fs, has_delta_log

# Commits that change none of a table's rows: compaction (the nightly OPTIMIZE or Delta's auto compaction
# after a write) and VACUUM. A reader asking what last wrote the table's rows passes over them.
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
# What a commit wrote, by operation: a Delta sink's appends, or the rows a MERGE inserted and updated.
_WRITTEN = {"STREAMING UPDATE": ("numOutputRows",), "MERGE": ("numTargetRowsInserted", "numTargetRowsUpdated")}


@dataclass(frozen=True)
class Commit:
    """One commit of a table, as its `commitInfo` records it: what a run reports of its own commits."""

    version: int
    operation: str
    metrics: dict[str, str]
    parameters: dict[str, str]
    user_metadata: str | None = None
    timestamp: int = 0        # when it was committed, in ms since the epoch (commitInfo's own)

    @property
    def rows(self) -> int:
        """Rows the commit wrote (appended, or inserted and updated by a MERGE)."""
        return sum(int(self.metrics.get(name, 0)) for name in _WRITTEN.get(self.operation, ()))

    @property
    def maintenance(self) -> bool:
        """Whether the commit only rearranged files (OPTIMIZE, VACUUM): the rows are those of the commit before it."""
        return self.operation in MAINTENANCE


def _snapshot(spark: SparkSession, path: str):
    """Delta's snapshot of the table brought up to date: a listing of its log, no Spark job (history and detail run one)."""
    none = spark._jvm.scala.Option.empty()
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).update(False, none, none)


def table_version(spark: SparkSession, path: str) -> int | None:
    """The table's newest version (None when there is no table)."""
    return int(_snapshot(spark, path).version()) if has_delta_log(spark, path) else None


def table_id(spark: SparkSession, path: str) -> str | None:
    """Delta's id of the table at `path` (what its streaming offsets call reservoirId); None when there is no table."""
    return str(_snapshot(spark, path).metadata().id()) if has_delta_log(spark, path) else None


def txn_version(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The newest txnVersion committed to the table under `app_id` (None when none was, or there is no table).

    Delta computes the snapshot's state for it (a Spark job): for the rare question, not for every batch.
    """
    if not has_delta_log(spark, path):
        return None
    found = _snapshot(spark, path).transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


def _log_lines(spark: SparkSession, path: str, name: str) -> Generator[str, None, None] | None:
    """The lines of one file of the table's log, read lazily (None when the file is gone: log cleanup removes the
    oldest commits, and a checksum file is written after its commit)."""
    jvm = spark._jvm
    fs, file = hadoop_fs(spark, f"{path.rstrip('/')}/_delta_log/{name}")
    try:
        stream = fs.open(file)
    except Py4JJavaError as exc:
        if "FileNotFoundException" in exc.java_exception.getClass().getName():
            return None
        raise
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))

    def lines() -> Generator[str, None, None]:
        try:
            while (line := reader.readLine()) is not None:
                yield line
        finally:
            reader.close()
    return lines()


def _read_commit(spark: SparkSession, path: str, version: int) -> Commit | None:
    """The commit's `commitInfo` (None when its file is gone: log cleanup removes the oldest)."""
    lines = _log_lines(spark, path, f"{version:020d}.json")
    if lines is None:
        return None
    info: dict = {}
    # One action per line; Delta writes commitInfo first, so this seldom reads past the first line.
    for line in lines:
        if '"commitInfo"' in line[:20]:
            info = json.loads(line)["commitInfo"]
            break
    lines.close()
    return Commit(version, info.get("operation", ""), dict(info.get("operationMetrics") or {}),
                  dict(info.get("operationParameters") or {}), info.get("userMetadata"), int(info.get("timestamp") or 0))


def commit_actions(spark: SparkSession, path: str, version: int) -> list[dict] | None:
    """Every action of one commit, parsed (None when its file is gone)."""
    lines = _log_lines(spark, path, f"{version:020d}.json")
    return None if lines is None else [json.loads(line) for line in lines if line.strip()]


def checksum(spark: SparkSession, path: str, version: int) -> dict | None:
    """The version's checksum file `<version>.crc` (Delta writes one after each commit: the table's size, files,
    metadata and, for tables of few files, every file with its statistics); None when it is missing or unreadable."""
    lines = _log_lines(spark, path, f"{version:020d}.crc")
    if lines is None:
        return None
    try:
        return json.loads("".join(lines))
    except ValueError:
        return None


def commits_after(spark: SparkSession, path: str, after_version: int | None) -> list[Commit]:
    """The table's commits after `after_version` (all with None), oldest first; [] when there is no table.

    Versions are contiguous, so the commits after a known version are read one by one up to the first
    missing file, with no listing of the log (which grows with every commit).
    """
    if after_version is None:
        newest = table_version(spark, path)
        if newest is None:
            return []
        read = (_read_commit(spark, path, v) for v in range(newest + 1))
        return [c for c in read if c is not None]
    commits = []
    while (commit := _read_commit(spark, path, after_version + 1 + len(commits))) is not None:
        commits.append(commit)
    return commits


def newest_commits(spark: SparkSession, path: str, limit: int) -> Iterator[Commit]:
    """Up to `limit` of the table's newest commits, newest first, stopping at the first whose file is gone."""
    newest = table_version(spark, path)
    if newest is None:
        return
    for version in range(newest, max(newest - limit, -1), -1):
        commit = _read_commit(spark, path, version)
        if commit is None:
            return
        yield commit


def last_commit(spark: SparkSession, path: str) -> Commit | None:
    """The table's newest commit (None when there is no table)."""
    newest = table_version(spark, path)
    return None if newest is None else _read_commit(spark, path, newest)


# Maintenance commits read past at most: auto compaction adds one after a write, the nightly job three.
MAINTENANCE_RUN = 50


def last_data_commit(spark: SparkSession, path: str) -> Commit | None:
    """The newest commit that wrote the table's rows, passing over compactions and VACUUMs on top of it.

    None when there is no table, or when more maintenance commits than any writer leaves lie on top (or
    the log no longer holds what is under them): the caller then reads the table itself.
    """
    for commit in newest_commits(spark, path, limit=MAINTENANCE_RUN):
        if not commit.maintenance:
            return commit
    return None
