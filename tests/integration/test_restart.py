"""Stop the bronze and silver streams part way through, or cap a catch-up's batches, run them again: nothing lost,
nothing twice. A kill -9 mid-stream is the crash drill's (tests/e2e/test_stream_drills.py: bronze, silver and gold
each killed after a commit, restarted in the other mode, every layer exact)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate, iso
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow, start_flow
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

N = 1200


@pytest.fixture(scope="module")
def produced(broker):
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    records = generate(N, seed=23, start=datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc),
                       mix=Mix(duplicate=0.05, malformed=0.03))
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == N
    return records, report


def expected_coords(report, topic):
    return {(d.topic, d.partition, d.offset) for d in report.deliveries.values() if d.topic == topic.name}


def expected_ids(records, topic):
    return {r.event["event_id"] for r in records if r.kind == "valid" and r.topic == topic.name}


def coords(spark, spec, ctx):
    rows = spark.read.format("delta").load(spec.path(ctx.lake_root)).select("topic", "partition", "offset").collect()
    return [(r.topic, r.partition, r.offset) for r in rows]


def event_ids(spark, spec, ctx):
    return [r.event_id for r in spark.read.format("delta").load(spec.path(ctx.lake_root)).select("event_id").collect()]


def stop_after_batches(spark, flow, ctx, batches: int) -> int:
    """Start the flow in back-to-back micro-batches and stop it once `batches` have committed."""
    query = start_flow(spark, flow, ctx, trigger={"processingTime": "0 seconds"})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        done = [p for p in query.recentProgress if p.numInputRows > 0]
        if len(done) >= batches:
            break
        if query.exception():
            raise query.exception()
        time.sleep(0.05)
    query.stop()
    return len(done)


def test_stopping_bronze_and_silver_part_way_loses_and_duplicates_nothing(spark, broker, produced, tmp_path):
    """page_views: stop bronze, then silver, after a few micro-batches; a second run completes them exactly."""
    records, report = produced
    # Small micro-batches for the run that gets stopped; the catch-up run takes the rest at once
    # (a checkpoint records offsets, not trigger sizes).
    full = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    ctx = dataclasses.replace(full, max_offsets_per_trigger=60, max_files_per_trigger=1)
    bronze, silver = BY_NAME["bronze_page_views"], BY_NAME["silver_page_views"]
    want_coords = expected_coords(report, shop.PAGE_VIEWS.topic_spec)

    stop_after_batches(spark, bronze, ctx, 3)
    partial = coords(spark, shop.PAGE_VIEWS.bronze_table, ctx)
    assert 0 < len(partial) < len(want_coords), "the stop must land part way through"
    run_flow(spark, bronze, full)
    after = coords(spark, shop.PAGE_VIEWS.bronze_table, ctx)
    assert len(after) == len(set(after)) == len(want_coords)
    assert set(after) == want_coords

    want_ids = expected_ids(records, shop.PAGE_VIEWS.topic_spec)
    stop_after_batches(spark, silver, ctx, 2)
    partial_ids = event_ids(spark, shop.PAGE_VIEWS.silver_table, ctx)
    assert 0 < len(partial_ids) < len(want_ids), "the stop must land part way through"
    run_flow(spark, silver, full)
    ids = event_ids(spark, shop.PAGE_VIEWS.silver_table, ctx)
    assert len(ids) == len(set(ids)), "a duplicate survived the restart"
    assert set(ids) == want_ids


def added_per_version(spark, spec, ctx, columns=("topic", "partition", "offset")) -> list[set]:
    """The rows each version of an append-only table added, oldest first: a plain read of every version."""
    path = spec.path(ctx.lake_root)
    latest = DeltaTable.forPath(spark, path).history(1).first()["version"]
    before, added = set(), []
    for version in range(latest + 1):
        rows = {tuple(r) for r in spark.read.format("delta").option("versionAsOf", version).load(path)
                .select(*columns).collect()}
        added.append(rows - before)
        before = rows
    return added


def occurred(record) -> datetime:
    return datetime.fromisoformat(record.event["occurred_at"].replace("Z", "+00:00"))


def split_by_watermark(units, delay: timedelta):
    """The rule in plain Python: a record is late if it is behind the newest event time of the earlier units minus the delay.

    A unit is what a flow reads as one: a new flow's initial snapshot of its source, then each commit
    after it. However a byte cap splits units into batches, the split must come out the same.
    """
    newest, on_time, late = None, [], []
    for unit in units:
        cutoff = None if newest is None else newest - delay
        mine = [(c, r) for c, r in unit if cutoff is None or occurred(r) >= cutoff]
        late += [c for c, r in unit if cutoff is not None and occurred(r) < cutoff]
        on_time += mine
        newest = max([occurred(r) for _, r in mine] + ([newest] if newest else []), default=None)
    return on_time, set(late)


def late_coords(spark, ctx, flow: str) -> set:
    path = tables.LATE_ARRIVALS.path(ctx.lake_root)
    if not has_delta_log(spark, path):
        return set()
    rows = spark.read.format("delta").load(path).where(F.col("flow") == flow).select("topic", "partition", "offset")
    return {tuple(r) for r in rows.collect()}


def test_capped_catch_up_takes_a_backlog_in_bounded_batches_and_loses_nothing(spark, broker, produced, tmp_path):
    """A record cap on Kafka and a byte cap on Delta split catch-ups into batches; the tables, late rows included, stay exact."""
    records, report = produced
    full = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    want_coords = expected_coords(report, shop.ORDERS.topic_spec)
    by_coord = {(d.topic, d.partition, d.offset): records[i] for i, d in report.deliveries.items()}
    # 1 KiB is below any one Parquet file: a byte cap then takes one file per batch (Delta's soft cap), so
    # every commit of several files is split. A one-minute watermark is shorter than what a commit spans.
    capped = dataclasses.replace(full, max_bytes_per_trigger="1k", silver_dedup_watermark="1 minute",
                                 gold_watermark="1 minute")
    bronze_flow, silver_flow, gold_flow = (BY_NAME[n] for n in ("bronze_orders", "silver_orders", "gold_revenue_per_minute"))

    # Bronze in two parts, so that silver reads its initial snapshot first and later commits after; silver
    # and gold are each stopped part way through the snapshot (a batch holding the watermark) and resumed.
    bronze_ctx = dataclasses.replace(full, max_offsets_per_trigger=70)
    stop_after_batches(spark, bronze_flow, bronze_ctx, 2)
    bronze_cut = latest_version(spark, shop.ORDERS.bronze_table, full)
    stop_after_batches(spark, silver_flow, capped, 2)
    assert last_record(spark, shop.ORDERS.silver_table, full).get("held"), "the stop must land inside the snapshot"
    run_flow(spark, silver_flow, capped)
    silver_cut = latest_version(spark, shop.ORDERS.silver_table, full)
    stop_after_batches(spark, gold_flow, capped, 2)
    run_flow(spark, gold_flow, capped)
    run_flow(spark, bronze_flow, bronze_ctx)
    # Spark shares the cap among the partitions by their backlog, rounding per partition: about 70 a batch.
    commits = sum(1 for rows in added_per_version(spark, shop.ORDERS.bronze_table, full) if rows)
    assert commits >= -(-len(want_coords) // 70) > 2
    assert sorted(coords(spark, shop.ORDERS.bronze_table, full)) == sorted(want_coords)
    new_files = set(input_files(spark, shop.ORDERS.bronze_table, full)) - set(input_files(spark, shop.ORDERS.bronze_table, full, bronze_cut))
    assert run_flow(spark, silver_flow, capped).batches == len(new_files) > 1
    assert run_flow(spark, gold_flow, capped).batches > 1

    # Silver: its first run read bronze's snapshot as one unit, its second each bronze commit after it.
    on_time, late = split_by_watermark(units_read(spark, shop.ORDERS.bronze_table, full, bronze_cut, by_coord),
                                       timedelta(minutes=1))
    ids = event_ids(spark, shop.ORDERS.silver_table, full)
    assert len(ids) == len(set(ids)), "a duplicate crossed a batch boundary"
    assert set(ids) == {r.event["event_id"] for _, r in on_time}
    assert late_coords(spark, full, "silver_orders") == late

    # Gold: the same over silver's commits; its table is what plain Python sums over the rows on time.
    on_time, late = split_by_watermark(units_read(spark, shop.ORDERS.silver_table, full, silver_cut, by_coord),
                                       timedelta(minutes=1))
    assert late_coords(spark, full, "gold_revenue_per_minute") == late
    want: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for _, r in on_time:
        minute = occurred(r).astimezone(timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
        want[(minute, r.event["currency"])][0] += r.event["total_cents"]
        want[(minute, r.event["currency"])][1] += 1
    rows = spark.read.format("delta").load(shop.GOLD_REVENUE_PER_MINUTE.path(full.lake_root)).collect()
    assert {(r["window_start"], r["currency"]): [r["revenue_cents"], r["orders"]] for r in rows} == dict(want)


def test_silver_resumes_its_watermark_from_its_own_commit_and_reads_silver_when_another_wrote_last(
        spark, broker, produced, tmp_path):
    """Silver's newest commit records its newest event time; a commit by anything else makes the next run read silver."""
    records, report = produced
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap,
                      silver_dedup_watermark="1 minute")
    run_flow(spark, BY_NAME["bronze_orders"], ctx)
    run_flow(spark, BY_NAME["silver_orders"], ctx)
    newest = max(occurred(r) for r in records if r.kind == "valid" and r.topic == shop.ORDERS.topic_spec.name)
    assert last_record(spark, shop.ORDERS.silver_table, ctx)["seen_max_micros"] == micros(newest)

    # Another writer (here a plain append, as a backfill or a user's INSERT would be) adds an event ten
    # minutes newer: silver's newest commit is no longer the flow's, so its record must not be trusted.
    silver_path = shop.ORDERS.silver_table.path(ctx.lake_root)
    silver = spark.read.format("delta").load(silver_path)
    (silver.limit(1).withColumn("event_id", F.lit("written-by-another"))
     .withColumn("occurred_at", F.lit(newest + timedelta(minutes=10)))
     .write.format("delta").mode("append").save(silver_path))
    # Then one more order reaches bronze, as old as the newest before: on time by the flow's own record,
    # late by what silver now holds (ten minutes newer, less the one-minute watermark).
    bronze_path = shop.ORDERS.bronze_table.path(ctx.lake_root)
    bronze = spark.read.format("delta").load(bronze_path)
    template = next(r for r in records if r.kind == "valid" and r.topic == shop.ORDERS.topic_spec.name)
    one_more = dataclasses.replace(template, event={**template.event, "event_id": "one-more-order",
                                                    "occurred_at": iso(newest)})
    (bronze.limit(1).withColumn("value", F.lit(one_more.encode(newest)))
     .withColumn("offset", F.lit(10**9).cast("long")).write.format("delta").mode("append").save(bronze_path))

    run_flow(spark, BY_NAME["silver_orders"], ctx)
    went = {spec.name for spec in (shop.ORDERS.silver_table, tables.QUARANTINE, tables.LATE_ARRIVALS)
            if has_delta_log(spark, spec.path(ctx.lake_root))
            and spark.read.format("delta").load(spec.path(ctx.lake_root)).where(F.col("offset") == 10**9).count()}
    assert went == {"late_arrivals"}, "the run took its watermark from a record another writer had made stale"


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def input_files(spark, spec, ctx, version=None) -> list[str]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(spec.path(ctx.lake_root)).inputFiles()


def last_record(spark, spec, ctx) -> dict:
    """The record (streaming/positions.py) in the newest commit's userMetadata."""
    return json.loads(DeltaTable.forPath(spark, spec.path(ctx.lake_root)).history(1).first()["userMetadata"] or "{}")


def latest_version(spark, spec, ctx) -> int:
    return DeltaTable.forPath(spark, spec.path(ctx.lake_root)).history(1).first()["version"]


def units_read(spark, spec, ctx, snapshot_version: int, by_coord) -> list[list]:
    """What a new flow read from `spec` as units: its snapshot at `snapshot_version`, then each commit after."""
    added = [[(c, by_coord[c]) for c in sorted(rows) if by_coord[c].kind != "malformed"]
             for rows in added_per_version(spark, spec, ctx)]
    return [sum(added[:snapshot_version + 1], [])] + added[snapshot_version + 1:]
