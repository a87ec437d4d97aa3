"""Expectation suites as code: one per silver and gold table, named by the table's declaration (`TableSpec.suite`).

An expectation is a Great Expectations expectation (its type and arguments are the definition, and GX
renders it in Data Docs) with a severity:

- warn: the result is recorded and the rows pass;
- drop: the failing rows go to quarantine with the expectation's name as the reason (only on tables
  whose rows carry Kafka coordinates, i.e. silver, so that nothing is lost);
- fail: the table's query stops, before anything of the batch is written, with one sentence naming the
  expectation and the batch's Kafka offsets.

A declared source gets a silver suite from its declaration (keys, event time, coordinates); a pipeline
adds its own value rules (`Pipeline.silver_rules`) and its gold tables' suites (`Pipeline.gold_suites`). Rules that span tables or whole tables (referential integrity,
freshness, the accounting identity) are table checks (quality/table_checks.py), not batch expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Literal

from lakehouse.schemas.pipeline import Pipeline, active_pipeline
from lakehouse.schemas.sources import Source
from lakehouse.schemas.tables import KAFKA_COORDINATES, TableSpec

if TYPE_CHECKING:
    import great_expectations.expectations as gxe


def _gxe():
    """GX's expectations module, imported when a suite is built: importing GX takes seconds, and Dagster's
    definitions (every run's process, the UI's code server) only need to know which tables have a suite."""
    import great_expectations.expectations as gxe

    return gxe

Severity = Literal["warn", "drop", "fail"]
SEVERITIES: tuple[Severity, ...] = ("warn", "drop", "fail")
GX_SEVERITY = {"fail": "critical", "drop": "warning", "warn": "info"}
SEVERITY_DOCS = {
    "warn": "recorded, the rows pass",
    "drop": "failing rows go to quarantine with this expectation's name",
    "fail": "the table's query stops before writing the batch",
}

# The GX expectation types the per-batch evaluator computes, and which of them judge single rows (only
# those can drop rows). Anything else is refused when a suite is built, not when a batch arrives.
ROW_TYPES = {
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_between", "expect_column_values_to_be_in_set",
    "expect_column_values_to_match_regex", "expect_column_pair_values_a_to_be_greater_than_b",
}
SET_TYPES = {"expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique"}


class BadSuite(ValueError):
    """A suite that cannot be checked as declared (unknown table, column, type or severity)."""


@dataclass(frozen=True)
class Expectation:
    """One GX expectation and what happens to a batch that breaks it."""

    gx: gxe.Expectation
    severity: Severity = "warn"

    def __post_init__(self) -> None:
        # GX's own severity field carries ours, so Data Docs show it beside each expectation.
        if self.severity in GX_SEVERITY:
            self.gx.severity = GX_SEVERITY[self.severity]
        self.gx.notes = f"severity here: {self.severity} ({SEVERITY_DOCS.get(self.severity, '')})"

    @property
    def type(self) -> str:
        return self.gx.expectation_type

    @property
    def columns(self) -> tuple[str, ...]:
        kw = self.gx.configuration.kwargs
        return tuple(kw.get("column_list") or [c for c in (kw.get("column"), kw.get("column_A"), kw.get("column_B")) if c])

    @property
    def name(self) -> str:
        """`expect_column_values_to_bebetween(total_cents)`: the reason a dropped row carries in quarantine."""
        return f"{self.type}({', '.join(self.columns)})"


def warn(e: gxe.Expectation) -> Expectation:
    return Expectation(e, "warn")


def drop(e: gxe.Expectation) -> Expectation:
    return Expectation(e, "drop")


def fail(e: gxe.Expectation) -> Expectation:
    return Expectation(e, "fail")


@dataclass(frozen=True)
class Suite:
    """A table's expectations."""

    name: str
    table: str
    expectations: tuple[Expectation, ...] = field(default_factory=tuple)
    row_level: bool = True     # rows carry Kafka coordinates: drop severity is allowed

    def __post_init__(self) -> None:
        for e in self.expectations:
            if e.severity not in SEVERITIES:
                raise BadSuite(f"suite {self.name}: {e.name} has severity {e.severity!r}; use one of {SEVERITIES}.")
            if e.type not in ROW_TYPES | SET_TYPES:
                raise BadSuite(f"suite {self.name}: {e.type} is not checked per batch; use one of "
                               f"{', '.join(sorted(ROW_TYPES | SET_TYPES))}.")
            condition = e.gx.configuration.kwargs.get("row_condition")
            if condition and not (isinstance(condition, str) or "pass_through_filter" in condition):
                raise BadSuite(f"suite {self.name}: {e.name} has a row_condition that is not Spark SQL; give it as "
                               "row_condition='...' with condition_parser='spark'.")
            if e.severity == "drop" and (e.type not in ROW_TYPES or not self.row_level):
                raise BadSuite(f"suite {self.name}: {e.name} cannot drop rows (only a rule about single rows of a "
                               "table with Kafka coordinates can); make it warn or fail.")

    def of(self, *severities: Severity) -> tuple[Expectation, ...]:
        return tuple(e for e in self.expectations if e.severity in severities)


def not_null(*columns: str, severity: Severity = "fail") -> list[Expectation]:
    gxe = _gxe()
    return [Expectation(gxe.ExpectColumnValuesToNotBeNull(column=c), severity) for c in columns]


def unique(*columns: str, severity: Severity = "fail") -> Expectation:
    gxe = _gxe()
    if len(columns) == 1:
        return Expectation(gxe.ExpectColumnValuesToBeUnique(column=columns[0]), severity)
    return Expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(columns)), severity)


def in_set(column: str, values: Iterable[str], severity: Severity = "warn") -> Expectation:
    return Expectation(_gxe().ExpectColumnValuesToBeInSet(column=column, value_set=list(values)), severity)


def between(column: str, low: int | None, high: int | None = None, severity: Severity = "warn", **kw) -> Expectation:
    return Expectation(_gxe().ExpectColumnValuesToBeBetween(column=column, min_value=low, max_value=high, **kw), severity)


def silver_suite(source: Source, extra: Iterable[Expectation] = ()) -> Suite:
    """What every silver table promises: an event id, unique within the batch; its event time; its Kafka coordinates."""
    table = source.silver_table
    if source.changelog is not None:     # a database table's current state: one row per key
        return Suite(table.suite or table.name, table.name, (
            *not_null(source.key, "_order", *KAFKA_COORDINATES), unique(source.key), *extra), row_level=False)
    return Suite(table.suite or table.name, table.name, (
        *not_null("event_id", source.event_time, *KAFKA_COORDINATES),
        unique("event_id"),
        *extra,
    ))


def dimension_suite(source: Source, extra: Iterable[Expectation] = ()) -> Suite:
    """A dimension's versions: key and validity start present, one row per (key, valid_from, event_id) in a batch."""
    table = source.dimension_table
    assert table is not None and source.dimension is not None
    return Suite(table.suite or table.name, table.name, (
        *not_null(*table.keys),
        unique(*table.keys),
        *extra,
    ), row_level=False)


def gold_suite(table: TableSpec, *extra: Expectation, keys_not_null: bool = True) -> Suite:
    """A gold table's rows in a batch: keys present and unique (MERGE needs that too), plus its value rules."""
    return Suite(table.suite or table.name, table.name, (
        *(not_null(*table.keys) if keys_not_null else []),
        unique(*table.keys),
        *extra,
    ), row_level=False)


def silver_rules(pipeline: Pipeline | None = None) -> dict[str, list[Expectation]]:
    """The pipeline's own silver value rules per entity, built (and GX imported) when first asked for, then kept:
    a test may extend them."""
    pipeline = pipeline or active_pipeline()
    if pipeline.name not in _SILVER_RULES:
        _SILVER_RULES[pipeline.name] = {k: list(v) for k, v in pipeline.silver_rules().items()}
    return _SILVER_RULES[pipeline.name]


_SILVER_RULES: dict[str, dict[str, list[Expectation]]] = {}


def suite_tables(declared: Iterable[Source] = (), pipeline: Pipeline | None = None) -> set[str]:
    """The tables that have a suite, without building any (that would import GX)."""
    pipeline = pipeline or active_pipeline()
    declared = tuple(declared) or pipeline.sources
    return ({s.silver_table.name for s in declared} | {s.dimension_table.name for s in declared if s.dimension}
            | {gold.name for gold in pipeline.gold})


def build_suites(declared: Iterable[Source] = (), pipeline: Pipeline | None = None) -> dict[str, Suite]:
    """Every suite by name (a table's `suite`, else its own name): each declared source's silver and dimension
    suites, then gold's."""
    pipeline = pipeline or active_pipeline()
    declared = tuple(declared) or pipeline.sources
    rules = silver_rules(pipeline)
    suites: list[Suite] = []
    for source in declared:
        suites.append(silver_suite(source, rules.get(source.entity, ()) if source in pipeline.sources else ()))
        if source.dimension is not None:
            suites.append(dimension_suite(source))
    suites += [gold_suite(gold.spec, *gold.expectations(), keys_not_null=gold.keys_not_null) for gold in pipeline.gold]
    return {s.name: s for s in suites}
