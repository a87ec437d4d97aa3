"""The flows: each reads one source, applies one transform and writes its table; both lanes run these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.schemas import sources, tables
from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.sources import Source
from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext, duration_micros
from lakehouse.streaming.silver_batches import SilverWriter
from lakehouse.streaming.dimension_batches import DimensionWriter
from lakehouse.streaming.transforms.dimensions import to_dimension_changes
from lakehouse.streaming.transforms.bronze import to_bronze
from lakehouse.streaming.gold_batches import EventTimeWriter, RecomputeWriter, StepFunction, UpsertWriter, add_partials
from lakehouse.streaming.transforms.dimensions import enrich_as_of
from lakehouse.streaming.gold_steps import interval_join, join_state_rows, session_windows, sliding_counts
from lakehouse.streaming.transforms import gold
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

    @property
    def doc(self) -> str:
        """The first line of the docstring of what defines the table."""
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


def source_flows(source: Source) -> tuple[Flow, ...]:
    """The bronze and silver flows a source declaration implies, and its dimension flow if it declares one."""
    schema = source.schema

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
    defined_by: Callable[..., object] | None = None, lookups: tuple[TableSpec, ...] = (),
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
                also_writes=(tables.LATE_ARRIVALS,), version=version, defined_by=defined_by, lookups=lookups)


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


PRODUCT_ATTRIBUTES = {"category": "category", "list_price_cents": "list_price_cents"}
CUSTOMER_ATTRIBUTES = {"tier": "customer_tier", "country": "customer_country"}


def to_category_revenue(orders: DataFrame, *, dim_products: DataFrame) -> DataFrame:
    """Tumbling: revenue, units and orders per one-minute window, product category as of the order's time, and currency."""
    lines = enrich_as_of(gold.to_order_lines(orders), dim_products, key="product_id", event_time="ordered_at",
                         attributes={"category": "category"})
    return gold.to_category_revenue_per_minute(lines)


def to_enriched_order_lines(orders: DataFrame, *, dim_products: DataFrame, dim_customers: DataFrame) -> DataFrame:
    """Order lines with product and customer attributes as they were at the order's time (as-of join)."""
    lines = enrich_as_of(gold.to_order_lines(orders), dim_products, key="product_id", event_time="ordered_at",
                         attributes=PRODUCT_ATTRIBUTES)
    return enrich_as_of(lines, dim_customers, key="customer_id", event_time="ordered_at", attributes=CUSTOMER_ATTRIBUTES)


def to_enriched_page_views(page_views: DataFrame, *, dim_products: DataFrame, dim_customers: DataFrame) -> DataFrame:
    """Page views with product and customer attributes as they were at the view's time (as-of join)."""
    views = page_views.select("event_id", "occurred_at", "customer_id", "page_type", "product_id", "url")
    views = enrich_as_of(views, dim_products, key="product_id", event_time="occurred_at", attributes=PRODUCT_ATTRIBUTES)
    return enrich_as_of(views, dim_customers, key="customer_id", event_time="occurred_at", attributes=CUSTOMER_ATTRIBUTES)


def enriched(name: str, source: TableSpec, target: TableSpec, compute: Callable[..., DataFrame],
             lookups: tuple[TableSpec, ...]) -> Flow:
    """A stateless gold flow: each batch enriched as of its events' time and upserted on the table's keys."""

    def writer(flow: Flow, ctx: FlowContext) -> UpsertWriter:
        return UpsertWriter(target=flow.target, lake_root=ctx.lake_root, app_id=flow.app_id, keys=flow.target.keys,
                            compute=lambda df: compute(df, **as_of(df, ctx, lookups)), ctx=ctx)

    return Flow(name, source, target, passthrough, output="batch", writer=writer, aggregate=compute, lookups=lookups)


def _sums(keys: tuple[str, ...], sums: tuple[str, ...]) -> Callable[[FlowContext], StepFunction]:
    return lambda ctx: add_partials(keys, sums)


ORDERS, PAGE_VIEWS = sources.ORDERS.silver_table, sources.PAGE_VIEWS.silver_table

GOLD_FLOWS: tuple[Flow, ...] = (
    # Version 2: merged under the flow's own watermark (v1 upserted Spark's windowed aggregation).
    stateful("gold_revenue_per_minute", ORDERS, tables.GOLD_REVENUE_PER_MINUTE, gold.to_revenue_per_minute,
             step=_sums(("window_start", "currency"), ("revenue_cents", "orders", "items")), version=2),
    stateful("gold_page_views_per_product_minute", PAGE_VIEWS, tables.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE,
             gold.to_page_views_per_product_minute, transform=gold.to_product_page_views,
             step=_sums(("window_start", "product_id"), ("views",)), version=2),
    stateful("gold_revenue_hopping", ORDERS, tables.GOLD_REVENUE_HOPPING, gold.to_revenue_hopping,
             params=lambda ctx: {"size": ctx.hopping_window_size, "slide": ctx.hopping_window_slide},
             step=_sums(("window_start", "currency"), ("revenue_cents", "orders"))),
    stateful("gold_order_velocity", ORDERS, tables.GOLD_ORDER_VELOCITY, passthrough,
             step=lambda ctx: sliding_counts(window_micros=duration_micros(ctx.sliding_window),
                                             threshold=ctx.sliding_threshold), defined_by=gold.to_order_velocity),
    stateful("gold_sessions", (PAGE_VIEWS, ORDERS), tables.GOLD_SESSIONS, passthrough,
             transform=gold.to_activity_events,
             step=lambda ctx: session_windows(gap_micros=duration_micros(ctx.session_gap)), defined_by=gold.to_sessions),
)
def delay_writer(flow: Flow, ctx: FlowContext) -> RecomputeWriter:
    """gold_processing_delay's writer: the minutes a batch touches, recomputed from every silver table it reads."""
    return RecomputeWriter(
        target=flow.target, lake_root=ctx.lake_root, app_id=flow.app_id,
        silver_paths=[ctx.input_path(s) for s in flow.sources], narrow=gold.to_delay_events,
        compute=gold.to_processing_delay, keys=("minute", "topic"),
        bucket=lambda df: df.withColumn("minute", F.date_trunc("minute", "occurred_at")),
        bucket_time=("minute", "occurred_at", 60_000_000), ctx=ctx,
    )


EVENT_SOURCES = tuple(s.silver_table for s in sources.SOURCES if s.dimension is None)
DIM_PRODUCTS, DIM_CUSTOMERS = sources.PRODUCTS.dimension_table, sources.CUSTOMERS.dimension_table
GOLD_FLOWS += (
    Flow("gold_processing_delay", EVENT_SOURCES, tables.GOLD_PROCESSING_DELAY, gold.to_delay_events, output="batch",
         writer=delay_writer, aggregate=gold.to_processing_delay),
    stateful("gold_category_revenue_per_minute", ORDERS, tables.GOLD_CATEGORY_REVENUE_PER_MINUTE,
             to_category_revenue, lookups=(DIM_PRODUCTS,),
             step=_sums(("window_start", "category", "currency"), ("revenue_cents", "units", "orders"))),
    enriched("gold_order_lines_enriched", ORDERS, tables.GOLD_ORDER_LINES_ENRICHED, to_enriched_order_lines,
             (DIM_PRODUCTS, DIM_CUSTOMERS)),
    enriched("gold_page_views_enriched", PAGE_VIEWS, tables.GOLD_PAGE_VIEWS_ENRICHED, to_enriched_page_views,
             (DIM_PRODUCTS, DIM_CUSTOMERS)),
    stateful("gold_order_payments", (ORDERS, sources.PAYMENTS.silver_table), tables.GOLD_ORDER_PAYMENTS,
             passthrough, transform=gold.to_order_payment_events, state_rows=join_state_rows,
             step=lambda ctx: interval_join(within_micros=duration_micros(ctx.payment_within)),
             defined_by=interval_join),
)


def build_flows(declared: tuple[Source, ...] = sources.SOURCES) -> tuple[Flow, ...]:
    """Every flow: each source's bronze flows, then its silver flows, then dimensions, then the gold flows."""
    per_source = [source_flows(source) for source in declared]
    dims = [flow for flows in per_source for flow in flows[2:]]
    available = {source.silver_table.name for source in declared} | {flow.target.name for flow in dims}
    gold = [flow for flow in GOLD_FLOWS if all(s.name in available for s in (*flow.sources, *flow.lookups))]
    return (*(f[0] for f in per_source), *(f[1] for f in per_source), *dims, *gold)


FLOWS: tuple[Flow, ...] = build_flows()
BY_NAME = {flow.name: flow for flow in FLOWS}


def asset_names() -> list[str]:
    """Table assets in dependency order."""
    return list(dict.fromkeys(flow.asset_name for flow in FLOWS))
