"""Blocking quality checks in a real Dagster run: a fail rule stops its table and keeps the tables downstream away.

The shop's fail rules are invariants the flows already guarantee (keys present and unique), so no input
can break them; this test plants a fail rule on silver_orders (orders above 1,000.00) the way a user
edits quality/suites.py, and sends one order above it. The run's Data Docs then open in a browser with no
network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

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
from lakehouse.schemas.tables import QUALITY_RESULTS
from tests.browser import offline_page


LIMIT = Expectation(gxe.ExpectColumnValuesToBeBetween(column="total_cents", max_value=100_000), "fail")


@dataclass
class BlockedRun:
    """The Dagster run of the module: its result, its instance's events, the orders' Kafka coordinates."""

    result: dg.ExecuteInProcessResult
    logged: list
    order_coords: list
    index_before: int | None    # the Data Docs index's mtime before the run (None: there was none)
    index_after: int | None     # and right after it, before anything else builds them


def _index(quality_dir: str) -> Path:
    return Path(quality_dir) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


def _index_mtime(quality_dir: str) -> int | None:
    return _index(quality_dir).stat().st_mtime_ns if _index(quality_dir).exists() else None


@pytest.fixture(scope="module")
def blocked_run(spark, broker) -> BlockedRun:
    """One catch-up with a fail rule planted on silver_orders (orders above 1,000.00) and one order above it."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    orders = [order(f"o{i}", START + timedelta(seconds=i)) for i in range(4)]
    big = order("big", START + timedelta(seconds=9), lines=[{"product_id": "p-1", "quantity": 1, "unit_price_cents": 250_000}])
    order_coords = send(broker.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in orders + [big]])
    send(broker.kafka_bootstrap, shop.PAGE_VIEWS.topic_spec.name,
         [encode(page_view(f"v{i}", START + timedelta(seconds=i))) for i in range(3)])
    before = _index_mtime(broker.quality_dir)

    instance = dg.DagsterInstance.ephemeral()
    job = build_definitions(broker).resolve_job_def("catch_up")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(suites.silver_rules(), "orders", [*suites.silver_rules()["orders"], LIMIT])
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config={"ops": {"bring_up_to_date": {
            "config": {"assets": ["bronze_orders", "silver_orders", "gold_revenue_per_minute", "gold_order_velocity",
                                  "bronze_page_views", "silver_page_views", "gold_page_views_per_product_minute"]}}}})
    # The result object leaves out a failed step's events; the instance's event log has them all.
    logged = [e.dagster_event for e in instance.all_logs(result.run_id) if e.dagster_event is not None]
    return BlockedRun(result, logged, order_coords, before, _index_mtime(broker.quality_dir))


def _checks(run: BlockedRun) -> dict:
    return {(c.asset_key.to_user_string(), c.check_name): c for c in (
        e.event_specific_data for e in run.logged if e.event_type_value == "ASSET_CHECK_EVALUATION")}


def test_a_fail_rule_blocks_the_tables_downstream_in_a_dagster_run(broker, blocked_run):
    """silver_orders' check fails with the rule and offsets; gold tables of orders are not run; page views go on."""
    result, order_coords = blocked_run.result, blocked_run.order_coords
    assert not result.success
    message = runs.failure_message(result)
    assert f"silver_orders: {LIMIT.name} failed for 1 of 5 rows" in message, message
    _, partition, offset = order_coords[-1]
    assert f"shop.orders.v1 partition {partition} offsets" in message and str(offset) in message

    logged = blocked_run.logged
    checks = _checks(blocked_run)
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


ICON_FONT = "Font Awesome 6 Free"
ICONS = """els => els.map(e => ({cls: e.className, font: getComputedStyle(e, '::before').fontFamily,
                               width: e.getBoundingClientRect().width}))"""
FONT_LOADED = f"[...document.fonts].some(f => f.family.includes('{ICON_FONT}') && f.status === 'loaded')"


def test_the_run_refreshes_data_docs_that_open_offline_with_status_icons(spark, broker, blocked_run):
    """Offline, the index the run built lists each validated table, and a validation page draws its status icons."""
    assert blocked_run.index_after is not None and blocked_run.index_after != blocked_run.index_before
    validated = {r.table for r in spark.read.format("delta").load(QUALITY_RESULTS.path(broker.lake_root))
                 .select("table").distinct().collect()}
    assert {"silver_orders", "silver_page_views"} <= validated

    with offline_page() as browser:
        page = browser.page
        page.goto(_index(broker.quality_dir).as_uri())
        page.locator("#Validation-Results tbody tr").first.wait_for(timeout=15_000)   # drawn by bootstrap-table
        listed = set(page.locator("#Validation-Results tbody td").all_inner_texts())
        assert validated <= {t.strip() for t in listed}, listed

        # A row opens its validation page (bootstrap-table's click handler, so the scripts ran).
        page.locator("#Validation-Results tbody td", has_text=re.compile(r"^silver_orders$")).first.click()
        page.wait_for_url(re.compile(r"/validations/silver_orders/.+\.html$"))
        page.wait_for_load_state("load")
        page.evaluate("document.fonts.ready.then(() => true)")
        icons = page.locator("i.fas").evaluate_all(ICONS)
        kinds = {c for i in icons for c in i["cls"].split() if c in ("fa-check-circle", "fa-times")}
        assert kinds == {"fa-check-circle", "fa-times"}, icons       # rules that passed, and the planted one that failed
        assert all(ICON_FONT in i["font"] and i["width"] > 0 for i in icons), icons
        assert page.evaluate(FONT_LOADED)
        assert browser.blocked == []
