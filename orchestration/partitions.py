"""Daily event-date partitions of the silver and gold assets, and which of them a stream's catch-up touched."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import dagster as dg
from pyspark.sql import SparkSession

from lakehouse.batch.compare import day_sql
from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.lake_files import children

# The first day a partition exists for; events before it can still be backfilled from the CLI.
FIRST_DAY = "2025-01-01"


def daily(first_day: str = FIRST_DAY) -> dg.DailyPartitionsDefinition:
    """One partition per UTC event date, today's included (a stream writes it while it is under way)."""
    return dg.DailyPartitionsDefinition(start_date=first_day, end_offset=1, timezone="UTC")


def is_partitioned(table: TableSpec) -> bool:
    """Silver and gold tables with an event date; dimensions (no event date) and bronze (the log) are not."""
    return table.layer in ("silver", "gold") and day_sql(table) is not None


def key_range(context: dg.AssetExecutionContext) -> tuple[date, date]:
    """The run's partition range as dates."""
    keys = context.partition_key_range
    return date.fromisoformat(keys.start), date.fromisoformat(keys.end)


def touched_days(spark: SparkSession, table: TableSpec, path: str, after_version: int | None) -> list[str]:
    """Event dates of the files the commits after `after_version` added, from the Delta log itself.

    A file's partition value (silver's event_date) or its min/max statistics of the table's first time
    column give its dates; a MERGE rewrites whole files, so a date counts as touched when a rewritten
    file holds rows of it.
    """
    start = -1 if after_version is None else after_version
    commits = [f for f in children(spark, f"{path.rstrip('/')}/_delta_log") if f.endswith(".json")]
    files = [f for f in commits if int(f.rsplit("/", 1)[-1].split(".")[0]) > start]
    if not files:
        return []
    days: set[str] = set()
    column = table.time_range[0] if table.time_range else None
    for line in spark.read.text(files).collect():
        action = json.loads(line[0])
        add = action.get("add")
        if not add or not add.get("dataChange", True):
            continue
        if "event_date" in (add.get("partitionValues") or {}):
            days.add(add["partitionValues"]["event_date"])
        elif column and add.get("stats"):
            stats = json.loads(add["stats"])
            low, high = (stats.get("minValues") or {}).get(column), (stats.get("maxValues") or {}).get(column)
            if low and high:
                days.update(_dates_between(low, high))
    return sorted(days)


def _dates_between(low: str, high: str) -> list[str]:
    first = datetime.fromisoformat(low.replace("Z", "+00:00")).astimezone(timezone.utc).date()
    last = datetime.fromisoformat(high.replace("Z", "+00:00")).astimezone(timezone.utc).date()
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
