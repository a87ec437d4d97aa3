"""Pure transforms of the sequence kinds (sliding counts, sessions, the interval join), the same in both lanes.

Each takes a batch's rows (and, for a stateful step, the rows of its table or state that the batch can touch)
and gives the table's rows; none reads or writes a table. They are exact whatever the micro-batch
boundaries are: a sliding count is recounted over every row of its look-back, and merging sessions is
associative.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

SESSION_START, SESSION_END = "session_start", "session_end"
LEFT, RIGHT = "l", "r"          # the join's two sides, as the declared output columns name them
SIDE = "side"


def sliding_count(rows: DataFrame, *, by: Sequence[str], time: str, window_micros: int, count: str,
                  flag: str | None = None, threshold: int | None = None) -> DataFrame:
    """Per row: how many rows of the same `by` fall in its look-back [time - window, time), flagged at `threshold`.

    A row at the same instant is not before it. Rows are counted over every row they are given.
    """
    t = F.unix_micros(time)
    look_back = Window.partitionBy(*by).orderBy(t).rangeBetween(-window_micros, -1)
    counted = rows.withColumn(count, F.count(F.lit(1)).over(look_back))
    if flag is None or threshold is None:
        return counted
    return counted.withColumn(flag, F.col(count) >= F.lit(threshold))


def session_intervals(rows: DataFrame, *, by: Sequence[str], time: str, counts: Mapping[str, str]) -> DataFrame:
    """Each row as a one-instant session interval, with 1 or 0 per counted condition (Spark SQL over the row)."""
    return rows.select(
        *by, F.col(time).alias(SESSION_START), F.col(time).alias(SESSION_END),
        *[F.when(F.expr(condition), 1).otherwise(0).cast("long").alias(name) for name, condition in counts.items()],
    )


def merge_sessions(intervals: DataFrame, *, by: Sequence[str], gap_micros: int, counts: Sequence[str]) -> DataFrame:
    """Intervals of the same `by` merged wherever the gap between them is under `gap`, their counts summed.

    Intervals are single events or sessions already in the table; merging is associative, so the same
    sessions result in whatever micro-batches the events came.
    """
    start, end = F.unix_micros(SESSION_START), F.unix_micros(SESSION_END)
    ordered = Window.partitionBy(*by).orderBy(start, end)
    grouped = (
        intervals.withColumn("_reach", F.max(end).over(ordered.rowsBetween(Window.unboundedPreceding, -1)))
        .withColumn("_new", F.coalesce(start - F.col("_reach") >= F.lit(gap_micros), F.lit(True)).cast("int"))
        .withColumn("_session", F.sum("_new").over(ordered.rowsBetween(Window.unboundedPreceding, 0)))
    )
    return grouped.groupBy(*by, "_session").agg(
        F.min(SESSION_START).alias(SESSION_START), F.max(SESSION_END).alias(SESSION_END),
        *[F.sum(c).alias(c) for c in counts],
    ).drop("_session")


def join_sides(left: DataFrame, right: DataFrame, *, on: Sequence[str], lineage: Sequence[str]) -> DataFrame:
    """Two sources as one stream under one watermark: the side, the join keys, each row's lineage, and the whole
    row under `l` or `r` (the other side NULL)."""
    def side(df: DataFrame, name: str, other: StructType) -> DataFrame:
        whole = F.struct(*[F.col(c) for c in df.columns])
        empty = F.lit(None).cast(other)
        pair = (whole.alias(LEFT), empty.alias(RIGHT)) if name == LEFT else (empty.alias(LEFT), whole.alias(RIGHT))
        return df.select(F.lit(name).alias(SIDE), *[F.col(k).alias(f"_on_{k}") for k in on], *lineage, *pair)
    return side(left, LEFT, right.schema).unionByName(side(right, RIGHT, left.schema))


def joined(pairs: DataFrame, columns: Mapping[str, str], outcome: str) -> DataFrame:
    """The declared output columns (Spark SQL over `l` and `r`) of joined or unmatched rows, with their outcome."""
    return pairs.select(*[F.expr(sql).alias(name) for name, sql in columns.items()], F.lit(outcome).alias("outcome"))
