"""Two versions of one table compared row by row on its keys, and the daily partitions a row belongs to."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.schemas.tables import TableSpec

# Processing-time columns: a fresh write stamps them anew, so they never take part in a comparison.
VOLATILE = ("quarantined_at", "recorded_at", "reconciled_at", "reconciled_by")


def day_of(table: TableSpec) -> Column | None:
    """The event date a row belongs to (its daily partition); None for a table without event time (dimensions)."""
    if "event_date" in table.partition_by:
        return F.col("event_date")
    if table.time_range is not None:
        first, last = table.time_range
        return F.to_date(F.coalesce(F.col(first), F.col(last)))
    return None


def day_sql(table: TableSpec) -> str | None:
    """`day_of` as SQL text, for Delta's replaceWhere."""
    if "event_date" in table.partition_by:
        return "event_date"
    if table.time_range is not None:
        first, last = table.time_range
        return f"to_date(coalesce(`{first}`, `{last}`))"
    return None


def in_days(df: DataFrame, table: TableSpec, days: tuple[date, date] | None) -> DataFrame:
    """The rows of `df` whose event date is within `days` (inclusive); all rows when there is no range or no date."""
    day = day_of(table)
    if days is None or day is None:
        return df
    return df.where(day.between(F.lit(days[0]), F.lit(days[1])))


def days_predicate(table: TableSpec, days: tuple[date, date]) -> str | None:
    """The replaceWhere predicate for `days`, or None when the table has no event date (replace it whole)."""
    day = day_sql(table)
    return None if day is None else f"{day} >= DATE'{days[0].isoformat()}' AND {day} <= DATE'{days[1].isoformat()}'"


@dataclass
class TableDiff:
    """How a table (the stream's) differs from another version of it (a batch recomputation), row by row."""

    table: str
    stream_rows: int = 0
    batch_rows: int = 0
    only_stream: int = 0          # keys the stream has and the batch does not
    only_batch: int = 0           # keys the batch has and the stream does not
    changed: int = 0              # same key, some value differs
    duplicate_keys: int = 0       # keys that occur more than once on the stream's side
    samples: list[dict[str, Any]] = field(default_factory=list)   # the differing rows, up to a limit

    @property
    def differences(self) -> int:
        return self.only_stream + self.only_batch + self.changed + self.duplicate_keys


def _comparable(df: DataFrame, columns: list[str]) -> list[Column]:
    # Maps and variants have no equality in Spark; their JSON text does.
    out = []
    for name in columns:
        kind = df.schema[name].dataType.simpleString()
        out.append(F.to_json(F.col(name)).alias(name) if ("map<" in kind or kind == "variant") else F.col(name))
    return out


def diff_frame(stream: DataFrame, batch: DataFrame, keys: tuple[str, ...], ignore: tuple[str, ...] = VOLATILE) -> DataFrame:
    """One row per differing key: the key, `kind` (only_stream, only_batch, changed), both rows as JSON, the columns that differ."""
    columns = [c for c in stream.columns if c in batch.columns and c not in ignore]
    values = [c for c in columns if c not in keys]
    s = stream.select(*_comparable(stream, columns))
    b = batch.select(*_comparable(batch, columns))
    # A present row's struct is never null (it holds a constant), so a null struct means "no row on this side".
    s = s.select(*[F.col(k).alias(f"_s_{k}") for k in keys], F.struct(F.lit(1).alias("_row"), *values).alias("_s"))
    b = b.select(*[F.col(k).alias(f"_b_{k}") for k in keys], F.struct(F.lit(1).alias("_row"), *values).alias("_b"))
    on = [F.col(f"_s_{k}").eqNullSafe(F.col(f"_b_{k}")) for k in keys]
    joined = s.join(b, on, "full_outer")
    kind = (F.when(F.col("_s").isNull(), "only_batch").when(F.col("_b").isNull(), "only_stream")
            .when(~F.col("_s").eqNullSafe(F.col("_b")), "changed"))
    differing = F.filter(
        F.array(*[F.when(~F.col(f"_s.{c}").eqNullSafe(F.col(f"_b.{c}")), F.lit(c)) for c in values] or [F.lit(None)]),
        lambda x: x.isNotNull(),
    )
    return joined.select(
        *[F.coalesce(F.col(f"_s_{k}"), F.col(f"_b_{k}")).alias(k) for k in keys],
        kind.alias("kind"),
        F.col("_s").isNotNull().alias("_in_stream"),
        F.col("_b").isNotNull().alias("_in_batch"),
        F.to_json(F.col("_s").dropFields("_row")).alias("stream"),
        F.to_json(F.col("_b").dropFields("_row")).alias("batch"),
        F.when(kind == "changed", differing).alias("columns"),
    )


def diff_tables(stream: DataFrame | None, batch: DataFrame | None, table: TableSpec, *, limit: int = 20,
                ignore: tuple[str, ...] = VOLATILE) -> tuple[TableDiff, DataFrame | None]:
    """Compare two versions of `table` on its keys; returns the counts with sample rows, and all differing rows."""
    result = TableDiff(table.name)
    some = stream if stream is not None else batch
    if some is None:
        return result, None
    spark, schema = some.sparkSession, some.schema
    stream = stream if stream is not None else spark.createDataFrame([], schema)
    batch = batch if batch is not None else spark.createDataFrame([], schema)
    keys = table.keys
    # Not cached: Spark's cache would stand in for later reads of the live table, whose streams keep writing it.
    joined = diff_frame(stream, batch, keys, ignore)
    # One pass gives the row counts of both sides and the differences by kind.
    totals = joined.agg(
        F.count(F.when(F.col("_in_stream"), 1)).alias("stream"), F.count(F.when(F.col("_in_batch"), 1)).alias("batch"),
        *[F.count(F.when(F.col("kind") == k, 1)).alias(k) for k in ("only_stream", "only_batch", "changed")],
    ).first()
    result.stream_rows, result.batch_rows = totals["stream"], totals["batch"]
    result.only_stream, result.only_batch, result.changed = totals["only_stream"], totals["only_batch"], totals["changed"]
    result.duplicate_keys = stream.groupBy(*keys).count().where(F.col("count") > 1).count()
    diffs = joined.where(F.col("kind").isNotNull()).drop("_in_stream", "_in_batch")
    if result.differences and limit:
        for row in diffs.orderBy(*keys).limit(limit).collect():
            result.samples.append({
                "key": {k: plain(row[k]) for k in keys}, "kind": row["kind"],
                "stream": json.loads(row["stream"]) if row["stream"] else None,
                "batch": json.loads(row["batch"]) if row["batch"] else None,
                "columns": list(row["columns"] or []),
            })
    return result, diffs


def plain(value: Any) -> Any:
    """A value as JSON holds it (dates and times as ISO-8601 text)."""
    return value.isoformat() if hasattr(value, "isoformat") else value
