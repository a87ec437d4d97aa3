"""How `lakehouse stream` groups the shop's flows into queries: one per topic, and one per table reading several sources."""

from __future__ import annotations

import pytest

from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.continuous import Supervisor
from lakehouse.streaming.flows import FLOWS
from lakehouse.streaming.topic_query import topic_groups, usable

pytestmark = pytest.mark.unit


def test_each_topic_query_runs_the_tables_that_read_only_its_silver():
    groups = {name: (g.bronze.name, sorted(m.name for m in g.members)) for name, g in topic_groups(list(FLOWS)).items()}
    assert groups == {
        "silver_orders": ("bronze_orders", ["gold_category_revenue_per_minute", "gold_order_lines_enriched",
                                            "gold_order_velocity", "gold_revenue_hopping", "gold_revenue_per_minute"]),
        "silver_page_views": ("bronze_page_views", ["gold_page_views_enriched", "gold_page_views_per_product_minute"]),
        "silver_payments": ("bronze_payments", []),
        "silver_products": ("bronze_products", ["dim_products"]),
        "silver_customers": ("bronze_customers", ["dim_customers"]),
    }


def test_the_stream_says_how_it_groups_the_flows():
    ctx = FlowContext(lake_root="/nowhere", kafka_bootstrap="127.0.0.1:1")
    grouped = Supervisor(None, FLOWS, ctx, one_query_per_topic=True, record_metrics=False).plan()
    assert grouped.startswith(f"{len(FLOWS)} flows as 8 queries")
    assert grouped.endswith("; gold_sessions; gold_processing_delay; gold_order_payments")
    apart = Supervisor(None, FLOWS, ctx, one_query_per_topic=False, record_metrics=False).plan()
    assert apart.startswith(f"{len(FLOWS)} flows as {len(FLOWS)} queries")


def test_a_start_reuses_a_catch_up_only_while_what_it_read_is_not_caught_up_again():
    """A flow caught up again appends rows its readers' earlier catch-ups never saw: the readers run again too."""
    group = topic_groups(list(FLOWS))["silver_orders"]
    every = {f.name: object() for f in (group.bronze, group.silver, *group.members)}
    assert usable(group, every) == every
    # Bronze's catch-up failed (the broker went away): it runs again, and so does everything downstream.
    assert usable(group, {k: v for k, v in every.items() if k != "bronze_orders"}) == {}
    # Silver's failed: bronze's stands, silver and every member run again.
    assert usable(group, {k: v for k, v in every.items() if k != "silver_orders"}) == {
        "bronze_orders": every["bronze_orders"]}
    # One member's failed: only it runs again (the others read the silver it reads).
    without = {k: v for k, v in every.items() if k != "gold_revenue_per_minute"}
    assert usable(group, without) == without
    # Catch-ups of another topic's flows are not this query's.
    assert usable(group, {**every, "bronze_payments": object()}) == every
