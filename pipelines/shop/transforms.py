"""The shop's gold transforms: pure functions over silver rows, each used by one gold declaration (gold.py).

The `to_*_events` transforms narrow or combine the silver streams into the rows a gold table is computed
from; the others run on the on-time rows of one micro-batch (or of a bounded replay), after the flow's
writer has routed late rows away under its watermark. Window aggregates are declared, not written here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakehouse.schemas.gold import LINEAGE
from lakehouse.streaming.transforms.dimensions import enrich_as_of


def to_product_page_views(page_views: DataFrame) -> DataFrame:
    """Page views of product pages only (the others name no product)."""
    return page_views.where(F.col("product_id").isNotNull())


def to_timed_orders(orders: DataFrame) -> DataFrame:
    """Each order by its id, customer and time (`ordered_at`), as the sliding count of orders reads them."""
    return orders.select("order_id", "customer_id", F.col("occurred_at").alias("ordered_at"), "event_id")


def to_activity_events(page_views: DataFrame, orders: DataFrame) -> DataFrame:
    """A shopper's activity, one stream: page views and orders with their event time and Kafka coordinates."""
    def side(df: DataFrame, kind: str) -> DataFrame:
        return df.select("customer_id", F.lit(kind).alias("kind"), *LINEAGE)
    return side(page_views, "page_view").unionByName(side(orders, "order"))


# The three hops of an event's trip, each between two of its timestamps.
DELAY_STAGES = {
    "event_to_send": ("occurred_at", "sent_at"),       # producer: how long before it was sent
    "send_to_append": ("sent_at", "appended_at"),      # network and broker
    "append_to_ingest": ("appended_at", "ingested_at"),  # the lake: how long the log waited for bronze
}


def to_delay_events(*silvers: DataFrame) -> DataFrame:
    """Every silver event's topic, id and four timestamps, from all the sources given, as one stream."""
    columns = ("topic", "event_id", "occurred_at", "sent_at", "appended_at", "ingested_at", "event_date")
    out = silvers[0].select(*columns)
    for more in silvers[1:]:
        out = out.unionByName(more.select(*columns))
    return out


def to_processing_delay(events: DataFrame) -> DataFrame:
    """Per minute of event time and topic: p50, p95 and max of the event -> send -> broker append -> lake ingest delays (ms)."""
    aggs = [F.count(F.lit(1)).alias("events")]
    for stage, (start, end) in DELAY_STAGES.items():
        ms = (F.unix_micros(end) - F.unix_micros(start)) / 1000.0
        aggs += [
            F.percentile(ms, F.lit(0.5)).alias(f"{stage}_p50_ms"),
            F.percentile(ms, F.lit(0.95)).alias(f"{stage}_p95_ms"),
            F.max(ms).alias(f"{stage}_max_ms"),
        ]
    return (
        events.groupBy(F.date_trunc("minute", "occurred_at").alias("minute"), "topic").agg(*aggs)
        .withColumn("minute_end", F.col("minute") + F.expr("INTERVAL 1 MINUTE"))
    )


def to_order_lines(orders: DataFrame) -> DataFrame:
    """One row per order line: the order's id, customer, time and currency with the line's product, quantity and price."""
    return orders.select(
        "order_id", "customer_id", F.col("occurred_at").alias("ordered_at"), "currency", "event_id",
        F.posexplode("lines").alias("line_no", "line"),
    ).select(
        "order_id", "line_no", "customer_id", "ordered_at", "currency", "event_id",
        F.col("line.product_id").alias("product_id"), F.col("line.quantity").alias("quantity"),
        F.col("line.unit_price_cents").alias("unit_price_cents"),
        (F.col("line.quantity").cast("long") * F.col("line.unit_price_cents")).alias("line_cents"),
    )


PRODUCT_ATTRIBUTES = {"category": "category", "list_price_cents": "list_price_cents"}
CUSTOMER_ATTRIBUTES = {"tier": "customer_tier", "country": "customer_country"}


def to_category_lines(orders: DataFrame, *, dim_products: DataFrame) -> DataFrame:
    """Order lines with the product's category as of the order's time ("unknown" before its first version), each
    order's first line in a category marked, so that counting marks counts orders per category."""
    lines = enrich_as_of(to_order_lines(orders), dim_products, key="product_id", event_time="ordered_at",
                         attributes={"category": "category"})
    lines = lines.withColumn("category", F.coalesce("category", F.lit("unknown")))
    first = Window.partitionBy("order_id", "category").orderBy("line_no")
    return lines.withColumn("first_in_category", F.row_number().over(first) == 1)


def to_enriched_order_lines(orders: DataFrame, *, dim_products: DataFrame, dim_customers: DataFrame) -> DataFrame:
    """Order lines with product and customer attributes as they were at the order's time (as-of join)."""
    lines = enrich_as_of(to_order_lines(orders), dim_products, key="product_id", event_time="ordered_at",
                         attributes=PRODUCT_ATTRIBUTES)
    return enrich_as_of(lines, dim_customers, key="customer_id", event_time="ordered_at", attributes=CUSTOMER_ATTRIBUTES)


def to_enriched_page_views(page_views: DataFrame, *, dim_products: DataFrame, dim_customers: DataFrame) -> DataFrame:
    """Page views with product and customer attributes as they were at the view's time (as-of join)."""
    views = page_views.select("event_id", "occurred_at", "customer_id", "page_type", "product_id", "url")
    views = enrich_as_of(views, dim_products, key="product_id", event_time="occurred_at", attributes=PRODUCT_ATTRIBUTES)
    return enrich_as_of(views, dim_customers, key="customer_id", event_time="occurred_at", attributes=CUSTOMER_ATTRIBUTES)
