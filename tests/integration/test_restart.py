"""Stop or kill the bronze and silver streams part way through, run them again: nothing lost, nothing twice."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from schemas import tables, topics
from streaming.context import FlowContext
from streaming.flows import BY_NAME
from streaming.generator import Mix, generate
from streaming.kafka_topics import ensure_topics
from streaming.producer import produce
from streaming.runner import run_flow, start_flow

pytestmark = pytest.mark.integration

N = 1200
WORKER = Path(__file__).with_name("crash_worker.py")


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
    want_coords = expected_coords(report, topics.PAGE_VIEWS)

    stop_after_batches(spark, bronze, ctx, 3)
    partial = coords(spark, tables.BRONZE_PAGE_VIEWS, ctx)
    assert 0 < len(partial) < len(want_coords), "the stop must land part way through"
    run_flow(spark, bronze, full)
    after = coords(spark, tables.BRONZE_PAGE_VIEWS, ctx)
    assert len(after) == len(set(after)) == len(want_coords)
    assert set(after) == want_coords

    want_ids = expected_ids(records, topics.PAGE_VIEWS)
    stop_after_batches(spark, silver, ctx, 2)
    partial_ids = event_ids(spark, tables.SILVER_PAGE_VIEWS, ctx)
    assert 0 < len(partial_ids) < len(want_ids), "the stop must land part way through"
    run_flow(spark, silver, full)
    ids = event_ids(spark, tables.SILVER_PAGE_VIEWS, ctx)
    assert len(ids) == len(set(ids)), "a duplicate survived the restart"
    assert set(ids) == want_ids


def _kill_mid_stream(broker, ctx, flow_name: str, spec) -> None:
    """Run the flow in a separate process and SIGKILL it (and its JVM) once it has committed a few batches."""
    log_dir = Path(broker.home) / "worker-logs"
    log_dir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(log_dir), broker.jars_dir, ctx.lake_root, broker.kafka_bootstrap, flow_name],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(log_dir / f"{flow_name}.err", "wb"),
    )
    delta_log = Path(spec.path(ctx.lake_root)) / "_delta_log"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list(delta_log.glob("*.json"))) >= 4:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"worker exited early; see {log_dir / (flow_name + '.err')}"
        assert len(list(delta_log.glob("*.json"))) >= 4, "worker committed too few batches before the deadline"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_killing_bronze_and_silver_mid_stream_loses_and_duplicates_nothing(spark, broker, produced, tmp_path):
    """orders: kill -9 the process running bronze, then silver; a restart from the checkpoints completes them exactly."""
    records, report = produced
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    want_coords = expected_coords(report, topics.ORDERS)

    _kill_mid_stream(broker, ctx, "bronze_orders", tables.BRONZE_ORDERS)
    assert 0 < len(coords(spark, tables.BRONZE_ORDERS, ctx)) < len(want_coords)
    run_flow(spark, BY_NAME["bronze_orders"], ctx)
    after = coords(spark, tables.BRONZE_ORDERS, ctx)
    assert len(after) == len(set(after)) == len(want_coords)
    assert set(after) == want_coords

    want_ids = expected_ids(records, topics.ORDERS)
    _kill_mid_stream(broker, ctx, "silver_orders", tables.SILVER_ORDERS)
    assert 0 < len(event_ids(spark, tables.SILVER_ORDERS, ctx)) < len(want_ids)
    run_flow(spark, BY_NAME["silver_orders"], ctx)
    ids = event_ids(spark, tables.SILVER_ORDERS, ctx)
    assert len(ids) == len(set(ids)), "a duplicate survived the crash"
    assert set(ids) == want_ids


def test_capped_catch_up_takes_a_backlog_in_bounded_batches_and_loses_nothing(spark, broker, produced, tmp_path):
    """A record cap on Kafka and a byte cap on Delta split catch-ups into several batches; the tables stay exact."""
    records, report = produced
    full = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    want_coords = expected_coords(report, topics.ORDERS)

    bronze = run_flow(spark, BY_NAME["bronze_orders"], dataclasses.replace(full, max_offsets_per_trigger=70))
    # Spark shares the cap among the partitions by their backlog, rounding per partition: about 70 a batch.
    assert bronze.batches >= -(-len(want_coords) // 70) > 1
    assert sorted(coords(spark, tables.BRONZE_ORDERS, full)) == sorted(want_coords)

    # 1 KiB is below any one Parquet file: a byte cap then takes one file per batch (Delta's soft cap).
    files = spark.read.format("delta").load(tables.BRONZE_ORDERS.path(full.lake_root)).inputFiles()
    silver = run_flow(spark, BY_NAME["silver_orders"], dataclasses.replace(full, max_bytes_per_trigger="1k"))
    assert silver.batches == len(files) > 1
    ids = event_ids(spark, tables.SILVER_ORDERS, full)
    assert len(ids) == len(set(ids)), "a duplicate crossed a batch boundary"
    assert set(ids) == expected_ids(records, topics.ORDERS)
