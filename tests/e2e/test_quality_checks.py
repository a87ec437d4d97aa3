"""Blocking quality checks in a real Dagster run: a fail rule stops its table and keeps the tables downstream away.

The shop's fail rules are invariants the flows already guarantee (keys present and unique), so no input
can break them; this test plants a fail rule on silver_orders (orders above 1,000.00) the way a user
edits quality/suites.py, and sends one order above it.
"""

from __future__ import annotations

import re
from datetime import timedelta

import dagster as dg
import great_expectations.expectations as gxe
import pytest

from lakehouse.orchestration import runs
from lakehouse.orchestration.location import build_definitions
from lakehouse.quality import suites
from lakehouse.quality.report import build_data_docs
from lakehouse.quality.suites import Expectation
from lakehouse.schemas import topics
from lakehouse.streaming.kafka_topics import ensure_topics
from tests.integration.test_bad_input import START, encode, order, page_view, send
from lakehouse.pipelines import shop


LIMIT = Expectation(gxe.ExpectColumnValuesToBeBetween(column="total_cents", max_value=100_000), "fail")


@pytest.fixture
def planted_rule(monkeypatch):
    monkeypatch.setitem(suites.silver_rules(), "orders", [*suites.silver_rules()["orders"], LIMIT])


def test_a_fail_rule_blocks_the_tables_downstream_in_a_dagster_run(spark, broker, planted_rule):
    """silver_orders' check fails with the rule and offsets; gold tables of orders are not run; page views go on."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    orders = [order(f"o{i}", START + timedelta(seconds=i)) for i in range(4)]
    big = order("big", START + timedelta(seconds=9), lines=[{"product_id": "p-1", "quantity": 1, "unit_price_cents": 250_000}])
    order_coords = send(broker.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in orders + [big]])
    send(broker.kafka_bootstrap, shop.PAGE_VIEWS.topic_spec.name,
         [encode(page_view(f"v{i}", START + timedelta(seconds=i))) for i in range(3)])

    instance = dg.DagsterInstance.ephemeral()
    job = build_definitions(broker).resolve_job_def("catch_up")
    result = job.execute_in_process(instance=instance, raise_on_error=False, run_config={"ops": {"bring_up_to_date": {
        "config": {"assets": ["bronze_orders", "silver_orders", "gold_revenue_per_minute", "gold_order_velocity",
                              "bronze_page_views", "silver_page_views", "gold_page_views_per_product_minute"]}}}})

    assert not result.success
    message = runs.failure_message(result)
    assert f"silver_orders: {LIMIT.name} failed for 1 of 5 rows" in message, message
    _, partition, offset = order_coords[-1]
    assert f"shop.orders.v1 partition {partition} offsets" in message and str(offset) in message

    # The result object leaves out a failed step's events; the instance's event log has them all.
    logged = [e.dagster_event for e in instance.all_logs(result.run_id) if e.dagster_event is not None]
    checks = {(c.asset_key.to_user_string(), c.check_name): c for c in (
        e.event_specific_data for e in logged if e.event_type_value == "ASSET_CHECK_EVALUATION")}
    assert not checks[("silver_orders", "expectations")].passed
    assert checks[("silver_orders", "expectations")].severity == dg.AssetCheckSeverity.ERROR
    assert checks[("silver_page_views", "expectations")].passed

    materialized = {e.event_specific_data.materialization.asset_key.to_user_string()
                    for e in logged if e.event_type_value == "ASSET_MATERIALIZATION"}
    assert {"bronze_orders", "bronze_page_views", "silver_page_views", "gold_page_views_per_product_minute"} <= materialized
    assert not materialized & {"silver_orders", "gold_revenue_per_minute", "gold_order_velocity"}

    # The report shows the failing rule on silver_orders.
    index = build_data_docs(broker.quality_dir)
    assert index is not None
    pages = "\n".join(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", p.read_text()))
                      for p in index.parent.rglob("validations/silver_orders/**/*.html"))
    assert re.search(r"less than or equal to 100000(\.0)? \. 1 unexpected values found", pages), pages[-2000:]
    assert "Sampled Unexpected Values 250000" in pages
