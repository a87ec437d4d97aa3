"""The shop's gold tables, each declared once: what it holds and answers, what it reads, its kind, its checks."""

from __future__ import annotations

from lakehouse.quality.suites import Expectation, between, in_set, not_null
from lakehouse.schemas.gold import (
    Enriched, Gold, IntervalJoin, Recomputed, Sessions, Sliding, Windowed, count, count_if, sum_of,
)
from lakehouse.schemas.pipeline import Param
from lakehouse.pipelines.shop import transforms as t
from lakehouse.pipelines.shop.sources import CURRENCIES, CUSTOMERS, ORDERS, PAGE_VIEWS, PAYMENTS, PRODUCTS, SOURCES

HOPPING_SIZE = Param("hopping_window_size", "15 minutes", "Length of the hopping revenue window.")
HOPPING_SLIDE = Param("hopping_window_slide", "1 minute", "How often a new hopping revenue window starts.")
SLIDING_WINDOW = Param("sliding_window", "30 minutes",
                       "Look-back of the per-order sliding count of a customer's earlier orders.")
SLIDING_THRESHOLD = Param("sliding_threshold", 3, "A customer with at least this many orders in the sliding "
                          "look-back before an order is flagged.", kind="int")
SESSION_GAP = Param("session_gap", "30 minutes", "Inactivity that ends a shopper's session.")
PAYMENT_WITHIN = Param("payment_within", "30 minutes", "How long after an order a payment still counts as its payment.")
PARAMS = (HOPPING_SIZE, HOPPING_SLIDE, SLIDING_WINDOW, SLIDING_THRESHOLD, SESSION_GAP, PAYMENT_WITHIN)

EVENT_SOURCES = tuple(s for s in SOURCES if s.dimension is None)


def _non_negative(*columns: str) -> list[Expectation]:
    return [between(c, 0, None) for c in columns]


# An order (l) and its payment (r); an unpaid order has no r, a payment without an order no l.
PAYMENT_COLUMNS = {
    "order_id": "coalesce(l.order_id, r.order_id)", "customer_id": "coalesce(l.customer_id, r.customer_id)",
    "ordered_at": "l.occurred_at", "total_cents": "l.total_cents", "currency": "coalesce(l.currency, r.currency)",
    "payment_id": "r.payment_id", "paid_at": "r.occurred_at", "amount_cents": "r.amount_cents",
    "payment_status": "r.status",
}


def _session_rules() -> list[Expectation]:
    import great_expectations.expectations as gxe

    return [*_non_negative("page_views", "orders"), Expectation(
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="session_end", column_B="session_start", or_equal=True),
        "fail")]


def _page_views_enriched_rules() -> list[Expectation]:
    import great_expectations.expectations as gxe

    return [*not_null("customer_tier", severity="warn"), Expectation(
        gxe.ExpectColumnValuesToNotBeNull(column="category", row_condition="product_id IS NOT NULL",
                                          condition_parser="spark"), "warn")]


GOLD = (
    # Version 2: merged under the flow's own watermark (v1 upserted Spark's windowed aggregation).
    Gold(
        "gold_revenue_per_minute", "Revenue per one-minute event-time window and currency (tumbling).",
        "How much did we sell each minute, per currency?", reads=(ORDERS,),
        kind=Windowed(size="1 minute", by=("currency",), aggregates={
            "revenue_cents": sum_of("total_cents"), "orders": count(), "items": sum_of("item_count")}),
        expectations=lambda: [*_non_negative("revenue_cents", "orders", "items"), in_set("currency", CURRENCIES)],
        example="SELECT window_start, currency, revenue_cents, orders, items FROM gold_revenue_per_minute "
                "ORDER BY revenue_cents DESC LIMIT 3",
        version=2,
    ),
    Gold(
        "gold_page_views_per_product_minute",
        "Product-page views per one-minute event-time window and product (tumbling).",
        "Which products are people looking at, minute by minute?", reads=(PAGE_VIEWS,),
        rows=t.to_product_page_views,
        kind=Windowed(size="1 minute", by=("product_id",), aggregates={"views": count()}),
        expectations=lambda: _non_negative("views"),
        example="SELECT product_id, sum(views) AS views FROM gold_page_views_per_product_minute "
                "GROUP BY product_id ORDER BY views DESC, product_id LIMIT 3",
        version=2,
    ),
    Gold(
        "gold_revenue_hopping",
        "Revenue over the last LAKEHOUSE_HOPPING_WINDOW_SIZE (15 minutes), a window every "
        "LAKEHOUSE_HOPPING_WINDOW_SLIDE (1 minute), per currency (hopping).",
        "What is our revenue over the last 15 minutes, refreshed every minute?", reads=(ORDERS,),
        kind=Windowed(size=HOPPING_SIZE, slide=HOPPING_SLIDE, by=("currency",),
                      aggregates={"revenue_cents": sum_of("total_cents"), "orders": count()}),
        expectations=lambda: [*_non_negative("revenue_cents", "orders"), in_set("currency", CURRENCIES)],
        example="SELECT window_start, window_end, currency, revenue_cents, orders FROM gold_revenue_hopping "
                "WHERE currency = 'EUR' ORDER BY window_start DESC LIMIT 3",
    ),
    Gold(
        "gold_order_velocity",
        "Each order with the number of orders its customer placed in the sliding look-back before it, flagged at "
        "the threshold.",
        "Which customers order unusually often (how many orders in the 30 minutes before each order)?",
        reads=(ORDERS,), transform=t.to_timed_orders, keys=("order_id",),
        kind=Sliding(window=SLIDING_WINDOW, by=("customer_id",), time="ordered_at", count="orders_before",
                     flag_at=SLIDING_THRESHOLD),
        time_range=("ordered_at", "ordered_at"), zorder_by=("customer_id", "ordered_at"),
        expectations=lambda: [*_non_negative("orders_before"), *not_null("customer_id", "ordered_at")],
        example="SELECT customer_id, count(*) AS orders, max(orders_before) AS most_in_look_back, "
                "count_if(flagged) AS flagged FROM gold_order_velocity GROUP BY customer_id "
                "ORDER BY flagged DESC, orders DESC, customer_id LIMIT 3",
    ),
    Gold(
        "gold_sessions",
        "Shopper sessions (page views and orders with gaps under LAKEHOUSE_SESSION_GAP): start, end, pages, whether "
        "it ended in an order.",
        "How long do shoppers browse, how many pages do they see, and which sessions end in an order?",
        reads=(PAGE_VIEWS, ORDERS), rows=t.to_activity_events,
        kind=Sessions(gap=SESSION_GAP, by=("customer_id",),
                      counts={"page_views": "kind = 'page_view'", "orders": "kind = 'order'"},
                      then={"ended_in_order": "orders > 0"}),
        zorder_by=("customer_id", "session_start"),
        expectations=_session_rules,
        example="SELECT ended_in_order, count(*) AS sessions, round(avg(page_views), 1) AS avg_pages, "
                "round(avg(timestampdiff(SECOND, session_start, session_end)) / 60, 1) AS avg_minutes, "
                "count_if(closed) AS closed FROM gold_sessions GROUP BY ended_in_order ORDER BY ended_in_order",
    ),
    Gold(
        "gold_processing_delay",
        "Per minute of event time and topic: p50, p95 and max of the event -> send, send -> broker append and "
        "append -> lake ingest delays, in ms.",
        "Where does an event's time go between happening and landing in the lake?",
        reads=EVENT_SOURCES, rows=t.to_delay_events,
        kind=Recomputed(compute=t.to_processing_delay, bucket_column="minute"), keys=("minute", "topic"),
        time_range=("minute", "minute_end"), zorder_by=("minute",),
        expectations=lambda: _non_negative("events"),
        example="SELECT topic, sum(events) AS events, max(event_to_send_p50_ms) AS send_p50_ms, "
                "max(send_to_append_p95_ms) AS append_p95_ms, max(append_to_ingest_max_ms) AS ingest_max_ms "
                "FROM gold_processing_delay GROUP BY topic ORDER BY topic",
    ),
    # An order line whose product has no version yet has no category: "unknown", recorded, not a reason to stop.
    Gold(
        "gold_category_revenue_per_minute",
        "Revenue per one-minute event-time window, product category (as of the order's time) and currency "
        "(tumbling).",
        "Which product categories sell, minute by minute?", reads=(ORDERS,), lookups=(PRODUCTS,),
        transform=t.to_category_lines,
        kind=Windowed(size="1 minute", time="ordered_at", by=("category", "currency"), aggregates={
            "revenue_cents": sum_of("line_cents"), "units": sum_of("quantity"),
            "orders": count_if("first_in_category")}),
        expectations=lambda: [*not_null("window_start", "currency"), *not_null("category", severity="warn"),
                              *_non_negative("revenue_cents", "units", "orders")],
        keys_not_null=False,
        example="SELECT category, sum(revenue_cents) AS revenue_cents, sum(units) AS units "
                "FROM gold_category_revenue_per_minute WHERE currency = 'EUR' "
                "GROUP BY category ORDER BY revenue_cents DESC LIMIT 3",
    ),
    # Every enriched row found its dimension version: a miss is a late or missing product or customer change.
    Gold(
        "gold_order_lines_enriched",
        "Order lines with the product's category and list price and the customer's tier and country as they were "
        "at the order's time.",
        "What did each product cost and which tier was the customer in when the order was placed?",
        reads=(ORDERS,), lookups=(PRODUCTS, CUSTOMERS), kind=Enriched(compute=t.to_enriched_order_lines),
        keys=("order_id", "line_no"), time_range=("ordered_at", "ordered_at"), zorder_by=("ordered_at",),
        expectations=lambda: [*_non_negative("quantity", "line_cents"),
                              *not_null("category", "customer_tier", severity="warn")],
        example="SELECT customer_tier, count(*) AS lines, sum(unit_price_cents * quantity) AS cents, "
                "count_if(unit_price_cents = list_price_cents) AS at_list_price "
                "FROM gold_order_lines_enriched GROUP BY customer_tier ORDER BY customer_tier",
    ),
    Gold(
        "gold_page_views_enriched",
        "Page views with the product's category and list price and the customer's tier as they were at the view's "
        "time.",
        "Which tiers of customers look at which categories, at the prices then shown?",
        reads=(PAGE_VIEWS,), lookups=(PRODUCTS, CUSTOMERS), kind=Enriched(compute=t.to_enriched_page_views),
        keys=("event_id",), time_range=("occurred_at", "occurred_at"), zorder_by=("occurred_at",),
        expectations=_page_views_enriched_rules,
        example="SELECT category, count(*) AS views, round(avg(list_price_cents)) AS avg_list_price "
                "FROM gold_page_views_enriched WHERE category IS NOT NULL "
                "GROUP BY category ORDER BY views DESC LIMIT 3",
    ),
    # Unpaid orders have no payment and orphan payments no order: its keys may be null, not both.
    Gold(
        "gold_order_payments",
        "Orders joined with their payments within LAKEHOUSE_PAYMENT_WITHIN: matched pairs, unpaid orders, payments "
        "without an order.",
        "Which orders were paid within 30 minutes, which went unpaid, and which payments match no order?",
        reads=(ORDERS, PAYMENTS), keys=("order_id", "payment_id"),
        kind=IntervalJoin(on=("order_id",), within=PAYMENT_WITHIN, columns=PAYMENT_COLUMNS,
                          outcomes=("matched", "unpaid", "payment_without_order")),
        time_range=("ordered_at", "paid_at"), zorder_by=("ordered_at",),
        expectations=lambda: [*not_null("order_id", "outcome"),
                              in_set("outcome", ("matched", "unpaid", "payment_without_order"), "fail")],
        keys_not_null=False,
        example="SELECT outcome, payment_status, count(*) AS rows FROM gold_order_payments "
                "GROUP BY outcome, payment_status ORDER BY outcome, payment_status",
    ),
)
GOLD_BY_NAME = {g.name: g for g in GOLD}
