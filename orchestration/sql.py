"""Run SQL over the lake's tables by name, print results as a table, explain errors in one sentence."""

from __future__ import annotations

from numbers import Number
from typing import Any, Sequence

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from batch.catalog import register_tables


class SqlError(ValueError):
    """A query the user wrote cannot run; the message says why in one sentence."""


def _strip(name: str) -> str:
    return name.replace("`", "").strip()


def explain_sql_error(exc: PySparkException, tables: Sequence[str]) -> str:
    """One sentence for the errors people make most; the first line of Spark's message otherwise."""
    condition = (exc.getCondition() or "") if hasattr(exc, "getCondition") else ""
    params = exc.getMessageParameters() or {}
    known = ", ".join(tables) if tables else "none yet (run `lakehouse demo` or materialize the assets)"
    if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        return f"There is no table named {_strip(params.get('relationName', '?'))}; tables you can query: {known}."
    if condition.startswith("UNRESOLVED_COLUMN"):
        hint = f" Did you mean one of: {_strip(params['proposal'])}?" if params.get("proposal") else ""
        return f"There is no column named {_strip(params.get('objectName', '?'))}.{hint}"
    if condition.startswith("PARSE_SYNTAX_ERROR") or condition.startswith("PARSE_EMPTY_STATEMENT"):
        near = params.get("error")
        return f"The query has a syntax error{f' at or near {near}' if near else ''}."
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else condition
    if first.startswith("[") and "] " in first:
        first = first.split("] ", 1)[1]
    return first.split(" SQLSTATE")[0].rstrip(". ") + "."


def run_sql(spark: SparkSession, lake_root: str, query: str, limit: int = 100) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """(columns, rows, truncated) of a query over the registered tables."""
    tables = register_tables(spark, lake_root)
    try:
        df = spark.sql(query)
        rows = df.limit(limit + 1).collect()
    except PySparkException as exc:
        raise SqlError(explain_sql_error(exc, tables)) from None
    return df.columns, [tuple(r) for r in rows[:limit]], len(rows) > limit


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text grid, numbers right-aligned."""
    cells = [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        bool(rows) and all(r[i] is None or (isinstance(r[i], Number) and not isinstance(r[i], bool)) for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        return " | ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths)))

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(list(columns)), rule, *[line(r) for r in cells]])
