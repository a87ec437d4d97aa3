"""The shop's gold flows: each gold table's source, transform, kind and parameters."""

from __future__ import annotations

from pyspark.sql import DataFrame

from lakehouse.streaming.context import FlowContext, duration_micros
from lakehouse.streaming.flows import Flow, enriched, passthrough, recomputed, stateful, windowed_sums
from lakehouse.streaming.transforms.dimensions import enrich_as_of
from lakehouse.pipelines.shop import sources, tables
from lakehouse.pipelines.shop import transforms as gold
from lakehouse.pipelines.shop.steps import interval_join, join_state_rows, session_windows, sliding_counts

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


ORDERS, PAGE_VIEWS = sources.ORDERS.silver_table, sources.PAGE_VIEWS.silver_table
EVENT_SOURCES = tuple(s.silver_table for s in sources.SOURCES if s.dimension is None)
DIM_PRODUCTS, DIM_CUSTOMERS = sources.PRODUCTS.dimension_table, sources.CUSTOMERS.dimension_table


def _micros(ctx: FlowContext, param: str) -> int:
    return duration_micros(ctx.params[param])


def gold_flows() -> tuple[Flow, ...]:
    """Every gold table's flow, in the order their assets are listed."""
    return (
        # Version 2: merged under the flow's own watermark (v1 upserted Spark's windowed aggregation).
        stateful("gold_revenue_per_minute", ORDERS, tables.GOLD_REVENUE_PER_MINUTE, gold.to_revenue_per_minute,
                 step=windowed_sums(("window_start", "currency"), ("revenue_cents", "orders", "items")), version=2),
        stateful("gold_page_views_per_product_minute", PAGE_VIEWS, tables.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE,
                 gold.to_page_views_per_product_minute, transform=gold.to_product_page_views,
                 step=windowed_sums(("window_start", "product_id"), ("views",)), version=2),
        stateful("gold_revenue_hopping", ORDERS, tables.GOLD_REVENUE_HOPPING, gold.to_revenue_hopping,
                 params=lambda ctx: {"size": ctx.params["hopping_window_size"],
                                     "slide": ctx.params["hopping_window_slide"]},
                 step=windowed_sums(("window_start", "currency"), ("revenue_cents", "orders"))),
        stateful("gold_order_velocity", ORDERS, tables.GOLD_ORDER_VELOCITY, passthrough,
                 step=lambda ctx: sliding_counts(window_micros=_micros(ctx, "sliding_window"),
                                                 threshold=ctx.params["sliding_threshold"]),
                 defined_by=gold.to_order_velocity),
        stateful("gold_sessions", (PAGE_VIEWS, ORDERS), tables.GOLD_SESSIONS, passthrough,
                 transform=gold.to_activity_events,
                 step=lambda ctx: session_windows(gap_micros=_micros(ctx, "session_gap")), defined_by=gold.to_sessions),
        recomputed("gold_processing_delay", EVENT_SOURCES, tables.GOLD_PROCESSING_DELAY, narrow=gold.to_delay_events,
                   compute=gold.to_processing_delay, keys=("minute", "topic"), bucket_column="minute"),
        stateful("gold_category_revenue_per_minute", ORDERS, tables.GOLD_CATEGORY_REVENUE_PER_MINUTE,
                 to_category_revenue, lookups=(DIM_PRODUCTS,),
                 step=windowed_sums(("window_start", "category", "currency"), ("revenue_cents", "units", "orders"))),
        enriched("gold_order_lines_enriched", ORDERS, tables.GOLD_ORDER_LINES_ENRICHED, to_enriched_order_lines,
                 (DIM_PRODUCTS, DIM_CUSTOMERS)),
        enriched("gold_page_views_enriched", PAGE_VIEWS, tables.GOLD_PAGE_VIEWS_ENRICHED, to_enriched_page_views,
                 (DIM_PRODUCTS, DIM_CUSTOMERS)),
        stateful("gold_order_payments", (ORDERS, sources.PAYMENTS.silver_table), tables.GOLD_ORDER_PAYMENTS,
                 passthrough, transform=gold.to_order_payment_events, state_rows=join_state_rows,
                 step=lambda ctx: interval_join(within_micros=_micros(ctx, "payment_within")),
                 defined_by=interval_join),
    )
