"""Gold tables enriched as of the event's time (the product flows, not a test query) against plain Python.

A generator run with changing list prices, categories' products and customer tiers goes through the
real broker and every flow; the enriched order lines, the enriched page views and the revenue per
category equal a reference that looks each attribute up in the changes the generator emitted, as of
the event's time. A price change produced after every order, and a rebuild of the table from the
log, leave the enrichment as it was.
"""

from __future__ import annotations

import shutil
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

from lakehouse.schemas import sources, tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import GeneratedRecord, Mix, ShopGenerator, iso
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
N = 900
ENTITIES = ("products", "customers", "orders", "page_views")
UPSTREAM = (*(f"bronze_{e}" for e in ENTITIES), *(f"silver_{e}" for e in ENTITIES), "dim_products", "dim_customers")
GOLD = ("gold_category_revenue_per_minute", "gold_order_lines_enriched", "gold_page_views_enriched")


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def as_of(changes: list[dict], key: str, value: str, at: datetime, attribute: str):
    """The attribute of the latest change of `value` at or before `at` (ties: the larger event id), or None."""
    found = [(instant(c["occurred_at"]), c["event_id"], c[attribute]) for c in changes
             if c[key] == value and instant(c["occurred_at"]) <= at]
    return max(found)[2] if found else None


def run_all(spark, ctx, names):
    return {name: run_flow(spark, BY_NAME[name], ctx) for name in names}


@pytest.fixture(scope="module")
def lake(spark, broker, tmp_path_factory):
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    gen = ShopGenerator(seed=41, start=START, events_per_second=2.0, dimension_changes=0.05,
                        mix=Mix(out_of_order=0.05, late=0.0, duplicate=0.03, malformed=0.02))
    it = iter(gen)
    records = [next(it) for _ in range(N)]
    assert produce(records, bootstrap=broker.kafka_bootstrap).delivered == N
    ctx = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap)
    run_all(spark, ctx, UPSTREAM + GOLD)
    valid = defaultdict(dict)
    for r in records:
        if r.kind == "valid":
            valid[r.topic][r.event["event_id"]] = r.event
    return {t: list(v.values()) for t, v in valid.items()}, ctx


def enriched_lines(spark, ctx) -> set[tuple]:
    df = spark.read.format("delta").load(shop.GOLD_ORDER_LINES_ENRICHED.path(ctx.lake_root))
    return {tuple(r) for r in df.select("order_id", "line_no", "product_id", "unit_price_cents", "list_price_cents",
                                        "category", "customer_tier", "customer_country").collect()}


def expected_lines(valid) -> set[tuple]:
    products, customers = valid[shop.PRODUCTS.topic], valid[shop.CUSTOMERS.topic]
    out = set()
    for o in valid[shop.ORDERS.topic]:
        at = instant(o["occurred_at"])
        for n, line in enumerate(o["lines"]):
            p = line["product_id"]
            out.add((o["order_id"], n, p, line["unit_price_cents"],
                     as_of(products, "product_id", p, at, "list_price_cents"), as_of(products, "product_id", p, at, "category"),
                     as_of(customers, "customer_id", o["customer_id"], at, "tier"),
                     as_of(customers, "customer_id", o["customer_id"], at, "country")))
    return out


def test_order_lines_carry_the_attributes_in_force_at_the_order(spark, lake):
    """Every line's list price, category, tier and country equal the generator's changes looked up as of the order."""
    valid, ctx = lake
    expected = expected_lines(valid)
    assert enriched_lines(spark, ctx) == expected
    # The generator prices an order at the list price in force, so the as-of price is the one charged.
    assert all(line[3] == line[4] for line in expected)
    changed = {c["product_id"] for c in valid[shop.PRODUCTS.topic]
               if instant(c["occurred_at"]) > START - timedelta(minutes=30)}
    assert changed, "the run changed no product: the test would not tell as-of from latest"


def test_page_views_carry_the_attributes_in_force_at_the_view(spark, lake):
    """Each page view's category, list price and tier equal the generator's changes as of its time."""
    valid, ctx = lake
    products, customers = valid[shop.PRODUCTS.topic], valid[shop.CUSTOMERS.topic]
    expected = set()
    for v in valid[shop.PAGE_VIEWS.topic]:
        at, p = instant(v["occurred_at"]), v["product_id"]
        expected.add((v["event_id"], p, as_of(products, "product_id", p, at, "category") if p else None,
                      as_of(products, "product_id", p, at, "list_price_cents") if p else None,
                      as_of(customers, "customer_id", v["customer_id"], at, "tier")))
    df = spark.read.format("delta").load(shop.GOLD_PAGE_VIEWS_ENRICHED.path(ctx.lake_root))
    got = {tuple(r) for r in df.select("event_id", "product_id", "category", "list_price_cents", "customer_tier").collect()}
    assert got == expected


def test_revenue_per_category_uses_the_category_as_of_the_order(spark, lake):
    """Revenue, units and orders per minute, category and currency equal a plain-Python fold over the lines."""
    valid, ctx = lake
    products = valid[shop.PRODUCTS.topic]
    expected = defaultdict(lambda: [0, 0, set()])
    for o in valid[shop.ORDERS.topic]:
        at = instant(o["occurred_at"])
        minute = at.replace(second=0, microsecond=0, tzinfo=None)
        for line in o["lines"]:
            category = as_of(products, "product_id", line["product_id"], at, "category") or "unknown"
            acc = expected[(minute, category, o["currency"])]
            acc[0] += line["quantity"] * line["unit_price_cents"]
            acc[1] += line["quantity"]
            acc[2].add(o["order_id"])
    df = spark.read.format("delta").load(shop.GOLD_CATEGORY_REVENUE_PER_MINUTE.path(ctx.lake_root))
    got = {(r.window_start, r.category, r.currency): (r.revenue_cents, r.units, r.orders) for r in df.collect()}
    assert got == {k: (v[0], v[1], len(v[2])) for k, v in expected.items()}
    assert len({k[1] for k in got}) >= 3


def test_a_later_change_and_a_rebuild_leave_the_enrichment_as_it_was(spark, broker, lake):
    """New list prices after every order change no order line, in the stream and after the table is rebuilt from the log."""
    valid, ctx = lake
    before = enriched_lines(spark, ctx)
    last_order = max(instant(o["occurred_at"]) for o in valid[shop.ORDERS.topic])
    ordered = sorted({line[2] for line in before})[:5]
    latest = {p: max((instant(c["occurred_at"]), c["event_id"], c) for c in valid[shop.PRODUCTS.topic]
                     if c["product_id"] == p)[2] for p in ordered}
    changes = []
    for i, p in enumerate(ordered):
        event = {**latest[p], "event_id": str(uuid.uuid4()), "occurred_at": iso(last_order + timedelta(minutes=1)),
                 "list_price_cents": latest[p]["list_price_cents"] * 2 + 1}
        changes.append(GeneratedRecord(index=10**6 + i, topic=shop.PRODUCTS.topic, key=p.encode(), kind="valid",
                                       event=event))
    assert produce(changes, bootstrap=broker.kafka_bootstrap).delivered == len(changes)
    run_all(spark, ctx, ("bronze_products", "silver_products", "dim_products", "gold_order_lines_enriched"))
    dim = spark.read.format("delta").load(shop.PRODUCTS.dimension_table.path(ctx.lake_root))
    assert dim.where(F.col("event_id").isin([c.event["event_id"] for c in changes])).count() == len(changes)
    assert enriched_lines(spark, ctx) == before

    # Rebuild the enriched table from the log: the flow reads silver from the start again.
    flow = BY_NAME["gold_order_lines_enriched"]
    shutil.rmtree(shop.GOLD_ORDER_LINES_ENRICHED.path(ctx.lake_root))
    shutil.rmtree(flow.checkpoint(ctx))
    run_flow(spark, flow, ctx)
    assert enriched_lines(spark, ctx) == before == expected_lines(valid)
