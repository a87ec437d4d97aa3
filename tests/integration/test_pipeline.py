"""Real broker, real Spark, real Delta: every layer checked against plain Python over the produced events."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import datetime, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.schemas import sources, tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import FLOWS
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.runner import run_flow
from lakehouse.streaming.topic_query import topic_groups
from lakehouse.streaming.topic_runs import takeover
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

N = 3000
MIX = Mix(out_of_order=0.05, late=0.02, duplicate=0.04, malformed=0.04)
START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)


def minute(iso_ts: str) -> str:
    return datetime.fromisoformat(iso_ts.replace("Z", "+00:00")).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M")


@pytest.fixture(scope="module")
def run(spark, broker, tmp_path_factory):
    """Produce N events with known faults, then run every flow once to catch up."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    records = generate(N, seed=11, start=START, events_per_second=5.0, mix=MIX)
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == N and report.failed == 0
    ctx = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap)
    # As a catch-up runs them by default: three queries at once, each topic's flows in one query (on a fresh lake one
    # query takes each topic's bronze, silver and the tables that read only that silver). Every check below holds.
    outcomes = list(run_flows(spark, FLOWS, ctx, parallel=3, one_query_per_topic=True))
    assert [o.error for o in outcomes if o.error] == []
    flow_runs = {o.flow.name: o.run for o in outcomes}
    return records, report, ctx, flow_runs


def read(spark, ctx, spec):
    return spark.read.format("delta").load(spec.path(ctx.lake_root))


def test_the_mix_has_every_kind_of_fault(run):
    """The produced batch really contains malformed, duplicate, late and out-of-order records."""
    records, *_ = run
    kinds = Counter(r.kind for r in records)
    assert kinds["malformed"] > 20 and kinds["duplicate"] > 20
    assert sum(r.late for r in records) > 5 and sum(r.out_of_order for r in records) > 20


def test_bronze_holds_exactly_each_record_once(spark, run):
    """Bronze has N rows whose (topic, partition, offset) are unique and equal the broker's delivery reports."""
    records, report, ctx, _ = run
    rows = [r for s in sources.SOURCES for r in read(spark, ctx, s.bronze_table).select("topic", "partition", "offset").collect()]
    coords = [(r.topic, r.partition, r.offset) for r in rows]
    assert len(coords) == N
    assert len(set(coords)) == N
    assert set(coords) == {(d.topic, d.partition, d.offset) for d in report.deliveries.values()}


def test_bronze_keeps_raw_bytes_headers_and_three_timestamps(spark, run):
    """Bronze values are the exact bytes sent (malformed ones too), with headers and three timestamps."""
    records, report, ctx, _ = run
    by_coord = {(d.topic, d.partition, d.offset): records[i] for i, d in report.deliveries.items()}
    rows = read(spark, ctx, shop.ORDERS.bronze_table).collect()
    for row in rows:
        record = by_coord[(row.topic, row.partition, row.offset)]
        assert row.key == record.key
        assert dict((h.key, h.value) for h in row.headers)["schema"] == b"shop.orders.v1"
        assert row.appended_at is not None and row.ingested_at is not None
        # Bronze never parses or repairs: broken bytes stay exactly as broken as they were sent.
        if record.corruption == "invalid_utf8":
            assert bytes(row.value).startswith(b"\xff\xfe")
        elif record.corruption == "truncated_json":
            with pytest.raises(ValueError):
                json.loads(bytes(row.value))
    sample = next(r for r in rows if by_coord[(r.topic, r.partition, r.offset)].kind == "valid")
    assert b'"sent_at"' in sample.value and b'"occurred_at"' in sample.value


def test_silver_holds_each_valid_event_once(spark, run):
    """Silver event ids are unique and equal the ids of the valid events produced, per entity."""
    records, _, ctx, _ = run
    for spec, topic in ((shop.ORDERS.silver_table, shop.ORDERS.topic_spec), (shop.PAGE_VIEWS.silver_table, shop.PAGE_VIEWS.topic_spec)):
        ids = [r.event_id for r in read(spark, ctx, spec).select("event_id").collect()]
        expected = {r.event["event_id"] for r in records if r.kind == "valid" and r.topic == topic.name}
        assert len(ids) == len(set(ids))
        assert set(ids) == expected


def test_quarantine_has_every_bad_record_with_its_reason(spark, run):
    """Each malformed record is in quarantine once, at its Kafka coordinates, with the reason it was built to fail."""
    records, report, ctx, _ = run
    expected = {
        (d.topic, d.partition, d.offset): records[i].expected_reason
        for i, d in report.deliveries.items() if records[i].kind == "malformed"
    }
    rows = read(spark, ctx, tables.QUARANTINE).select("topic", "partition", "offset", "reason", "value").collect()
    got = {(r.topic, r.partition, r.offset): r.reason for r in rows}
    assert len(rows) == len(got)
    assert got == expected
    assert all(r.value for r in rows)  # raw bytes kept


def test_every_bronze_record_is_accounted_for(spark, run):
    """bronze = silver + quarantine + late arrivals + duplicates, and the duplicates dropped are those produced."""
    records, _, ctx, flow_runs = run
    bronze = sum(read(spark, ctx, s.bronze_table).count() for s in sources.SOURCES)
    silver = sum(read(spark, ctx, s.silver_table).count() for s in sources.SOURCES)
    quarantine = read(spark, ctx, tables.QUARANTINE).count()
    duplicates = sum(r.kind == "duplicate" for r in records)
    # One catch-up batch per flow: nothing is behind the dedup watermark (late_arrivals exists, empty, from the start).
    assert read(spark, ctx, tables.LATE_ARRIVALS).count() == 0
    assert bronze - silver - quarantine == duplicates
    # The runner's own accounting agrees with the table contents.
    assert sum(flow_runs[f"bronze_{s.entity}"].rows_written for s in sources.SOURCES) == bronze
    splits = [flow_runs[f"silver_{s.entity}"].silver for s in sources.SOURCES]
    assert sum(s.quarantined for s in splits) == quarantine
    assert sum(s.duplicates for s in splits) == duplicates
    assert sum(s.silver for s in splits) == silver
    assert sum(s.late for s in splits) == 0


def test_bronze_run_reports_kafka_offsets_per_partition(run):
    """The bronze run's per-partition offset ranges add up to the records delivered to that topic."""
    _, report, _, flow_runs = run
    for flow, topic in (("bronze_orders", shop.ORDERS.topic_spec), ("bronze_page_views", shop.PAGE_VIEWS.topic_spec)):
        offsets = flow_runs[flow].kafka_offsets
        assert set(offsets) == {f"{topic.name}/{p}" for p in range(topic.partitions)}
        assert sum(o["count"] for o in offsets.values()) == report.by_topic[topic.name]


def test_gold_revenue_per_minute_equals_plain_python(spark, run):
    """Revenue, orders and items per (minute, currency) equal a Python fold over the valid orders produced."""
    records, _, ctx, _ = run
    expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in records:
        if r.kind == "valid" and r.topic == shop.ORDERS.topic_spec.name:
            acc = expected[(minute(r.event["occurred_at"]), r.event["currency"])]
            acc[0] += r.event["total_cents"]
            acc[1] += 1
            acc[2] += sum(line["quantity"] for line in r.event["lines"])
    rows = read(spark, ctx, shop.GOLD_REVENUE_PER_MINUTE).select(
        F.date_format("window_start", "yyyy-MM-dd'T'HH:mm").alias("m"), "currency", "revenue_cents", "orders", "items"
    ).collect()
    got = {(r.m, r.currency): [r.revenue_cents, r.orders, r.items] for r in rows}
    assert len(rows) == len(got)
    assert got == dict(expected)


def test_gold_page_views_per_product_minute_equals_plain_python(spark, run):
    """Views per (minute, product) equal a Python count over the valid product-page views produced."""
    records, _, ctx, _ = run
    expected = Counter(
        (minute(r.event["occurred_at"]), r.event["product_id"])
        for r in records
        if r.kind == "valid" and r.topic == shop.PAGE_VIEWS.topic_spec.name and r.event["product_id"]
    )
    rows = read(spark, ctx, shop.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE).select(
        F.date_format("window_start", "yyyy-MM-dd'T'HH:mm").alias("m"), "product_id", "views"
    ).collect()
    assert {(r.m, r.product_id): r.views for r in rows} == dict(expected)


def test_each_query_ran_in_a_fair_scheduler_pool_of_its_own(spark, run):
    """The session schedules fairly and the concurrent queries submitted their jobs to their own pools: a topic's
    query to its silver flow's, each other flow's to its own."""
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"
    found = spark.sparkContext._jsc.sc().getAllPools()   # a Scala Seq
    pools = {found.apply(i).name() for i in range(found.size())}
    groups = topic_groups(FLOWS)
    carried = {f.name for g in groups.values() for f in (g.bronze, *g.members)}
    assert len(groups) == 5 and {flow.name for flow in FLOWS} - carried <= pools


def test_a_second_catch_up_without_new_data_changes_nothing(spark, run):
    """Running every flow again, through the topics' queries and then each on its own, reads nothing new and leaves
    every table's row count as it was."""
    _, _, ctx, _ = run
    present = [spec for spec in tables.ALL if DeltaTable.isDeltaTable(spark, spec.path(ctx.lake_root))]
    before = {spec.name: read(spark, ctx, spec).count() for spec in present}
    # Each topic's query resumes its checkpoint: nothing else wrote its tables since.
    assert {g.silver.name: takeover(spark, g, ctx) for g in topic_groups(FLOWS).values()} == {
        g.silver.name: "resume" for g in topic_groups(FLOWS).values()}
    outcomes = list(run_flows(spark, FLOWS, ctx, parallel=3, one_query_per_topic=True))
    assert [o.error for o in outcomes if o.error] == [] and all(o.run.input_rows == 0 for o in outcomes)
    assert {spec.name: read(spark, ctx, spec).count() for spec in present} == before
    # Then each flow alone: its checkpoint, dropped when the topic's query took over, is rebuilt from its records.
    again = {flow.name: run_flow(spark, flow, ctx) for flow in FLOWS}
    assert all(r.input_rows == 0 for r in again.values())
    assert {spec.name: read(spark, ctx, spec).count() for spec in present} == before
