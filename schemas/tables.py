"""Delta table specs: layer, unique key, partitioning; one place that says where each table lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from lakehouse.schemas import from_sources

Layer = Literal["bronze", "silver", "gold"]


@dataclass(frozen=True)
class TableSpec:
    """One Delta table under the lake root."""

    name: str
    layer: Layer
    description: str
    keys: tuple[str, ...]                 # what makes a row unique
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    time_range: tuple[str, str] | None = None   # columns whose min and max give the event time the table covers
    question: str = ""                    # the business question a gold table answers
    zorder_by: tuple[str, ...] = ()       # columns its queries filter on: nightly OPTIMIZE clusters files by them
    suite: str | None = None              # the expectation suite its batches are checked against (quality/suites.py);
                                          # None: the suite named after the table

    def path(self, lake_root: str) -> str:
        """Where the table lives: <lake_root>/<layer>/<name> (a folder or an object-store URI)."""
        return f"{lake_root.rstrip('/')}/{self.layer}/{self.name}"


KAFKA_COORDINATES = ("topic", "partition", "offset")

QUARANTINE = TableSpec(
    "quarantine", "silver", "Records that failed parsing or their contract: reason, raw bytes, Kafka coordinates.",
    KAFKA_COORDINATES,
)
LATE_ARRIVALS = TableSpec(
    "late_arrivals", "silver",
    "Valid events that arrived behind a flow's watermark: the flow, event time, watermark, lateness, Kafka coordinates.",
    ("flow", "topic", "partition", "offset"),
)
WINDOW = ("window_start", "window_end")

GOLD_REVENUE_PER_MINUTE = TableSpec(
    "gold_revenue_per_minute", "gold", "Revenue per one-minute event-time window and currency (tumbling).",
    ("window_start", "currency"), time_range=WINDOW, zorder_by=("window_start",),
    question="How much did we sell each minute, per currency?",
)
GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE = TableSpec(
    "gold_page_views_per_product_minute", "gold", "Product-page views per one-minute event-time window and product (tumbling).",
    ("window_start", "product_id"), time_range=WINDOW, zorder_by=("window_start",),
    question="Which products are people looking at, minute by minute?",
)
GOLD_REVENUE_HOPPING = TableSpec(
    "gold_revenue_hopping", "gold",
    "Revenue over the last LAKEHOUSE_HOPPING_WINDOW_SIZE (15 minutes), a window every LAKEHOUSE_HOPPING_WINDOW_SLIDE (1 minute), per currency (hopping).",
    ("window_start", "currency"), time_range=WINDOW, zorder_by=("window_start",),
    question="What is our revenue over the last 15 minutes, refreshed every minute?",
)
GOLD_ORDER_VELOCITY = TableSpec(
    "gold_order_velocity", "gold",
    "Each order with the number of orders its customer placed in the sliding look-back before it, flagged at the threshold.",
    ("order_id",), time_range=("ordered_at", "ordered_at"), zorder_by=("customer_id", "ordered_at"),
    question="Which customers order unusually often (how many orders in the 30 minutes before each order)?",
)
GOLD_SESSIONS = TableSpec(
    "gold_sessions", "gold",
    "Shopper sessions (page views and orders with gaps under LAKEHOUSE_SESSION_GAP): start, end, pages, whether it ended in an order.",
    ("customer_id", "session_start"), time_range=("session_start", "session_end"),
    zorder_by=("customer_id", "session_start"),
    question="How long do shoppers browse, how many pages do they see, and which sessions end in an order?",
)
GOLD_ORDER_PAYMENTS = TableSpec(
    "gold_order_payments", "gold",
    "Orders joined with their payments within LAKEHOUSE_PAYMENT_WITHIN: matched pairs, unpaid orders, payments without an order.",
    ("order_id", "payment_id"), time_range=("ordered_at", "paid_at"), zorder_by=("ordered_at",),
    question="Which orders were paid within 30 minutes, which went unpaid, and which payments match no order?",
)

GOLD_PROCESSING_DELAY = TableSpec(
    "gold_processing_delay", "gold",
    "Per minute of event time and topic: p50, p95 and max of the event -> send, send -> broker append and append -> lake ingest delays, in ms.",
    ("minute", "topic"), time_range=("minute", "minute_end"), zorder_by=("minute",),
    question="Where does an event's time go between happening and landing in the lake?",
)

GOLD_CATEGORY_REVENUE_PER_MINUTE = TableSpec(
    "gold_category_revenue_per_minute", "gold",
    "Revenue per one-minute event-time window, product category (as of the order's time) and currency (tumbling).",
    ("window_start", "category", "currency"), time_range=WINDOW, zorder_by=("window_start",),
    question="Which product categories sell, minute by minute?",
)
GOLD_ORDER_LINES_ENRICHED = TableSpec(
    "gold_order_lines_enriched", "gold",
    "Order lines with the product's category and list price and the customer's tier and country as they were at the order's time.",
    ("order_id", "line_no"), time_range=("ordered_at", "ordered_at"), zorder_by=("ordered_at",),
    question="What did each product cost and which tier was the customer in when the order was placed?",
)
GOLD_PAGE_VIEWS_ENRICHED = TableSpec(
    "gold_page_views_enriched", "gold",
    "Page views with the product's category and list price and the customer's tier as they were at the view's time.",
    ("event_id",), time_range=("occurred_at", "occurred_at"), zorder_by=("occurred_at",),
    question="Which tiers of customers look at which categories, at the prices then shown?",
)

GOLD = (GOLD_REVENUE_PER_MINUTE, GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE, GOLD_REVENUE_HOPPING, GOLD_ORDER_VELOCITY,
        GOLD_SESSIONS, GOLD_ORDER_PAYMENTS, GOLD_PROCESSING_DELAY, GOLD_CATEGORY_REVENUE_PER_MINUTE,
        GOLD_ORDER_LINES_ENRICHED, GOLD_PAGE_VIEWS_ENRICHED)


# Bronze and silver tables follow from the source declarations (schemas/sources.py).
__getattr__ = from_sources(__name__, {
    "BRONZE_PAGE_VIEWS": lambda s: s.PAGE_VIEWS.bronze_table,
    "BRONZE_ORDERS": lambda s: s.ORDERS.bronze_table,
    "SILVER_PAGE_VIEWS": lambda s: s.PAGE_VIEWS.silver_table,
    "SILVER_ORDERS": lambda s: s.ORDERS.silver_table,
    "ALL": lambda s: all_tables(s.SOURCES),
    "BY_NAME": lambda s: {spec.name: spec for spec in all_tables(s.SOURCES)},
})


def all_tables(declared: Iterable[Any]) -> tuple[TableSpec, ...]:
    """Every table: each source's bronze and silver, then quarantine, late arrivals, gold and the quality results."""
    declared = tuple(declared)
    return (
        *(s.bronze_table for s in declared),
        *(s.silver_table for s in declared),
        *(s.dimension_table for s in declared if s.dimension is not None),
        QUARANTINE,
        LATE_ARRIVALS,
        *GOLD,
        QUALITY_RESULTS,
        STREAM_PROGRESS,
    )


QUALITY_RESULTS = TableSpec(
    "quality_results", "silver",
    "One row per expectation per validated batch: table, suite, lane, micro-batch id, Kafka offsets or partitions, "
    "severity, success, observed value.",
    ("table", "lane", "flow", "batch_id", "expectation", "validated_at"),
)


STREAM_PROGRESS = TableSpec(
    "stream_progress", "silver",
    "One row per micro-batch of every query (continuous or catch-up): input rows, rows per second, batch duration "
    "and its parts, Kafka end offsets and lag per partition, state rows and memory, watermark.",
    ("query", "run_id", "batch_id"), time_range=("recorded_at", "recorded_at"),
)
