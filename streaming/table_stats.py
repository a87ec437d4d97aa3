"""A table's row count, the range of its time columns and its rows by value, from its files' statistics.

Counting a table's rows or its rows by reason is a Spark job over every file (planning, code generation and
a task per file: 0.2-1 s each on 2 cores, and a Dagster materialization asked it of every table it wrote).
Delta records each file's row count and its columns' least and greatest values when it writes the file, and
its checksum file `<version>.crc` lists every live file with those statistics when the table has few files.
These functions answer from it, exactly or not at all: None sends the caller to the Spark job.
"""

from __future__ import annotations

import json
from datetime import date, datetime

from pyspark.sql import SparkSession

from lakehouse.streaming.delta_files import stat_time
from lakehouse.streaming.delta_log import checksum, table_version

# Delta keeps only a prefix of a string in its statistics (dataSkippingStringPrefixLength, 32 by default): a
# value that long may stand for several, so counts by value take only shorter ones.
STRING_PREFIX = 32


def file_stats(spark: SparkSession, path: str, version: int | None = None) -> list[dict] | None:
    """Each live file's statistics (numRecords, minValues, maxValues, nullCount) at `version` (default the newest),
    from its checksum file; None when there is no table, or that file does not list them all, or a file's are
    missing or loose (deletion vectors)."""
    version = table_version(spark, path) if version is None else version
    crc = None if version is None else checksum(spark, path, version)
    files = (crc or {}).get("allFiles")
    if files is None or len(files) != crc.get("numFiles"):
        return None
    found = []
    for add in files:
        stats = json.loads(add["stats"]) if add.get("stats") else None
        if add.get("deletionVector") or not stats or "numRecords" not in stats or stats.get("tightBounds") is False:
            return None
        found.append(stats)
    return found


def row_count(stats: list[dict]) -> int:
    """The table's rows."""
    return sum(int(s["numRecords"]) for s in stats)


def time_range(stats: list[dict], first: str, last: str) -> tuple[datetime | date | None, datetime | date | None] | None:
    """The least of `first` and the greatest of `last` over the table's rows ((None, None) when all are null);
    None when a file holding values of either has no statistics of it (a column past the indexed ones)."""
    lows, highs = [], []
    for s in stats:
        for column, bound, into in ((first, "minValues", lows), (last, "maxValues", highs)):
            value = (s.get(bound) or {}).get(column)
            if value is None:
                if int((s.get("nullCount") or {}).get(column, -1)) != int(s["numRecords"]):
                    return None
                continue
            if (when := stat_time(value)) is None:
                return None
            into.append(when)
    return min(lows, default=None), max(highs, default=None)


def counts_by(stats: list[dict], columns: tuple[str, ...]) -> dict[tuple, int] | None:
    """Rows by the values of `columns`; None unless every file holds one value of each (as a writer's batch of
    one flow does, until compaction merges files), short enough to be kept whole."""
    counts: dict[tuple, int] = {}
    for s in stats:
        rows = int(s["numRecords"])
        if rows == 0:
            continue
        key = []
        for column in columns:
            low, high = (s.get("minValues") or {}).get(column), (s.get("maxValues") or {}).get(column)
            if int((s.get("nullCount") or {}).get(column, -1)) == rows:
                key.append(None)
            elif low is None or low != high or int((s.get("nullCount") or {}).get(column, -1)) != 0 \
                    or (isinstance(low, str) and len(low) >= STRING_PREFIX):
                return None
            else:
                key.append(low)
        counts[tuple(key)] = counts.get(tuple(key), 0) + rows
    return counts

