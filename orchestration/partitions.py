"""Daily event-date partitions of the silver and gold assets, and which of them a stream's catch-up touched."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import dagster as dg
from pyspark.sql import SparkSession

from lakehouse.batch.compare import day_sql
from lakehouse.schemas import sources
from lakehouse.streaming.delta_files import first_date, stat_time
from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.delta_log import commit_actions
from lakehouse.streaming.lake_files import DELTA_LOG_VERSION_FILE, children

def daily(first_day: str | None = None) -> dg.DailyPartitionsDefinition:
    """One partition per UTC event date from `first_day` (default today's), today's included (a stream writes it
    while it is under way)."""
    return dg.DailyPartitionsDefinition(start_date=first_day or today(), end_offset=1, timezone="UTC")


def today() -> str:
    """Today's UTC date."""
    return datetime.now(timezone.utc).date().isoformat()


def first_lake_day(lake_root: str | None, declared: tuple | None = None) -> str:
    """The first UTC event date a silver table of the lake holds, from the Delta logs without Spark; today's when
    the lake holds none or cannot be read.

    Partitions are fixed when the definitions load, so they start where the lake's data does: a two-year axis
    with one dot on it tells a person nothing. A day written before it later shows after a reload.
    """
    if lake_root is None:
        return today()
    declared = sources.SOURCES if declared is None else declared
    days = []
    for source in declared:
        try:
            days.append(first_date(source.silver_table.path(lake_root), "event_date"))
        except Exception:  # noqa: BLE001 - an unreadable lake must not keep the code location from loading
            continue
    found = min((d for d in days if d is not None), default=None)
    return min(found.isoformat(), today()) if found else today()


def within_partitions(days: list[str]) -> list[str]:
    """The days that are or will be partitions: none after today's (an event time ahead of the clock)."""
    last = today()
    return [d for d in days if d <= last]


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
    names = (f.rsplit("/", 1)[-1] for f in children(spark, f"{path.rstrip('/')}/_delta_log"))
    versions = sorted(v for name in names if (m := DELTA_LOG_VERSION_FILE.match(name)) and m.group(2) == "json"
                      and (v := int(m.group(1))) > start)
    # Each commit file read through Hadoop's FileSystem: a Spark job over a few small files cost more than the reads.
    actions = [a for v in versions for a in commit_actions(spark, path, v) or ()]
    days: set[str] = set()
    column = table.time_range[0] if table.time_range else None
    for action in actions:
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
    first, last = (d.date() if isinstance(d := stat_time(v), datetime) else d for v in (low, high))
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
