"""The shop: page views, orders, payments and the product and customer changelogs, with ten gold tables.

The project's default pipeline (LAKEHOUSE_PIPELINE=lakehouse.pipelines.shop), and an example of a pipeline
package: sources (`sources.py`), gold tables (`tables.py`, their transforms in `transforms.py`, their flows in
`flows.py`), data-quality rules (`rules.py`) and demo data (`generator.py`), declared once in PIPELINE below.
"""

from __future__ import annotations

from lakehouse.schemas.pipeline import Demo, Param, Pipeline, Reference
from lakehouse.pipelines.shop.sources import *  # noqa: F401,F403 (the shop's names, for its users and tests)
from lakehouse.pipelines.shop.sources import SOURCES
from lakehouse.pipelines.shop.tables import *  # noqa: F401,F403
from lakehouse.pipelines.shop.tables import GOLD


def _gold_flows():
    from lakehouse.pipelines.shop.flows import gold_flows

    return gold_flows()


def _silver_rules():
    from lakehouse.pipelines.shop.rules import silver_rules

    return silver_rules()


def _gold_suites():
    from lakehouse.pipelines.shop.rules import gold_suites

    return gold_suites()


def _events(**kwargs):
    from lakehouse.pipelines.shop.generator import ShopGenerator

    return iter(ShopGenerator(**kwargs))


PARAMS = (
    Param("hopping_window_size", "15 minutes", "Length of the hopping revenue window."),
    Param("hopping_window_slide", "1 minute", "How often a new hopping revenue window starts."),
    Param("sliding_window", "30 minutes", "Look-back of the per-order sliding count of a customer's earlier orders."),
    Param("sliding_threshold", 3, "A customer with at least this many orders in the sliding look-back before an "
          "order is flagged.", kind="int"),
    Param("session_gap", "30 minutes", "Inactivity that ends a shopper's session."),
    Param("payment_within", "30 minutes", "How long after an order a payment still counts as its payment."),
)

# One result from each gold table: the question it answers, and a query a person would type.
EXAMPLE_QUERIES: dict[str, str] = {
    "gold_revenue_per_minute": "SELECT window_start, currency, revenue_cents, orders, items FROM gold_revenue_per_minute "
                               "ORDER BY revenue_cents DESC LIMIT 3",
    "gold_page_views_per_product_minute": "SELECT product_id, sum(views) AS views FROM gold_page_views_per_product_minute "
                                          "GROUP BY product_id ORDER BY views DESC, product_id LIMIT 3",
    "gold_revenue_hopping": "SELECT window_start, window_end, currency, revenue_cents, orders FROM gold_revenue_hopping "
                            "WHERE currency = 'EUR' ORDER BY window_start DESC LIMIT 3",
    "gold_order_velocity": "SELECT customer_id, count(*) AS orders, max(orders_before) AS most_in_look_back, "
                           "count_if(flagged) AS flagged FROM gold_order_velocity GROUP BY customer_id "
                           "ORDER BY flagged DESC, orders DESC, customer_id LIMIT 3",
    "gold_sessions": "SELECT ended_in_order, count(*) AS sessions, round(avg(page_views), 1) AS avg_pages, "
                     "round(avg(timestampdiff(SECOND, session_start, session_end)) / 60, 1) AS avg_minutes, "
                     "count_if(closed) AS closed FROM gold_sessions GROUP BY ended_in_order ORDER BY ended_in_order",
    "gold_category_revenue_per_minute": "SELECT category, sum(revenue_cents) AS revenue_cents, sum(units) AS units "
                                        "FROM gold_category_revenue_per_minute WHERE currency = 'EUR' "
                                        "GROUP BY category ORDER BY revenue_cents DESC LIMIT 3",
    "gold_order_lines_enriched": "SELECT customer_tier, count(*) AS lines, sum(unit_price_cents * quantity) AS cents, "
                                 "count_if(unit_price_cents = list_price_cents) AS at_list_price "
                                 "FROM gold_order_lines_enriched GROUP BY customer_tier ORDER BY customer_tier",
    "gold_page_views_enriched": "SELECT category, count(*) AS views, round(avg(list_price_cents)) AS avg_list_price "
                                "FROM gold_page_views_enriched WHERE category IS NOT NULL "
                                "GROUP BY category ORDER BY views DESC LIMIT 3",
    "gold_processing_delay": "SELECT topic, sum(events) AS events, max(event_to_send_p50_ms) AS send_p50_ms, "
                             "max(send_to_append_p95_ms) AS append_p95_ms, max(append_to_ingest_max_ms) AS ingest_max_ms "
                             "FROM gold_processing_delay GROUP BY topic ORDER BY topic",
    "gold_order_payments": "SELECT outcome, payment_status, count(*) AS rows FROM gold_order_payments "
                           "GROUP BY outcome, payment_status ORDER BY outcome, payment_status",
}

PIPELINE = Pipeline(
    name="shop",
    description="An online shop: what shoppers look at, order and pay, with its catalog and customers over time.",
    sources=SOURCES,
    gold=GOLD,
    gold_flows=_gold_flows,
    params=PARAMS,
    silver_rules=_silver_rules,
    gold_suites=_gold_suites,
    # Gold tables whose events can be counted: the silver table, what one silver event adds to the gold count,
    # and how to count the gold table (an SQL aggregate).
    gold_counts={
        "gold_revenue_per_minute": ("silver_orders", "1", "sum(orders)"),
        "gold_order_velocity": ("silver_orders", "1", "count(*)"),
        "gold_order_lines_enriched": ("silver_orders", "size(lines)", "count(*)"),
        "gold_page_views_enriched": ("silver_page_views", "1", "count(*)"),
    },
    references=(Reference("silver_payments", "order_id", "silver_orders", "payment_id"),),
    example_queries=EXAMPLE_QUERIES,
    demo=Demo(events=_events, topics=tuple(s.topic for s in SOURCES)),
)
