"""Run SQL over the lake's tables by name (time travel included), list a table's versions, explain errors in one sentence."""

from __future__ import annotations

import re
from datetime import datetime
from numbers import Number
from typing import Any, Iterator, Mapping, Sequence

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from lakehouse.batch.catalog import VersionRange, existing_tables, register_tables, table_history, version_range
from lakehouse.schemas import tables as table_specs
from lakehouse.serving.connect import is_remote
from lakehouse.streaming.lake_files import has_delta_log


class SqlError(ValueError):
    """A query the user wrote cannot run; the message says why in one sentence."""


def _strip(name: str) -> str:
    return name.replace("`", "").strip()


def _known(tables: Sequence[str]) -> str:
    return ", ".join(tables) if tables else "none yet (run `lakehouse demo` or materialize the assets)"


def no_such_table(name: str, tables: Sequence[str]) -> str:
    return f"There is no table named {_strip(name)}; tables you can query: {_known(tables)}."


# Delta's errors for a version or a time a table does not have.
TIME_TRAVEL_ERRORS = ("DELTA_VERSION_NOT_FOUND", "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION",
                      "DELTA_TIMESTAMP_GREATER_THAN_COMMIT")


def _at(value: datetime) -> str:
    """A commit time (UTC) to the millisecond, as Delta stamps commits and TIMESTAMP AS OF reads it back."""
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]


def _span(r: VersionRange) -> str:
    return f"{r.earliest} ({_at(r.earliest_at)}) to {r.latest} ({_at(r.latest_at)}, UTC)"


def _explain_time_travel(condition: str, params: Mapping[str, str], versions: Mapping[str, VersionRange]) -> str:
    """One sentence naming the table and the versions it has, for a version or a time it does not have."""
    if condition == "DELTA_VERSION_NOT_FOUND":
        wanted = f"version {params.get('userVersion', '?')}"
        # The table whose range Delta reported, when the query travels in several.
        matching = {n: r for n, r in versions.items()
                    if (str(r.earliest), str(r.latest)) == (params.get("earliest"), params.get("latest"))}
        versions = matching or versions
    elif condition == "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION":
        wanted = f"version as of {params.get('userTimestamp', '?').removesuffix('.0')} (before its first commit)"
    else:
        wanted = f"version as of {params.get('providedTimestamp', '?').removesuffix('.0')} (after its latest commit)"
    if len(versions) == 1:
        [(name, r)] = versions.items()
        return f"{name} has no {wanted}; its versions go from {_span(r)}."
    if versions:
        spans = "; ".join(f"{name} from {_span(r)}" for name, r in versions.items())
        return f"One of {', '.join(versions)} has no {wanted}; their versions go: {spans}."
    if condition == "DELTA_VERSION_NOT_FOUND":
        return f"The table has no {wanted}; its versions go from {params.get('earliest')} to {params.get('latest')}."
    return f"The table has no {wanted}; `lakehouse history TABLE` lists its versions."


def explain_sql_error(
    exc: PySparkException, tables: Sequence[str], versions: Mapping[str, VersionRange] | None = None
) -> str:
    """One sentence for the errors people make most; the first line of Spark's message otherwise.

    `versions`: the version range of each table the query reads as of a version or a time, so that a
    version it does not have is explained with the versions it has.
    """
    condition = (exc.getCondition() or "") if hasattr(exc, "getCondition") else ""
    params = exc.getMessageParameters() or {}
    if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        return no_such_table(params.get("relationName", "?"), tables)
    if condition in TIME_TRAVEL_ERRORS:
        return _explain_time_travel(condition, params, versions or {})
    if condition.startswith("UNRESOLVED_COLUMN"):
        hint = f" Did you mean one of: {_strip(params['proposal'])}?" if params.get("proposal") else ""
        return f"There is no column named {_strip(params.get('objectName', '?'))}.{hint}"
    if condition == READ_ONLY:   # the server's guard: its message is the sentence, after the class Spark Connect names
        return str(exc).strip().splitlines()[0].split(READ_ONLY_CLASS, 1)[-1].strip()
    if condition.startswith("PARSE_SYNTAX_ERROR") or condition.startswith("PARSE_EMPTY_STATEMENT"):
        near = params.get("error")
        return f"The query has a syntax error{f' at or near {near}' if near else ''}."
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else condition
    if first.startswith("[") and "] " in first:
        first = first.split("] ", 1)[1]
    return first.split(" SQLSTATE")[0].rstrip(". ") + "."


# The condition of serving/jvm/ReadOnlyGuard.java's refusals, and the class a Spark Connect client's message names.
READ_ONLY, READ_ONLY_CLASS = "LAKEHOUSE_READ_ONLY", "(lakehouse.serving.ReadOnlyGuard$ReadOnlyViolation)"

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


def _parse(spark: SparkSession, query: str):
    """Spark's unresolved plan of the statement, or None if it does not parse."""
    try:
        return spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    except Exception:  # noqa: BLE001 - a syntax error: running it gives the user Spark's own explanation
        return None


def _nodes(plan, skip=lambda node: False) -> Iterator[Any]:
    """Every node of a plan (depth first); the children of a node `skip` accepts are not visited."""
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        yield node
        if not skip(node):
            children = node.children()
            nodes.extend(children.apply(i) for i in range(children.size()))


def _is_read_only(node) -> bool:
    return node.getClass().getSimpleName() in _READ_ONLY_COMMANDS


def refuse_writes(spark: SparkSession, query: str) -> None:
    """Raise SqlError if the statement would change anything; a query that cannot be parsed is left to Spark."""
    plan = _parse(spark, query)
    if plan is None:
        return
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    for node in _nodes(plan, skip=_is_read_only):
        name = node.getClass().getSimpleName()
        if name in _READ_ONLY_COMMANDS:
            continue
        if command.isInstance(node) or _WRITES.search(name):
            verb = query.split(None, 1)[0].upper()
            raise SqlError(
                f"lakehouse sql is read-only and this {verb} statement would change the lake; tables are written "
                "only by their flows, backfills and maintenance commands."
            )
    if _JVM_CALLS.search(plan.treeString()):
        raise SqlError("lakehouse sql does not run reflect or java_method: a query may only read the tables.")


def _time_travelled(spark: SparkSession, lake_root: str, query: str) -> dict[str, str]:
    """Name -> path of each table the query reads as of a version or a time (`name` or delta.`path`)."""
    plan = _parse(spark, query)
    found: dict[str, str] = {}
    for node in _nodes(plan) if plan is not None else ():
        if node.getClass().getSimpleName() != "RelationTimeTravel":
            continue
        relation = node.relation()
        if relation.getClass().getSimpleName() != "UnresolvedRelation":
            continue
        parts = relation.multipartIdentifier()
        parts = [parts.apply(i) for i in range(parts.size())]
        if len(parts) == 2 and parts[0].lower() == "delta":
            found[f"delta.`{parts[1]}`"] = parts[1]
        elif (spec := table_specs.BY_NAME.get(parts[-1])) is not None:
            found[spec.name] = spec.path(lake_root)
    return found


def _served_tables(spark: SparkSession) -> list[str]:
    """The lake's tables the server has registered by name, in the declared order."""
    names = {row[1] for row in spark.sql("SHOW TABLES").collect()}
    return [spec.name for spec in table_specs.ALL if spec.name in names]


def run_sql(spark: SparkSession, lake_root: str, query: str, limit: int = 100) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    """(columns, rows, truncated) of a query over the registered tables.

    In a Spark Connect session the server registers the tables and its guard refuses writes; in a session of
    this process both happen here.
    """
    remote = is_remote(spark)
    if not remote:
        refuse_writes(spark, query)
    tables = _served_tables(spark) if remote else register_tables(spark, lake_root)
    try:
        df = spark.sql(query)
        rows = df.limit(limit + 1).collect()
    except PySparkException as exc:
        versions = {}
        if (exc.getCondition() or "") in TIME_TRAVEL_ERRORS and not remote:
            versions = {name: version_range(spark, path) for name, path in _time_travelled(spark, lake_root, query).items()
                        if has_delta_log(spark, path)}
        raise SqlError(explain_sql_error(exc, tables, versions)) from None
    return df.columns, [tuple(r) for r in rows[:limit]], len(rows) > limit


def history(spark: SparkSession, lake_root: str, table: str, limit: int | None = None) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of a table's versions, newest first: when, which operation, what it wrote, user metadata."""
    existing = _served_tables(spark) if is_remote(spark) else [spec.name for spec in existing_tables(spark, lake_root)]
    if table not in existing:
        raise SqlError(no_such_table(table, existing))
    commits = table_history(spark, table_specs.BY_NAME[table].path(lake_root), limit)
    columns = ["version", "committed_at", "operation", "wrote"]
    rows = [(c.version, _at(c.committed_at), c.operation, c.changed()) for c in commits]
    if any(c.user_metadata for c in commits):
        columns.append("user_metadata")
        rows = [(*row, _shorten(c.user_metadata)) for row, c in zip(rows, commits)]
    return columns, rows


# Streams record their source positions as JSON in each commit's user metadata (streaming/positions.py): a
# line each would make the table unreadable. The whole text: lakehouse sql "DESCRIBE HISTORY <table>".
USER_METADATA_WIDTH = 80


def _shorten(text: str | None) -> str | None:
    return text if text is None or len(text) <= USER_METADATA_WIDTH else text[:USER_METADATA_WIDTH - 3] + "..."


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


def answer(spark, settings, request: dict[str, Any]) -> dict[str, Any]:
    """What `lakehouse sql` or `lakehouse history` prints for `request`, run in `spark`: text, or a user's error."""
    try:
        if request.get("kind") == "history":
            columns, rows = history(spark, settings.lake_root, request["table"], request.get("limit"))
            return {"text": format_table(columns, rows)}
        columns, rows, truncated = run_sql(spark, settings.lake_root, request["query"], int(request.get("limit", 100)))
    except SqlError as exc:
        return {"error": str(exc)}
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown: raise --limit' if truncated else ''})"
    return {"text": format_table(columns, rows) + "\n" + footer}
