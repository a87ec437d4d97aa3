"""A suite's expectations computed over one batch in one Spark aggregation, with GX's semantics.

Great Expectations' own Spark engine resolves some 45 metrics in as many small Spark jobs for a suite
of six expectations (about 2.5 s on a 2,000-row batch on 2 cores, longer than the batch's own write).
Here every rule of a suite is a few counts in a single aggregation (a uniqueness rule compares its rows
with their distinct values, and groups them only when some repeat), which a writer can fold into an
aggregation it runs anyway, so validation stays a small share of a micro-batch (bench/quality.py measures it).
The expectations stay GX's: their type and arguments define them, GX renders them in Data Docs, and
tests/integration/test_quality.py checks that these figures equal GX's own validation of the same rows.

GX's conventions are kept: a value rule ignores nulls (`unexpected_percent` is over the non-null
values), a `row_condition` narrows the rows a rule looks at, and `mostly` lets a share of rows fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.quality.suites import ROW_TYPES, Expectation, Suite

SAMPLES = 5   # failing values kept per expectation, as GX's partial_unexpected_list


@dataclass
class Outcome:
    """One expectation over one batch: how many rows it looked at, how many broke it, and a few of them."""

    expectation: Expectation
    element_count: int = 0
    unexpected_count: int = 0
    missing_count: int = 0
    samples: list[Any] = field(default_factory=list)
    dropped: int = 0            # rows a drop-severity rule sent to quarantine before the batch was written

    @property
    def unexpected_percent(self) -> float:
        considered = self.element_count - self.missing_count
        return 100.0 * self.unexpected_count / considered if considered else 0.0

    @property
    def success(self) -> bool:
        mostly = self.expectation.gx.configuration.kwargs.get("mostly", 1.0)
        considered = self.element_count - self.missing_count
        if not considered:
            return True
        return self.unexpected_count <= considered * (1.0 - mostly) + 1e-9

    @property
    def passed(self) -> bool:
        """What the results say: met, and no row dropped for it."""
        return self.success and not self.dropped

    @property
    def observed(self) -> str:
        """What a person reads in the results table: `3 of 120 rows (2.5%)`, with a few of the values."""
        text = f"{self.unexpected_count} of {self.element_count - self.missing_count} rows ({self.unexpected_percent:.2f}%)"
        if self.dropped:
            text += f"; {self.dropped} dropped to quarantine"
        return text + (f"; e.g. {', '.join(map(repr, self.samples))}" if self.samples else "")


def _kwargs(e: Expectation) -> dict[str, Any]:
    return dict(e.gx.configuration.kwargs)


def row_condition(e: Expectation) -> str | None:
    """A rule's row_condition as Spark SQL (GX keeps a Spark condition as a pass-through filter)."""
    condition = _kwargs(e).get("row_condition")
    if isinstance(condition, dict):
        condition = condition.get("pass_through_filter")
    return condition or None


def scope(e: Expectation) -> Column:
    """The rows a rule judges: its row_condition, if any."""
    condition = row_condition(e)
    return F.expr(condition) if condition else F.lit(True)


def present(e: Expectation) -> Column:
    """Rows the rule has a value for: every row for not-null, else rows whose columns are not null (GX skips nulls)."""
    if e.type == "expect_column_values_to_not_be_null":
        return F.lit(True)
    return reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in e.columns])


def any_value(columns: list[str]) -> Column:
    """Rows a uniqueness rule judges: GX ignores a row only when all its columns are null."""
    return reduce(lambda a, b: a | b, [F.col(c).isNotNull() for c in columns])


def passes(e: Expectation) -> Column:
    """A row rule as a Spark condition on one row (true: the row meets the expectation)."""
    kw, t = _kwargs(e), e.type
    if t == "expect_column_values_to_not_be_null":
        return F.col(kw["column"]).isNotNull()
    if t == "expect_column_values_to_be_between":
        value, ok = F.col(kw["column"]), F.lit(True)
        if kw.get("min_value") is not None:
            ok = ok & ((value > kw["min_value"]) if kw.get("strict_min") else (value >= kw["min_value"]))
        if kw.get("max_value") is not None:
            ok = ok & ((value < kw["max_value"]) if kw.get("strict_max") else (value <= kw["max_value"]))
        return ok
    if t == "expect_column_values_to_be_in_set":
        return F.col(kw["column"]).isin(list(kw["value_set"]))
    if t == "expect_column_values_to_match_regex":
        return F.col(kw["column"]).rlike(kw["regex"])
    if t == "expect_column_pair_values_a_to_be_greater_than_b":
        a, b = F.col(kw["column_A"]), F.col(kw["column_B"])
        return a >= b if kw.get("or_equal") else a > b
    raise ValueError(f"{t} is not a row rule")


def breaks(e: Expectation) -> Column:
    """Rows the rule judges, has a value for, and that fail it."""
    return scope(e) & present(e) & ~F.coalesce(passes(e), F.lit(False))


def samples(rows: DataFrame, columns: tuple[str, ...] | list[str]) -> list[Any]:
    """A few values of `columns` (one column: the values; several: dicts), as GX's partial_unexpected_list."""
    return [r[0] if len(columns) == 1 else r.asDict() for r in rows.select(*columns).limit(SAMPLES).collect()]


def totals(suite: Suite) -> list[Column]:
    """The aggregate columns a suite needs over a batch's rows, so a caller can fold them into its own aggregation.

    Each uniqueness rule gets the rows it judges and their distinct values: equal means no repeats,
    and only a batch with repeats pays for the grouped count that GX's figure needs.
    """
    row_rules, set_rules = _split(suite)
    aggs = [F.count(F.lit(1)).alias("_rows")]
    for i, e in enumerate(row_rules):
        aggs += [F.count(F.when(scope(e), 1)).alias(f"_s{i}"), F.count(F.when(scope(e) & ~present(e), 1)).alias(f"_m{i}"),
                 F.count(F.when(breaks(e), 1)).alias(f"_u{i}")]
    for i, e in enumerate(set_rules):
        judged = any_value(list(e.columns))
        aggs += [F.count(F.when(~judged, 1)).alias(f"_n{i}"), F.count(F.when(judged, 1)).alias(f"_j{i}"),
                 F.count_distinct(F.when(judged, F.struct(*e.columns))).alias(f"_d{i}")]
    return aggs


def _split(suite: Suite) -> tuple[list[Expectation], list[Expectation]]:
    chosen = suite.expectations
    return [e for e in chosen if e.type in ROW_TYPES], [e for e in chosen if e.type not in ROW_TYPES]


def evaluate(rows: DataFrame, suite: Suite, figures: Mapping[str, Any] | None = None) -> list[Outcome]:
    """Each expectation of `suite` over `rows`, from `figures` (the `totals` columns over `rows`) or one aggregation."""
    if figures is None:
        figures = rows.agg(*totals(suite)).first().asDict()
    row_rules, set_rules = _split(suite)
    outcomes = {}
    for i, e in enumerate(row_rules):
        outcomes[id(e)] = Outcome(e, figures[f"_s{i}"], figures[f"_u{i}"], figures[f"_m{i}"])
    for i, e in enumerate(set_rules):
        columns = list(e.columns)
        outcome = Outcome(e, figures["_rows"], 0, figures[f"_n{i}"])
        if figures[f"_j{i}"] != figures[f"_d{i}"]:
            # GX counts every row whose value (or combination) occurs more than once.
            repeated = rows.where(any_value(columns)).groupBy(*columns).count().where("count > 1")
            outcome.unexpected_count = int(repeated.agg(F.sum("count")).first()[0] or 0)
            outcome.samples = samples(repeated, columns)
        outcomes[id(e)] = outcome
    for e in row_rules:
        outcome = outcomes[id(e)]
        if outcome.unexpected_count:
            outcome.samples = samples(rows.where(breaks(e)), e.columns)
    return [outcomes[id(e)] for e in suite.expectations]


def drop_marks(parsed_columns: list[str], rules: tuple[Expectation, ...]) -> dict[str, Column]:
    """`reason`/`detail` columns for a parsed silver batch that name the first drop-severity rule a valid row breaks."""
    missing = sorted({c for e in rules for c in e.columns} - set(parsed_columns))
    if missing:
        raise ValueError(f"drop rules read {', '.join(missing)}, which a parsed record does not have; "
                         "a drop rule may only read the event's own fields")
    reason, detail = F.col("reason"), F.col("detail")
    new_reason, new_detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for e in reversed(rules):   # the first rule a row breaks names it
        hit = breaks(e)
        shown = F.concat_ws(", ", *[F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"), F.lit("null")))
                                    for c in e.columns])
        new_reason = F.when(hit, F.lit(e.name)).otherwise(new_reason)
        new_detail = F.when(hit, F.concat(F.lit(f"breaks {e.name}: "), shown)).otherwise(new_detail)
    valid = reason.isNull()
    return {
        "reason": F.when(valid, new_reason).otherwise(reason),
        "detail": F.when(valid & new_reason.isNotNull(), new_detail).otherwise(detail),
    }
