"""The flows: each reads one source, applies one transform and writes its table; both lanes run these."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakehouse.schemas import tables
from lakehouse.schemas.pipeline import Pipeline, PipelineError, active_pipeline
from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.sources import Source
from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext, duration_micros
from lakehouse.streaming.silver_batches import SilverWriter
from lakehouse.streaming.dimension_batches import DimensionWriter
from lakehouse.streaming.changelog_batches import ChangelogWriter
from lakehouse.streaming.transforms.dimensions import to_dimension_changes
from lakehouse.streaming.transforms.bronze import to_bronze
from lakehouse.schemas.gold import (
    LINEAGE, Custom, Enriched, Gold, IntervalJoin, Recomputed, Sessions, Sliding, Windowed, resolve,
)
from lakehouse.streaming.gold_batches import (
    EventTimeWriter, RecomputeWriter, StepFunction, UpsertWriter, merge_partials,
)
from lakehouse.streaming.gold_steps import interval_join_step, join_state_rows, sessions_step, sliding_step
from lakehouse.streaming.transforms.sequences import join_sides
from lakehouse.streaming.transforms.windows import window_partials
from lakehouse.streaming.transforms.silver import parse_events
from lakehouse.streaming.lake_files import has_delta_log

Input = TopicSpec | TableSpec
# Builds a flow's `(batch_df, batch_id)` function; the function keeps what it did in `.stats`.
WriterFactory = Callable[["Flow", FlowContext], Any]


@dataclass(frozen=True)
class Flow:
    """One query: source(s) -> transform(**params) -> target.

    `output` says how each micro-batch is written: appended by Delta's streaming sink, upserted on the
    target's keys, or handed to the flow's own `(batch_df, batch_id)` writer (silver: one parse written
    to silver, quarantine and late arrivals; stateful gold: windows and joins merged under the flow's
    own watermark, late rows to late arrivals). A flow with several sources gets one DataFrame per
    source, in order, and its transform combines them into one stream.
    """

    name: str
    source: Input | tuple[TableSpec, ...]
    target: TableSpec
    transform: Callable[..., DataFrame]
    output: Literal["append", "batch"] = "append"
    params: Callable[[FlowContext], Mapping[str, object]] = field(default=lambda ctx: {})
    schema: EventSchema | None = None            # the event schema a silver flow parses against
    dedup_watermark: str | None = None           # the source's own dedup delay; None: the setting
    also_writes: tuple[TableSpec, ...] = ()      # tables the batch writer fills besides the target
    version: int = 1         # bump when the query changes incompatibly: it gets a fresh checkpoint
    writer: WriterFactory | None = None          # output "batch": builds the (batch_df, batch_id) function
    aggregate: Callable[..., DataFrame] | None = None   # stateful gold: the pure transform its writer applies
    defined_by: Callable[..., object] | None = None     # what defines the table, for its description
    lookups: tuple[TableSpec, ...] = ()                 # tables read whole at each batch (dimensions, as of)
    description: str = ""                               # what the flow computes, when a declaration says it
    declaration: Any = None                             # the Gold it follows from (its fingerprint's code part)

    @property
    def doc(self) -> str:
        """What defines the table: its declaration's description, else its function's docstring's first line."""
        if self.description:
            return self.description
        return ((self.defined_by or self.aggregate or self.transform).__doc__ or self.name).splitlines()[0]

    @property
    def sources(self) -> tuple[Input, ...]:
        return self.source if isinstance(self.source, tuple) else (self.source,)

    @property
    def asset_name(self) -> str:
        return self.target.name

    @property
    def app_id(self) -> str:
        """Delta's txnAppId for this flow's idempotent writes; it carries the checkpoint's version."""
        return f"{self.name}-v{self.version}"

    def apply(self, *dfs: DataFrame, ctx: FlowContext) -> DataFrame:
        return self.transform(*dfs, **self.params(ctx))

    def checkpoint(self, ctx: FlowContext) -> str:
        """Beside the table it feeds (same layer folder), one folder per flow and query version."""
        layer_root = f"{ctx.lake_root.rstrip('/')}/{self.target.layer}"
        return f"{layer_root}/_checkpoints/{self.target.name}/{self.name}/v{self.version}"

    def batch_writer(self, ctx: FlowContext) -> Any:
        """The `(batch_df, batch_id)` function of a flow whose output is "batch"."""
        assert self.writer is not None, f"flow {self.name} writes batches but has no writer"
        return self.writer(self, ctx)


def silver_writer(flow: Flow, ctx: FlowContext) -> SilverWriter:
    """Silver's writer: one parsed batch to silver, quarantine and late arrivals."""
    assert flow.schema is not None, f"flow {flow.name} has no schema to write silver with"
    return SilverWriter(
        flow=flow.name, schema=flow.schema, silver=flow.target, lake_root=ctx.lake_root,
        dedup_delay_micros=duration_micros(flow.dedup_watermark or ctx.silver_dedup_watermark), app_id=flow.app_id,
        ctx=ctx,
    )


def dimension_flow(source: Source) -> Flow:
    """dim_<entity>: the source's silver changes, read as a stream, applied as SCD2 versions per micro-batch."""
    dim, table = source.dimension, source.dimension_table
    assert dim is not None and table is not None, f"source {source.topic} declares no dimension"

    def params(ctx: FlowContext) -> dict[str, object]:
        return {"key": dim.key, "attributes": dim.attributes, "event_time": source.event_time}

    def writer(flow: Flow, ctx: FlowContext) -> DimensionWriter:
        return DimensionWriter(table=flow.target, lake_root=ctx.lake_root, key=dim.key, attributes=dim.attributes,
                               app_id=flow.app_id, schema=source.dimension_schema, ctx=ctx)

    return Flow(f"dim_{source.entity}", source.silver_table, table, to_dimension_changes, output="batch",
                params=params, writer=writer)


def changelog_flows(source: Source) -> tuple[Flow, Flow]:
    """A changelog's current state (silver_<entity>, SCD1) and history (dim_<entity>, SCD2), each a flow over bronze."""
    log, history = source.changelog, source.dimension_table
    assert log is not None and history is not None, f"source {source.topic} is not a changelog"

    def flow(target: TableSpec, kind: str) -> Flow:
        deletes = source.deletes_table(target)
        extra = (tables.QUARANTINE,) if kind == "current" else ()

        def writer(flow: Flow, ctx: FlowContext) -> ChangelogWriter:
            return ChangelogWriter(topic=source.topic, key=source.key, columns=StructType(list(source.fields)),
                                   table=flow.target, kind=kind, deletes=deletes, lake_root=ctx.lake_root,
                                   app_id=flow.app_id, remember_deletes=log.remember_deletes)

        return Flow(target.name, source.bronze_table, target, passthrough, output="batch", writer=writer,
                    also_writes=(deletes, *extra), description=(
                        f"{'Current state' if kind == 'current' else 'History'} of the database's {log.table.name} "
                        f"table ({'SCD1' if kind == 'current' else 'SCD2'}), applied in its log order from "
                        f"{source.topic}."))

    return flow(source.silver_table, "current"), flow(history, "history")


def source_flows(source: Source) -> tuple[Flow, ...]:
    """The bronze and silver flows a source declaration implies, and its dimension flow if it declares one."""
    schema = source.schema
    if source.changelog is not None:
        bronze = Flow(f"bronze_{source.entity}", source.topic_spec, source.bronze_table, to_bronze)
        return (bronze, *changelog_flows(source))

    def parse_params(ctx: FlowContext) -> dict[str, object]:
        return {"schema": schema, "event_time_floor": ctx.event_time_floor,
                "max_event_time_ahead": ctx.event_time_max_ahead}

    bronze = Flow(f"bronze_{source.entity}", source.topic_spec, source.bronze_table, to_bronze)
    # Version 2: one parse per record, written by SilverWriter (v1 ran silver and quarantine as two queries).
    silver = Flow(
        f"silver_{source.entity}", source.bronze_table, source.silver_table, parse_events, output="batch",
        params=parse_params, schema=schema, also_writes=(tables.QUARANTINE, tables.LATE_ARRIVALS),
        dedup_watermark=source.dedup_watermark, version=2, writer=silver_writer,
    )
    if source.dimension is not None:
        return bronze, silver, dimension_flow(source)
    return bronze, silver


# ---------------------------------------------------------------- gold
# Gold tables are explicit flows, one transform each. Stateful ones run under their own watermark in
# an EventTimeWriter, so late rows go to late_arrivals instead of vanishing inside Spark's operators.

def passthrough(events: DataFrame) -> DataFrame:
    """Silver rows as they are; the flow's writer does the rest, one micro-batch at a time."""
    return events


def stateful(
    name: str, source: Input | tuple[TableSpec, ...], target: TableSpec, aggregate: Callable[..., DataFrame], *,
    step: Callable[[FlowContext], StepFunction], params: Callable[[FlowContext], Mapping[str, object]] = lambda ctx: {},
    transform: Callable[..., DataFrame] = passthrough, state_rows: Callable | None = None, version: int = 1,
    defined_by: Callable[..., object] | None = None, lookups: tuple[TableSpec, ...] = (), description: str = "",
) -> Flow:
    """A gold flow whose writer keeps its own event-time watermark: `aggregate` then `step` per micro-batch."""

    def writer(flow: Flow, ctx: FlowContext) -> EventTimeWriter:
        kwargs = params(ctx)
        return EventTimeWriter(
            flow=flow.name, target=flow.target, lake_root=ctx.lake_root, event_time="occurred_at",
            delay_micros=duration_micros(ctx.watermark_for(flow.name)), app_id=flow.app_id,
            aggregate=lambda df: aggregate(df, **kwargs, **as_of(df, ctx, lookups)), step=step(ctx),
            state_rows=state_rows, ctx=ctx,
        )

    return Flow(name, source, target, transform, output="batch", writer=writer, aggregate=aggregate,
                also_writes=(tables.LATE_ARRIVALS,), version=version, defined_by=defined_by, lookups=lookups,
                description=description)


def as_of(df: DataFrame, ctx: FlowContext, lookups: tuple[TableSpec, ...]) -> dict[str, DataFrame]:
    """The dimension tables a batch is enriched with, read whole: every version, so the join can pick by event time."""
    spark = df.sparkSession
    found = {}
    for table in lookups:
        path = ctx.input_path(table)
        if not has_delta_log(spark, path):
            raise MissingDimension(f"{table.name} does not exist yet; materialize it before the gold tables that "
                                   f"read it (lakehouse run {table.name}).")
        found[table.name] = spark.read.format("delta").load(path)
    return found


class MissingDimension(RuntimeError):
    """A gold flow needs a dimension table that has not been built yet."""


def enriched(name: str, source: TableSpec, target: TableSpec, compute: Callable[..., DataFrame],
             lookups: tuple[TableSpec, ...], description: str = "", version: int = 1) -> Flow:
    """A stateless gold flow: each batch enriched as of its events' time and upserted on the table's keys."""

    def writer(flow: Flow, ctx: FlowContext) -> UpsertWriter:
        return UpsertWriter(target=flow.target, lake_root=ctx.lake_root, app_id=flow.app_id, keys=flow.target.keys,
                            compute=lambda df: compute(df, **as_of(df, ctx, lookups)), ctx=ctx)

    return Flow(name, source, target, passthrough, output="batch", writer=writer, aggregate=compute, lookups=lookups,
                description=description, version=version)


def recomputed(name: str, sources_: tuple[TableSpec, ...], target: TableSpec, *, narrow: Callable[..., DataFrame],
               compute: Callable[[DataFrame], DataFrame], keys: tuple[str, ...], bucket_column: str,
               bucket_width: str = "1 minute", event_time: str = "occurred_at", description: str = "",
               version: int = 1) -> Flow:
    """A gold flow of figures that cannot be merged from partials (percentiles): the buckets a batch touches are
    recomputed from every silver table it reads (RecomputeWriter)."""
    unit = bucket_width.split()[-1].rstrip("s")

    def writer(flow: Flow, ctx: FlowContext) -> RecomputeWriter:
        return RecomputeWriter(
            target=flow.target, lake_root=ctx.lake_root, app_id=flow.app_id,
            silver_paths=[ctx.input_path(s) for s in flow.sources], narrow=narrow, compute=compute, keys=keys,
            bucket=lambda df: df.withColumn(bucket_column, F.date_trunc(unit, event_time)),
            bucket_time=(bucket_column, event_time, duration_micros(bucket_width)), ctx=ctx,
        )

    return Flow(name, sources_, target, narrow, output="batch", writer=writer, aggregate=compute,
                description=description, version=version)


def gold_flow(gold: Gold) -> Flow:
    """The flow a gold declaration implies, by its kind; the rows it reads go through `gold.rows` first."""
    return dataclasses.replace(_flow_of(gold), declaration=gold)


def _flow_of(gold: Gold) -> Flow:
    reads = tuple(source.silver_table for source in gold.reads)
    source = reads[0] if len(reads) == 1 else reads
    lookups = tuple(source.dimension_table for source in gold.lookups)
    rows = _keeping_lineage(gold) if gold.rows is not None else passthrough
    kind, spec = gold.kind, gold.spec
    if isinstance(kind, Windowed):
        return stateful(gold.name, source, spec, _windowed_aggregate(gold), step=_windowed_step(gold),
                        params=lambda ctx: {"params": dict(ctx.params)}, transform=rows, version=gold.version, lookups=lookups, description=gold.description)
    if isinstance(kind, (Sliding, Sessions, IntervalJoin)):
        transform = _join_rows(gold) if isinstance(kind, IntervalJoin) else rows
        return stateful(gold.name, source, spec, _with_transform(gold, None), step=_sequence_step(gold),
                        transform=transform, state_rows=join_state_rows if isinstance(kind, IntervalJoin) else None,
                        version=gold.version, lookups=lookups, description=gold.description)
    if isinstance(kind, Custom):
        return stateful(gold.name, source, spec, _with_transform(gold, kind.aggregate), step=kind.step,
                        params=kind.params, transform=rows, state_rows=kind.state_rows, version=gold.version,
                        defined_by=kind.defined_by, lookups=lookups, description=gold.description)
    if isinstance(kind, Enriched):
        return enriched(gold.name, source, spec, kind.compute, lookups, description=gold.description,
                        version=gold.version)
    if isinstance(kind, Recomputed):
        return recomputed(gold.name, reads, spec, narrow=gold.rows or passthrough, compute=kind.compute,
                          keys=spec.keys, bucket_column=kind.bucket_column, bucket_width=kind.bucket_width,
                          event_time=kind.time, description=gold.description, version=gold.version)
    raise TypeError(f"gold table {gold.name}: unknown kind {type(kind).__name__}")


def _sequence_step(gold: Gold) -> Callable[[FlowContext], StepFunction]:
    """The step of a sliding count, sessions or an interval join, with its parameters' values in force."""
    kind, keys = gold.kind, gold.table_keys

    def step(ctx: FlowContext) -> StepFunction:
        def micros(value: object) -> int:
            return duration_micros(str(resolve(value, ctx.params)))
        if isinstance(kind, Sliding):
            threshold = resolve(kind.flag_at, ctx.params)
            return sliding_step(kind, keys, window_micros=micros(kind.window),
                                threshold=None if threshold is None else int(threshold))
        if isinstance(kind, Sessions):
            return sessions_step(kind, gap_micros=micros(kind.gap))
        return interval_join_step(kind, keys, within_micros=micros(kind.within))
    return step


def _join_rows(gold: Gold) -> Callable[..., DataFrame]:
    """An interval join's two reads as one stream (after each side's `rows`, if declared, narrowed it)."""
    def rows(left: DataFrame, right: DataFrame) -> DataFrame:
        if gold.rows is not None:
            left, right = gold.rows(left, right)
        return join_sides(left, right, on=gold.kind.on, lineage=LINEAGE)
    return rows


def _keeping_lineage(gold: Gold) -> Callable[..., DataFrame]:
    """The table's `rows`, refused in one sentence when they drop what late rows are listed with."""
    def rows(*dfs: DataFrame) -> DataFrame:
        out = gold.rows(*dfs)
        missing = [c for c in LINEAGE if c not in out.columns]
        if missing and isinstance(gold.kind, (Windowed, Sliding, Sessions, Custom)):
            raise PipelineError(f"gold table {gold.name}: its rows drop {', '.join(missing)}, which an event behind "
                                "the watermark is listed with in late_arrivals; keep them in what `rows` returns.")
        return out
    return rows


def _with_transform(gold: Gold, after: Callable[..., DataFrame] | None) -> Callable[..., DataFrame]:
    """The per-batch function of a stateful kind: the declared transform (with its lookups), then `after`."""
    def aggregate(df: DataFrame, **kwargs: object) -> DataFrame:
        dims = {k: v for k, v in kwargs.items() if k.startswith("dim_")}
        rest = {k: v for k, v in kwargs.items() if not k.startswith("dim_")}
        if gold.transform is not None:
            df = gold.transform(df, **dims)
        return after(df, **rest) if after is not None else df
    return aggregate


def _windowed_aggregate(gold: Gold) -> Callable[..., DataFrame]:
    """A windowed table's partial aggregates of one batch's on-time rows: per window and group, in declared order."""
    kind = gold.kind

    def aggregate(df: DataFrame, *, params: Mapping[str, object], **dims: DataFrame) -> DataFrame:
        if gold.transform is not None:
            df = gold.transform(df, **dims)
        return window_partials(df, kind, params)

    return aggregate


def _windowed_step(gold: Gold) -> Callable[[FlowContext], StepFunction]:
    return lambda ctx: merge_partials(gold.kind, gold.spec.keys)


def build_flows(declared: tuple[Source, ...] | None = None, pipeline: Pipeline | None = None) -> tuple[Flow, ...]:
    """Every flow: each source's bronze flows, then its silver flows, then dimensions, then the pipeline's gold flows.

    `declared` narrows the sources (a gold flow whose inputs are not among them is left out).
    """
    pipeline = pipeline or active_pipeline()
    declared = tuple(pipeline.sources) if declared is None else tuple(declared)
    per_source = [source_flows(source) for source in declared]
    dims = [flow for flows in per_source for flow in flows[2:]]
    available = {source.silver_table.name for source in declared} | {flow.target.name for flow in dims}
    gold = [flow for flow in gold_flows(pipeline)
            if all(s.name in available for s in (*flow.sources, *flow.lookups))]
    return (*(f[0] for f in per_source), *(f[1] for f in per_source), *dims, *gold)


@functools.lru_cache(maxsize=None)
def gold_flows(pipeline: Pipeline) -> tuple[Flow, ...]:
    """The pipeline's gold flows, built once per pipeline from its declarations."""
    return tuple(gold_flow(gold) for gold in pipeline.gold)


@functools.lru_cache(maxsize=None)
def _registry(pipeline: Pipeline) -> tuple[tuple[Flow, ...], dict[str, Flow]]:
    flows = build_flows(pipeline=pipeline)
    return flows, {flow.name: flow for flow in flows}


def __getattr__(name: str) -> Any:
    """FLOWS, BY_NAME and GOLD_FLOWS: the active pipeline's (LAKEHOUSE_PIPELINE), built once per pipeline."""
    if name == "FLOWS":
        return _registry(active_pipeline())[0]
    if name == "BY_NAME":
        return _registry(active_pipeline())[1]
    if name == "GOLD_FLOWS":
        return gold_flows(active_pipeline())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def asset_names() -> list[str]:
    """Table assets in dependency order."""
    return list(dict.fromkeys(flow.asset_name for flow in _registry(active_pipeline())[0]))
