"""Gold tables declared once, as what they compute: the table, its kind, its parameters, its suite, an example query.

A windowed gold table is declared as its aggregates (`count`, `count_if`, `sum`, `min`, `max`, `avg`); the
engine derives how partial results of micro-batches merge (sums and counts add, minima and maxima take the
least and greatest, an average keeps its sum and count and divides) and refuses, when the pipeline loads,
an aggregate that cannot be merged exactly. The other kinds carry their own parameters: `Sliding` (a per-row
count over a look-back), `Sessions`, `IntervalJoin` (a stream-stream outer join within a time bound), `Enriched`
(as of each row's time) and `Recomputed` (buckets of figures that cannot merge); `Custom` takes a per-batch
step for what no kind covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from lakehouse.schemas.pipeline import Param, PipelineError
from lakehouse.schemas.tables import TableSpec

# What the rows of a table with a watermark must keep: late ones are listed in late_arrivals with them.
LINEAGE = ("event_id", "occurred_at", "topic", "partition", "offset", "appended_at", "ingested_at")

# Aggregates whose partial results over disjoint sets of rows merge exactly, and how: the partial column's merge.
MERGEABLE = ("count", "count_if", "sum", "min", "max", "avg")


@dataclass(frozen=True)
class Aggregate:
    """One aggregate column of a windowed table: a Spark SQL aggregate function over an expression of the rows."""

    function: str             # count, count_if, sum, min, max, avg (others are refused when the pipeline loads)
    expression: str = "1"     # Spark SQL over the rows the table's transform gives (count_if: a condition)

    def __str__(self) -> str:
        return f"{self.function}({self.expression})"


def count() -> Aggregate:
    """How many rows fall in the window."""
    return Aggregate("count")


def count_if(condition: str) -> Aggregate:
    """How many rows in the window meet `condition` (Spark SQL)."""
    return Aggregate("count_if", condition)


def sum_of(expression: str) -> Aggregate:
    """The sum of `expression` over the window's rows (NULL when every value is NULL)."""
    return Aggregate("sum", expression)


def min_of(expression: str) -> Aggregate:
    """The least value of `expression` in the window."""
    return Aggregate("min", expression)


def max_of(expression: str) -> Aggregate:
    """The greatest value of `expression` in the window."""
    return Aggregate("max", expression)


def avg_of(expression: str) -> Aggregate:
    """The mean of `expression` over the window's non-NULL values (kept as a sum and a count, divided)."""
    return Aggregate("avg", expression)


@dataclass(frozen=True)
class Windowed:
    """Tumbling (no `slide`) or hopping event-time windows, grouped by `by`, holding `aggregates`."""

    size: str | Param                         # "1 minute", or a Param of the pipeline
    aggregates: Mapping[str, Aggregate]       # final column -> aggregate
    by: tuple[str, ...] = ()                  # grouping columns besides the window
    slide: str | Param | None = None          # hopping: a new window every `slide`
    time: str = "occurred_at"                 # the event time of the rows the transform gives

    def check(self, table: str) -> None:
        for column, agg in self.aggregates.items():
            if agg.function not in MERGEABLE:
                raise PipelineError(
                    f"gold table {table}: aggregate {column} = {agg} cannot be merged exactly across micro-batches; "
                    f"use one of {', '.join(MERGEABLE)}, or declare the table as Recomputed.")
        clash = set(self.aggregates) & {*self.by, "window_start", "window_end"}
        if clash:
            raise PipelineError(f"gold table {table}: aggregate column {sorted(clash)[0]} is also a key; rename it.")


@dataclass(frozen=True)
class Sliding:
    """Per row: how many earlier rows of the same `by` fall in the look-back `window` before it, flagged at `flag_at`.

    A row of a later batch that falls into an earlier row's look-back recounts that row, so the counts are
    those of a count over the whole stream."""

    window: str | Param                       # the look-back, "30 minutes" or a Param
    by: tuple[str, ...]                       # whose rows are counted together (a customer, a device)
    count: str = "rows_before"                # the column holding the count
    flag_at: int | Param | None = None        # flag rows whose count reaches this
    flag: str = "flagged"                     # the flag's column
    time: str = "occurred_at"                 # the time of the rows the transform gives

    def check(self, table: str, keys: tuple[str, ...]) -> None:
        if not keys:
            raise PipelineError(f"gold table {table}: a sliding count is one row per input row; declare the keys "
                                "that name a row (an order id).")


@dataclass(frozen=True)
class Sessions:
    """Session windows per `by`: rows less than `gap` apart in one session, with counts of rows meeting `counts`.

    Columns: `by`, session_start, session_end, each count, each `then` column (Spark SQL over the session's
    columns), and `closed` once the watermark has passed the session's end by the gap (it can no longer grow)."""

    gap: str | Param
    by: tuple[str, ...]
    counts: Mapping[str, str]                 # column -> condition (Spark SQL over a row) counted per session
    then: Mapping[str, str] = field(default_factory=dict)   # column -> Spark SQL over the session's columns
    time: str = "occurred_at"


@dataclass(frozen=True)
class IntervalJoin:
    """A full outer join of the table's two reads on `on`, a right row matching when it is at most `within` after
    its left row. Pairs are emitted as `outcomes[0]`; a left row no right row matched once the watermark passed
    its time + `within`, as `outcomes[1]`; a right row once the watermark passed its time, as `outcomes[2]`.
    `columns` are Spark SQL over `l` and `r`, the two rows (the missing side is NULL)."""

    on: tuple[str, ...]
    within: str | Param
    columns: Mapping[str, str]
    outcomes: tuple[str, str, str] = ("matched", "left_only", "right_only")


@dataclass(frozen=True)
class Custom:
    """A stateful kind the engine does not offer: `step(ctx)` builds the per-batch step that merges on-time rows."""

    step: Callable[[Any], Any]
    aggregate: Callable[..., Any] | None = None   # pure transform of the on-time rows before the step
    state_rows: Callable | None = None            # counts the rows the step keeps in state, for the UI
    defined_by: Callable[..., Any] | None = None  # what defines the table, for its description
    params: Callable[[Any], Mapping[str, object]] = lambda ctx: {}   # keyword arguments of `aggregate`


@dataclass(frozen=True)
class Enriched:
    """Each row enriched as of its event time from the lookups, upserted on the table's keys (stateless)."""

    compute: Callable[..., Any]               # (rows, **{dim_table_name: DataFrame}) -> DataFrame


@dataclass(frozen=True)
class Recomputed:
    """Figures that cannot merge from partials (percentiles): each time bucket a batch touches is recomputed."""

    compute: Callable[..., Any]               # rows of the touched buckets -> the table's rows
    bucket_column: str                        # the key holding each bucket's start
    bucket_width: str = "1 minute"
    time: str = "occurred_at"


Kind = Windowed | Sliding | Sessions | IntervalJoin | Custom | Enriched | Recomputed


@dataclass(frozen=True)
class Gold:
    """One gold table, declared once: what it holds and answers, what it reads, how it computes, its checks."""

    name: str                                 # gold_<mart>
    description: str
    question: str                             # the business question it answers
    reads: tuple[Any, ...]                    # Sources (their silver tables), in the order the transform takes them
    kind: Kind
    rows: Callable[..., Any] | None = None    # pure, on the stream: the rows it is computed from (a filter, a
                                              # projection; for several reads, their union as one stream;
                                              # for an interval join, the two sides narrowed, as a pair)
    transform: Callable[..., Any] | None = None   # pure, per batch of on-time rows, before the kind's aggregation;
                                                  # takes each lookup's dimension table as a keyword (dim_<entity>)
    keys: tuple[str, ...] = ()                # derived for Windowed: window_start, then `by`
    lookups: tuple[Any, ...] = ()             # Sources with a dimension, read whole as of each row's time
    time_range: tuple[str, str] | None = None
    zorder_by: tuple[str, ...] = ()
    expectations: Callable[[], list] = lambda: []   # the table's value rules (quality.suites.Expectation), built late
    keys_not_null: bool = True                # its suite requires its keys present (an outer join's may be NULL)
    example: str = ""                         # a query a person would type, shown by the demo
    version: int = 1                          # bump when the flow changes incompatibly: a fresh checkpoint
    uses: tuple[Param, ...] = ()              # the pipeline parameters a Custom step or a transform reads
    extra: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name.startswith("gold_"):
            raise PipelineError(f"gold table {self.name}: name it gold_<mart>.")
        if isinstance(self.kind, Windowed):
            self.kind.check(self.name)
        if isinstance(self.kind, Sliding):
            self.kind.check(self.name, self.keys)
        if isinstance(self.kind, IntervalJoin) and len(self.reads) != 2:
            raise PipelineError(f"gold table {self.name}: an interval join reads two sources, the left first; it "
                                f"reads {len(self.reads)}.")
        if len(self.reads) > 1 and self.rows is None and not isinstance(self.kind, IntervalJoin):
            raise PipelineError(f"gold table {self.name} reads {len(self.reads)} sources: declare `rows`, the function "
                                "that makes them one stream.")
        if not self.table_keys:
            raise PipelineError(f"gold table {self.name}: declare its keys (the columns that make a row unique).")

    @property
    def table_keys(self) -> tuple[str, ...]:
        if isinstance(self.kind, Windowed):
            return ("window_start", *self.kind.by)
        if isinstance(self.kind, Sessions):
            return (*self.kind.by, "session_start")
        return self.keys

    @property
    def spec(self) -> TableSpec:
        windowed = isinstance(self.kind, Windowed)
        return TableSpec(
            self.name, "gold", self.description, self.table_keys,
            time_range=self.time_range or (("window_start", "window_end") if windowed else
                                           ("session_start", "session_end") if isinstance(self.kind, Sessions) else None),
            zorder_by=self.zorder_by or (("window_start",) if windowed else ()), question=self.question,
        )

    def params(self) -> tuple[Param, ...]:
        """The Params its kind names (a window's size or slide) and those it `uses`."""
        found = [getattr(self.kind, name, None) for name in ("size", "slide", "window", "flag_at", "gap", "within")]
        return tuple(p for p in found if isinstance(p, Param)) + self.uses


def resolve(value: str | Param | None, params: Mapping[str, object]) -> Any:
    """A declared value, or the pipeline parameter's value in force if it is a Param."""
    return params[value.name] if isinstance(value, Param) else value
