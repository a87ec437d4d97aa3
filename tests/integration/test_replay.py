"""Replay and time travel: rebuilt tables equal the live ones; a transform fixed, replayed and swapped in; streams resume.

A small pipeline (orders: bronze, silver, revenue per minute) runs against the real broker. Its gold flow
first runs with a bug (revenue in whole currency units instead of cents). Checks are made against plain
Python over the produced orders.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.batch.replay import BadReplay, StartingPoint, compare, replay, swap
from lakehouse.schemas import sources, tables, topics
from lakehouse.streaming import flows as registry
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.schemas.gold import sum_of
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)
CLEAN = Mix(late=0.0, duplicate=0.03, malformed=0.03, out_of_order=0.0)


# The bug: revenue per minute in whole currency units, not cents.
DECLARED = shop.GOLD_BY_NAME["gold_revenue_per_minute"]
BUGGY = registry.gold_flow(replace(DECLARED, kind=replace(DECLARED.kind, aggregates={
    **DECLARED.kind.aggregates, "revenue_cents": sum_of("total_cents DIV 100")})))
FIXED = [BY_NAME["bronze_orders"], BY_NAME["silver_orders"], BY_NAME["gold_revenue_per_minute"]]
WITH_BUG = FIXED[:2] + [BUGGY]


def expected_revenue(records) -> dict:
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    seen = set()
    for r in records:
        if r.topic == shop.ORDERS.topic_spec.name and r.kind == "valid" and r.event["event_id"] not in seen:
            seen.add(r.event["event_id"])
            ts = datetime.fromisoformat(r.event["occurred_at"].replace("Z", "+00:00")).astimezone(timezone.utc)
            key = (ts.replace(tzinfo=None, second=0, microsecond=0), r.event["currency"])
            out[key][0] += r.event["total_cents"]
            out[key][1] += 1
    return dict(out)


def revenue(spark, ctx, version=None) -> dict:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    rows = reader.load(shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)).collect()
    return {(r["window_start"], r["currency"]): [r["revenue_cents"], r["orders"]] for r in rows}


@pytest.fixture(scope="module")
def pipeline(spark, broker, tmp_path_factory):
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    records = [r for r in generate(600, seed=17, start=START, events_per_second=1.0, mix=CLEAN)
               if r.topic == shop.ORDERS.topic_spec.name]
    assert produce(records, bootstrap=broker.kafka_bootstrap).failed == 0
    ctx = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap,
                      max_offsets_per_trigger=40)
    for flow in WITH_BUG:
        run_flow(spark, flow, ctx)
    return {"ctx": ctx, "records": records}


def test_replays_from_a_delta_version_and_from_a_kafka_time_reproduce_the_live_tables(spark, broker, pipeline):
    """Silver from bronze at its latest version, and bronze from Kafka at a time mid-log: no differences."""
    ctx = pipeline["ctx"]
    bronze_version = DeltaTable.forPath(spark, shop.ORDERS.bronze_table.path(ctx.lake_root)).history(1).first()["version"]
    with pytest.raises(BadReplay, match=f"bronze_orders has no version {bronze_version + 5}; its versions go from 0"):
        replay(spark, ctx, "silver_orders", StartingPoint(version=bronze_version + 5), flows=FIXED[:2])
    shadow, rebuilt = replay(spark, ctx, "silver_orders", StartingPoint(version=bronze_version), flows=FIXED[:2])
    [silver] = compare(spark, ctx, shadow, rebuilt, flows=FIXED[:2])
    assert silver.rows > 0 and silver.diff.differences == 0, silver.diff.samples
    shadow.drop()

    appended = sorted(r["appended_at"] for r in spark.read.format("delta")
                      .load(shop.ORDERS.bronze_table.path(ctx.lake_root)).select("appended_at").collect())
    middle = appended[len(appended) // 2].replace(tzinfo=timezone.utc)
    shadow, rebuilt = replay(spark, ctx, "bronze_orders", StartingPoint(kafka_timestamp=middle), flows=FIXED[:2])
    rebuilt = compare(spark, ctx, shadow, rebuilt, flows=FIXED[:2])
    assert [r.table for r in rebuilt] == ["bronze_orders", "silver_orders"]
    for r in rebuilt:
        assert r.rows > 0 and r.diff.differences == 0, (r.table, r.diff.samples)
    shadow.drop()


def test_fix_a_bug_replay_swap_and_the_streams_go_on(spark, broker, pipeline):
    """The buggy gold table is rebuilt with the fixed transform, swapped in, readable before by time travel; streams resume."""
    ctx, records = pipeline["ctx"], pipeline["records"]
    buggy_version = DeltaTable.forPath(spark, shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)).history(1).first()["version"]
    expected = expected_revenue(records)
    assert revenue(spark, ctx) != expected  # the bug shows

    silver_version = DeltaTable.forPath(spark, shop.ORDERS.silver_table.path(ctx.lake_root)).history(1).first()["version"]
    shadow, rebuilt = replay(spark, ctx, "gold_revenue_per_minute", StartingPoint(version=silver_version), flows=FIXED)
    [gold_table] = compare(spark, ctx, shadow, rebuilt, flows=FIXED)
    assert gold_table.diff.changed == len(expected)  # every row's revenue differs, nothing else
    swap(spark, ctx, shadow, rebuilt, flows=FIXED)
    shadow.drop()

    assert revenue(spark, ctx) == expected
    old = revenue(spark, ctx, version=buggy_version)
    assert {k: v[1] for k, v in old.items()} == {k: v[1] for k, v in expected.items()}
    assert all(old[k][0] != expected[k][0] for k in expected if expected[k][0] >= 100)

    # More orders arrive; the fixed flows resume after the swap: nothing counted twice, nothing missed.
    more = [r for r in generate(300, seed=18, start=START + timedelta(minutes=12), events_per_second=1.0, mix=CLEAN)
            if r.topic == shop.ORDERS.topic_spec.name]
    assert produce(more, bootstrap=broker.kafka_bootstrap).failed == 0
    for flow in FIXED:
        run_flow(spark, flow, ctx)
    assert revenue(spark, ctx) == expected_revenue(records + more)
