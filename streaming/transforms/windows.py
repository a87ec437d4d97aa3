"""Event-time windows declared as aggregates: the partial results of one batch, in columns that merge exactly."""

from __future__ import annotations

from typing import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.schemas.gold import Windowed, resolve


def partial_columns(column: str, function: str) -> tuple[str, ...]:
    """The stored columns behind a final one: itself, or for an average its hidden sum and count."""
    return (f"_{column}_sum", f"_{column}_count") if function == "avg" else (column,)


def window_partials(rows: DataFrame, kind: Windowed, params: Mapping[str, object]) -> DataFrame:
    """Per window (tumbling, or hopping every `slide`) and group: each aggregate's partial result over `rows`.

    Works on a streaming DataFrame as on a static one. An average is computed as its sum and count (kept in
    hidden columns, so that later batches can add to them) and the final column divides them.
    """
    size, slide = resolve(kind.size, params), resolve(kind.slide, params)
    window = F.window(kind.time, size, slide) if slide else F.window(kind.time, size)
    aggs: list[Column] = []
    finals: list[Column] = []
    for column, agg in kind.aggregates.items():
        value = F.expr(agg.expression)
        if agg.function == "count":
            aggs.append(F.count(F.lit(1)).alias(column))
        elif agg.function == "count_if":
            aggs.append(F.count(F.when(value, 1)).alias(column))
        elif agg.function in ("sum", "min", "max"):
            aggs.append(getattr(F, agg.function)(value).alias(column))
        else:  # avg
            total, n = partial_columns(column, "avg")
            aggs += [F.sum(value).alias(total), F.count(value).alias(n)]
        finals += [F.col(c) for c in partial_columns(column, agg.function)]
        if agg.function == "avg":
            finals.append(average(F.col(total), F.col(n)).alias(column))
    grouped = rows.groupBy(window.alias("window"), *kind.by).agg(*aggs)
    return grouped.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                          *kind.by, *finals)


def average(total: Column, n: Column) -> Column:
    """sum / count as a double; NULL when no value was counted."""
    return (total.cast("double") / F.when(n > 0, n)).cast("double")


def merge_expressions(kind: Windowed) -> dict[str, str]:
    """How each stored column of the table (`t`) takes a batch's partial (`s`), in MERGE's SET syntax.

    Counts and sums add (a sum whose one side is NULL keeps the other), minima and maxima take the least and
    greatest (which skip NULLs), an average adds its sum and count and divides them again.
    """
    def add(c: str) -> str:
        return f"coalesce(t.`{c}` + s.`{c}`, t.`{c}`, s.`{c}`)"

    found = {"window_end": "s.`window_end`"}
    for column, agg in kind.aggregates.items():
        if agg.function in ("count", "count_if", "sum"):
            found[column] = add(column)
        elif agg.function == "min":
            found[column] = f"least(t.`{column}`, s.`{column}`)"
        elif agg.function == "max":
            found[column] = f"greatest(t.`{column}`, s.`{column}`)"
        else:
            total, n = partial_columns(column, "avg")
            found[total], found[n] = add(total), f"t.`{n}` + s.`{n}`"
            found[column] = (f"CAST(CAST({add(total)} AS DOUBLE) / CASE WHEN t.`{n}` + s.`{n}` > 0 "
                             f"THEN t.`{n}` + s.`{n}` END AS DOUBLE)")
    return found


def windowed_rows(gold, rows: DataFrame, params: Mapping[str, object] | None = None, **dims: DataFrame) -> DataFrame:
    """A windowed gold table's rows over bounded input (the whole of it at once): the declared transform, then the
    windows' aggregates, which over all rows are the final figures. What the barest jobs and the tests compute."""
    if params is None:
        from lakehouse.schemas.pipeline import active_pipeline

        params = active_pipeline().param_values()
    if gold.transform is not None:
        rows = gold.transform(rows, **dims)
    return window_partials(rows, gold.kind, params)
