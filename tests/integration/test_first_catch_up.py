"""The first catch-up of a large backlog on an empty lake, with the flows in parallel: no writer races another."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.schemas import sources, tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import FLOWS
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.producer import produce

pytestmark = pytest.mark.integration

N = 20_000
SHARED = (tables.QUARANTINE, tables.LATE_ARRIVALS, tables.QUALITY_RESULTS, tables.STREAM_PROGRESS)


@pytest.fixture(scope="module")
def caught_up(spark, broker, tmp_path_factory):
    """N events with malformed and duplicate records, then every source's bronze and silver flows, five at once."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    start = datetime(2026, 11, 28, 8, 0, tzinfo=timezone.utc)
    records = generate(N, seed=47, start=start, events_per_second=50.0,
                       mix=Mix(out_of_order=0.0, late=0.0, duplicate=0.03, malformed=0.03))
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == N and report.failed == 0
    ctx = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap)
    chosen = [f for f in FLOWS if f.target.layer in ("bronze", "silver") and not f.name.startswith("dim_")]
    outcomes = list(run_flows(spark, chosen, ctx, parallel=5))
    return records, report, ctx, outcomes


def read(spark, ctx, spec):
    return spark.read.format("delta").load(spec.path(ctx.lake_root))


def test_every_flow_of_the_first_catch_up_succeeds(caught_up):
    """No flow fails, in particular none on a table another flow created at the same moment."""
    *_, outcomes = caught_up
    assert len(outcomes) == 2 * len(sources.SOURCES)
    assert [(o.flow.name, str(o.error)[:300]) for o in outcomes if o.error] == []


def test_shared_tables_were_created_empty_before_any_flow_wrote(spark, caught_up):
    """Each shared table's first version holds no rows; the flows' rows all came in later commits."""
    *_, ctx, _ = caught_up
    for spec in SHARED:
        path = spec.path(ctx.lake_root)
        first = spark.read.format("delta").option("versionAsOf", 0).load(path)
        assert first.count() == 0, spec.name
    history = DeltaTable.forPath(spark, tables.QUARANTINE.path(ctx.lake_root)).history()
    flows = {r.flow for r in history.where("version > 0").select(
        F.get_json_object("userMetadata", "$.flow").alias("flow")).collect()}
    assert flows == {f"silver_{s.entity}" for s in sources.SOURCES if s.topic_spec.name in {
        r.topic for r in caught_up[0] if r.kind == "malformed"}}


def test_nothing_of_the_backlog_is_lost_or_doubled(spark, caught_up):
    """Bronze holds each delivery once; silver each valid event once; quarantine each malformed record once."""
    records, report, ctx, _ = caught_up
    coords = [(r.topic, r.partition, r.offset) for s in sources.SOURCES
              for r in read(spark, ctx, s.bronze_table).select("topic", "partition", "offset").collect()]
    assert len(coords) == N and set(coords) == {(d.topic, d.partition, d.offset) for d in report.deliveries.values()}
    ids = [r.event_id for s in sources.SOURCES for r in read(spark, ctx, s.silver_table).select("event_id").collect()]
    assert len(ids) == len(set(ids))
    assert set(ids) == {r.event["event_id"] for r in records if r.kind == "valid"}
    malformed = {(d.topic, d.partition, d.offset) for i, d in report.deliveries.items() if records[i].kind == "malformed"}
    quarantined = [(r.topic, r.partition, r.offset) for r in
                   read(spark, ctx, tables.QUARANTINE).select("topic", "partition", "offset").collect()]
    assert len(quarantined) == len(malformed) and set(quarantined) == malformed
    assert read(spark, ctx, tables.LATE_ARRIVALS).count() == 0
