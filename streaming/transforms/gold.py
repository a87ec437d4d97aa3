"""Gold: event-time windows over silver, under a watermark; emitted as upserts keyed by window."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

MINUTE = "1 minute"


def to_gold_revenue_per_minute(orders: DataFrame, *, watermark: str) -> DataFrame:
    """Revenue, order count and items per one-minute tumbling event-time window and currency."""
    return (
        orders.withWatermark("occurred_at", watermark)
        .groupBy(F.window("occurred_at", MINUTE).alias("window"), "currency")
        .agg(
            F.sum("total_cents").alias("revenue_cents"),
            F.count("*").alias("orders"),
            F.sum("item_count").alias("items"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "currency",
            "revenue_cents",
            "orders",
            "items",
        )
    )


def to_gold_page_views_per_product_minute(page_views: DataFrame, *, watermark: str) -> DataFrame:
    """Views of each product's page per one-minute tumbling event-time window."""
    return (
        page_views.where(F.col("product_id").isNotNull())
        .withWatermark("occurred_at", watermark)
        .groupBy(F.window("occurred_at", MINUTE).alias("window"), "product_id")
        .agg(F.count("*").alias("views"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "product_id",
            "views",
        )
    )
