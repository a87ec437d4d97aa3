"""Run SQL over the lake's tables by name, print results as a table, explain errors in one sentence."""

from __future__ import annotations

import re
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


# Commands that only read: describing and listing tables, explaining a plan, a Delta table's history.
_READ_ONLY_COMMANDS = {
    "DescribeRelation", "DescribeColumn", "DescribeNamespace", "DescribeFunction", "ShowTables", "ShowViews",
    "ShowColumns", "ShowFunctions", "ShowNamespaces", "ShowTableProperties", "ExplainCommand",
    "DescribeDeltaHistory", "DescribeDeltaDetailCommand",
}
# Statements that write without being a Spark `Command` (parsed statements resolved later).
_WRITES = re.compile(r"Insert|Restore|Clone|Convert|Merge|Delete|Update|Write|Drop|Create|Alter|Truncate|Vacuum|Optimize|Reorg")
# Functions that call arbitrary JVM methods: a query must not reach outside the tables.
_JVM_CALLS = re.compile(r"'(try_)?(reflect|java_method)\(", re.IGNORECASE)


def refuse_writes(spark: SparkSession, query: str) -> None:
    """Raise SqlError if the statement would change anything; a query that cannot be parsed is left to Spark."""
    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    except Exception:  # noqa: BLE001 - a syntax error: running it gives the user Spark's own explanation
        return
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        name = node.getClass().getSimpleName()
        if name in _READ_ONLY_COMMANDS:
            continue
        if command.isInstance(node) or _WRITES.search(name):
            verb = query.split(None, 1)[0].upper()
            raise SqlError(
                f"lakehouse sql is read-only and this {verb} statement would change the lake; tables are written "
                "only by their flows, backfills and maintenance commands."
            )
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    if _JVM_CALLS.search(plan.treeString()):
        raise SqlError("lakehouse sql does not run reflect or java_method: a query may only read the tables.")


def run_sql(spark: SparkSession, lake_root: str, query: str, limit: int = 100) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """(columns, rows, truncated) of a query over the registered tables."""
    refuse_writes(spark, query)
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
