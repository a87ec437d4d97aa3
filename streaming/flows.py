"""The flows: each reads one source, applies one transform and writes its table; both lanes run these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

from pyspark.sql import DataFrame

from schemas import tables, topics
from schemas.events import EventSchema
from schemas.tables import TableSpec
from schemas.topics import TopicSpec
from streaming.context import FlowContext, duration_micros
from streaming.silver_batches import SilverWriter
from streaming.transforms.bronze import to_bronze
from streaming.transforms.gold import to_gold_page_views_per_product_minute, to_gold_revenue_per_minute
from streaming.transforms.silver import parse_orders, parse_page_views

Source = TopicSpec | TableSpec


@dataclass(frozen=True)
class Flow:
    """One query: source -> transform(**params) -> target.

    `output` says how each micro-batch is written: appended by Delta's streaming sink, upserted on the
    target's keys, or handed to the flow's own `(batch_df, batch_id)` writer (silver: one parse written
    to silver, quarantine and late arrivals).
    """

    name: str
    source: Source
    target: TableSpec
    transform: Callable[..., DataFrame]
    output: Literal["append", "upsert", "batch"] = "append"
    params: Callable[[FlowContext], Mapping[str, str]] = field(default=lambda ctx: {})
    schema: EventSchema | None = None            # the event schema a silver flow parses against
    also_writes: tuple[TableSpec, ...] = ()      # tables the batch writer fills besides the target
    version: int = 1         # bump when the query changes incompatibly: it gets a fresh checkpoint

    @property
    def asset_name(self) -> str:
        return self.target.name

    @property
    def app_id(self) -> str:
        """Delta's txnAppId for this flow's idempotent writes; it carries the checkpoint's version."""
        return f"{self.name}-v{self.version}"

    def apply(self, df: DataFrame, ctx: FlowContext) -> DataFrame:
        return self.transform(df, **self.params(ctx))

    def checkpoint(self, ctx: FlowContext) -> str:
        """Beside the table it feeds (same layer folder), one folder per flow and query version."""
        layer_root = f"{ctx.lake_root.rstrip('/')}/{self.target.layer}"
        return f"{layer_root}/_checkpoints/{self.target.name}/{self.name}/v{self.version}"

    def batch_writer(self, ctx: FlowContext) -> SilverWriter:
        """The `(batch_df, batch_id)` function of a flow whose output is "batch"."""
        assert self.schema is not None, f"flow {self.name} has no schema to write silver with"
        return SilverWriter(
            flow=self.name, schema=self.schema, silver=self.target, lake_root=ctx.lake_root,
            dedup_delay_micros=duration_micros(ctx.silver_dedup_watermark), app_id=self.app_id,
        )


def _plausible(ctx: FlowContext) -> dict[str, str]:
    return {"event_time_floor": ctx.event_time_floor, "max_event_time_ahead": ctx.event_time_max_ahead}


def _gold(ctx: FlowContext) -> dict[str, str]:
    return {"watermark": ctx.gold_watermark}


_SILVER_SIDE_TABLES = (tables.QUARANTINE, tables.LATE_ARRIVALS)

FLOWS: tuple[Flow, ...] = (
    Flow("bronze_page_views", topics.PAGE_VIEWS, tables.BRONZE_PAGE_VIEWS, to_bronze),
    Flow("bronze_orders", topics.ORDERS, tables.BRONZE_ORDERS, to_bronze),
    # Version 2: one parse per record, written by SilverWriter (v1 ran silver and quarantine as two queries).
    Flow("silver_page_views", tables.BRONZE_PAGE_VIEWS, tables.SILVER_PAGE_VIEWS, parse_page_views, output="batch",
         params=_plausible, schema=topics.PAGE_VIEWS.schema, also_writes=_SILVER_SIDE_TABLES, version=2),
    Flow("silver_orders", tables.BRONZE_ORDERS, tables.SILVER_ORDERS, parse_orders, output="batch",
         params=_plausible, schema=topics.ORDERS.schema, also_writes=_SILVER_SIDE_TABLES, version=2),
    Flow("gold_revenue_per_minute", tables.SILVER_ORDERS, tables.GOLD_REVENUE_PER_MINUTE,
         to_gold_revenue_per_minute, output="upsert", params=_gold),
    Flow("gold_page_views_per_product_minute", tables.SILVER_PAGE_VIEWS, tables.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE,
         to_gold_page_views_per_product_minute, output="upsert", params=_gold),
)
BY_NAME = {flow.name: flow for flow in FLOWS}


def flows_for_asset(asset: str) -> list[Flow]:
    """The flows that together materialize one table asset, in order."""
    return [flow for flow in FLOWS if flow.asset_name == asset]


def asset_names() -> list[str]:
    """Table assets in dependency order."""
    return list(dict.fromkeys(flow.asset_name for flow in FLOWS))
