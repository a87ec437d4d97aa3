"""The shop's gold tables: what each holds, its keys, and the question it answers."""

from __future__ import annotations

from lakehouse.schemas.tables import TableSpec

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
