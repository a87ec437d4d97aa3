"""What a Delta table's log says without a Spark session: its columns, and the least value of a column.

Read with pyarrow from the log's files (local folder or object store, as streaming/health.py reads
checkpoints), so that loading the Dagster definitions stays a matter of milliseconds and never starts a JVM.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

from pyarrow import parquet as pq

from lakehouse.streaming.health import _listing, _read, filesystem
from lakehouse.streaming.lake_files import DELTA_LOG_VERSION_FILE

# Commit files read after the newest checkpoint at most (Delta writes a checkpoint every 10 commits by default).
MAX_COMMITS_READ = 200


def _log(table_uri: str) -> str:
    return f"{table_uri.rstrip('/')}/_delta_log"


def _commits_and_checkpoints(table_uri: str) -> tuple[list[int], dict[int, list[str]]]:
    """Versions of the commit files, and each checkpoint version's parquet files."""
    commits, checkpoints = [], {}
    for info in _listing(_log(table_uri)):
        if (m := DELTA_LOG_VERSION_FILE.match(info.base_name)) is None:
            continue
        if m.group(2) == "json":
            commits.append(int(m.group(1)))
        elif info.base_name.endswith(".parquet"):
            checkpoints.setdefault(int(m.group(1)), []).append(info.path)
    return sorted(commits), checkpoints


def _actions(table_uri: str, version: int) -> list[dict]:
    try:
        text = _read(f"{_log(table_uri)}/{version:020d}.json")
    except (OSError, FileNotFoundError):
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _checkpoint_column(table_uri: str, paths: list[str], column: str) -> list[dict]:
    """The non-null values of one action column (metaData, add) of a classic checkpoint."""
    fs, _ = filesystem(table_uri)
    found = []
    for path in paths:
        found += [v for v in pq.read_table(path, columns=[column], filesystem=fs).column(column).to_pylist() if v]
    return found


def table_columns(table_uri: str) -> list[dict] | None:
    """The table's columns as its newest metaData action declares them (name, type, metadata); None: no table."""
    commits, checkpoints = _commits_and_checkpoints(table_uri)
    base = max(checkpoints, default=-1)
    for version in reversed([v for v in commits if v > base][-MAX_COMMITS_READ:]):
        for action in _actions(table_uri, version):
            if "metaData" in action:
                return json.loads(action["metaData"]["schemaString"])["fields"]
    if base >= 0:
        for meta in _checkpoint_column(table_uri, checkpoints[base], "metaData"):
            return json.loads(meta["schemaString"])["fields"]
    return None


def type_name(dtype: object) -> str:
    """A Delta schema's type as Spark's simpleString names it (struct and array types shortened)."""
    if isinstance(dtype, str):
        return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}.get(dtype, dtype)
    kind = dtype.get("type") if isinstance(dtype, dict) else None
    if kind == "array":
        return f"array<{type_name(dtype['elementType'])}>"
    if kind == "map":
        return f"map<{type_name(dtype['keyType'])},{type_name(dtype['valueType'])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{type_name(f['type'])}" for f in dtype["fields"]) + ">"
    return str(kind)


def first_date(table_uri: str, column: str) -> date | None:
    """The least UTC date of `column` (a partition value, or the files' minimum statistics) over the table's
    live files; None when there is no table or no statistics say."""
    commits, checkpoints = _commits_and_checkpoints(table_uri)
    base = max(checkpoints, default=-1)
    added: dict[str, dict] = {}
    if base >= 0:
        added = {a["path"]: a for a in _checkpoint_column(table_uri, checkpoints[base], "add")}
    for version in (v for v in commits if v > base):
        for action in _actions(table_uri, version):
            if "add" in action:
                added[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                added.pop(action["remove"]["path"], None)
    days = [d for a in added.values() if (d := _file_first_date(a, column)) is not None]
    return min(days, default=None)


def _file_first_date(add: dict, column: str) -> date | None:
    """The least date of `column` one added file holds, from its partition value or its statistics."""
    values = add.get("partitionValues") or {}
    value = dict(values).get(column)      # a checkpoint's map column reads as (key, value) pairs
    if value is None and add.get("stats"):
        stats = add["stats"] if isinstance(add["stats"], dict) else json.loads(add["stats"])
        value = (stats.get("minValues") or {}).get(column)
    when = stat_time(value) if value else None
    return when.date() if isinstance(when, datetime) else when


def stat_time(value: object) -> datetime | date | None:
    """A time column's value as the log writes it (a date, or a timestamp in ISO text with its offset) as Python's,
    timestamps in UTC; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        if len(value) == 10:
            return date.fromisoformat(value)
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None
