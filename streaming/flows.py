"""The flows: each reads one source, applies one transform and writes one table; both lanes run these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

from pyspark.sql import DataFrame

from schemas import tables, topics
from schemas.tables import TableSpec
from schemas.topics import TopicSpec
from streaming.context import FlowContext
from streaming.transforms.bronze import to_bronze
from streaming.transforms.gold import to_gold_page_views_per_product_minute, to_gold_revenue_per_minute
from streaming.transforms.silver import (
    to_quarantine_orders,
    to_quarantine_page_views,
    to_silver_orders,
    to_silver_page_views,
)

Source = TopicSpec | TableSpec


@dataclass(frozen=True)
class Flow:
    """One query: source -> transform(**params) -> target, appended or upserted per micro-batch."""

    name: str
    source: Source
    target: TableSpec
    transform: Callable[..., DataFrame]
    output: Literal["append", "upsert"] = "append"
    params: Callable[[FlowContext], Mapping[str, str]] = field(default=lambda ctx: {})
    asset: str = ""          # the table asset this flow belongs to (a quarantine flow belongs to its silver table)
    version: int = 1         # bump when the query changes incompatibly: it gets a fresh checkpoint

    @property
    def asset_name(self) -> str:
        return self.asset or self.target.name

    def apply(self, df: DataFrame, ctx: FlowContext) -> DataFrame:
        return self.transform(df, **self.params(ctx))

    def checkpoint(self, ctx: FlowContext) -> str:
        """Beside the table it feeds (same layer folder), one folder per flow and query version."""
        layer_root = f"{ctx.lake_root.rstrip('/')}/{self.target.layer}"
        return f"{layer_root}/_checkpoints/{self.target.name}/{self.name}/v{self.version}"


def _dedup(ctx: FlowContext) -> dict[str, str]:
    return {"dedup_watermark": ctx.silver_dedup_watermark}


def _gold(ctx: FlowContext) -> dict[str, str]:
    return {"watermark": ctx.gold_watermark}


FLOWS: tuple[Flow, ...] = (
    Flow("bronze_page_views", topics.PAGE_VIEWS, tables.BRONZE_PAGE_VIEWS, to_bronze),
    Flow("bronze_orders", topics.ORDERS, tables.BRONZE_ORDERS, to_bronze),
    Flow("silver_page_views", tables.BRONZE_PAGE_VIEWS, tables.SILVER_PAGE_VIEWS, to_silver_page_views, params=_dedup),
    Flow("quarantine_page_views", tables.BRONZE_PAGE_VIEWS, tables.QUARANTINE, to_quarantine_page_views,
         asset="silver_page_views"),
    Flow("silver_orders", tables.BRONZE_ORDERS, tables.SILVER_ORDERS, to_silver_orders, params=_dedup),
    Flow("quarantine_orders", tables.BRONZE_ORDERS, tables.QUARANTINE, to_quarantine_orders, asset="silver_orders"),
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
