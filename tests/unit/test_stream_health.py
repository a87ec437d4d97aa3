"""Which flows `lakehouse stream TABLE` runs, and where a flow stands, read from checkpoint files alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.continuous import UnknownTable, flows_for
from lakehouse.streaming.runner import first_line as _first_line
from lakehouse.streaming.flows import BY_NAME, FLOWS
from lakehouse.streaming.health import committed_batch, flow_health, latest_data_version, latest_version
from lakehouse.pipelines import shop


def test_a_named_table_brings_the_flows_it_reads_from_in_order():
    names = [f.name for f in flows_for(FLOWS, ["gold_revenue_per_minute"])]
    assert names == ["bronze_orders", "silver_orders", "gold_revenue_per_minute"]
    enriched = {f.name for f in flows_for(FLOWS, ["gold_order_lines_enriched"])}
    assert enriched == {"bronze_orders", "silver_orders", "bronze_products", "silver_products", "dim_products",
                        "bronze_customers", "silver_customers", "dim_customers", "gold_order_lines_enriched"}
    assert len(flows_for(FLOWS, [])) == len(FLOWS)


def test_an_unknown_table_is_one_sentence():
    with pytest.raises(UnknownTable, match="No flow writes gold_nope; tables that stream: bronze_page_views"):
        flows_for(FLOWS, ["gold_nope"])


def write_batch(checkpoint: Path, batch: int, sources: list[dict], *, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1_795_000_000_000 + batch})]
    lines += [json.dumps(s) for s in sources]
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))
    if committed:
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}")


def test_kafka_lag_is_the_end_offsets_minus_the_newest_committed_batch(tmp_path):
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap="unused:9092")
    flow = BY_NAME["bronze_orders"]
    checkpoint = Path(flow.checkpoint(ctx))
    write_batch(checkpoint, 0, [{"shop.orders.v1": {"0": 10, "1": 7}}], committed=True)
    write_batch(checkpoint, 1, [{"shop.orders.v1": {"0": 40, "1": 9}}], committed=True)
    # Planned but never committed (a kill mid-batch): it does not count as read.
    write_batch(checkpoint, 2, [{"shop.orders.v1": {"0": 90, "1": 12}}], committed=False)
    assert committed_batch(str(checkpoint)).batch_id == 1
    health = flow_health(flow, ctx, {"shop.orders.v1": {0: (0, 100), 1: (0, 9), 2: (5, 20)}})
    # Partition 2 was never read: all of its retained records (from the low watermark) are behind.
    assert health.kafka_lag == {"shop.orders.v1/0": 60, "shop.orders.v1/1": 0, "shop.orders.v1/2": 15}
    assert health.lag_records == 75 and health.batch_id == 1 and not health.caught_up


def test_delta_lag_counts_the_source_versions_not_yet_read(tmp_path):
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap="unused:9092")
    flow = BY_NAME["silver_orders"]
    log = Path(tmp_path / "lake/bronze/bronze_orders/_delta_log")
    log.mkdir(parents=True)
    for v in range(6):
        (log / f"{v:020d}.json").write_text("{}")
    assert latest_version(str(log.parent)) == 5
    checkpoint = Path(flow.checkpoint(ctx))
    # Read versions up to 3 whole: the next offset names version 4 with nothing of it read (index -1).
    write_batch(checkpoint, 0, [{"sourceVersion": 1, "reservoirVersion": 4, "index": -1}], committed=True)
    assert flow_health(flow, ctx, {}).versions_behind == {"bronze_orders": 2}
    # Delta's end index: version 5 read whole, caught up.
    write_batch(checkpoint, 1, [{"sourceVersion": 1, "reservoirVersion": 5, "index": 2 ** 63 - 101}], committed=True)
    health = flow_health(flow, ctx, {})
    assert health.versions_behind == {"bronze_orders": 0} and health.caught_up

    # A compaction and a VACUUM after it change no rows: nothing new to read, the flow is still caught up.
    for v, operation in ((6, "OPTIMIZE"), (7, "VACUUM START"), (8, "VACUUM END")):
        commit = {"commitInfo": {"operation": operation, "operationParameters": {"auto": "true"}}}
        (log / f"{v:020d}.json").write_text(json.dumps(commit) + "\n" + json.dumps({"add": {}}))
    assert latest_version(str(log.parent)) == 8 and latest_data_version(str(log.parent)) == 5
    assert flow_health(flow, ctx, {}).caught_up
    # A write after them is new data again.
    (log / f"{9:020d}.json").write_text(json.dumps({"commitInfo": {"operation": "STREAMING UPDATE"}}))
    assert flow_health(flow, ctx, {}).versions_behind == {"bronze_orders": 4}


def test_a_foreach_batch_failure_is_named_by_its_own_exception_line():
    text = ("An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
            "  File \"x.py\", line 1, in call\n"
            "delta.exceptions.captured.ProtocolChangedException: [DELTA_PROTOCOL_CHANGED] The protocol changed.\n")
    assert _first_line(RuntimeError(text)) == \
        "ProtocolChangedException: [DELTA_PROTOCOL_CHANGED] The protocol changed."


def test_end_offsets_without_a_broker_is_one_sentence():
    """`lakehouse status` with no broker at the address: KafkaUnreachable's sentence, not a client traceback."""
    import pytest

    from lakehouse.schemas import topics
    from lakehouse.streaming.health import end_offsets
    from lakehouse.streaming.kafka_topics import KafkaUnreachable
    from tests.conftest import free_port

    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(KafkaUnreachable, match=f"No Kafka broker answers at {address}"):
        end_offsets(address, [shop.ORDERS.topic_spec], timeout_s=2)


def test_a_stopped_stream_is_not_a_failure_while_its_table_is_caught_up(tmp_path):
    """stream_freshness is judged against what the stream was asked to keep fresh: after a clean stop a caught-up
    table is fresh and a table behind its input warns; a live stream that went quiet, or one that died, is an ERROR."""
    import time

    import dagster as dg

    from lakehouse.infra.settings import Settings
    from lakehouse.orchestration.streams import STREAM_TAG, freshness_evaluations
    from lakehouse.streaming.stream_pid import pid_file

    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}, stream_freshness="60 seconds")
    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap="unused:9092")
    log = Path(settings.lake_root, "bronze/bronze_orders/_delta_log")
    log.mkdir(parents=True)
    for v in range(6):
        (log / f"{v:020d}.json").write_text("{}")
    write_batch(Path(BY_NAME["silver_orders"].checkpoint(ctx)), 0,
                [{"sourceVersion": 1, "reservoirVersion": 5, "index": 2 ** 63 - 101}], committed=True)
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(dg.AssetObservation("silver_orders", metadata={"source": STREAM_TAG}))
    later = time.time() + 600     # ten minutes after the stream's last report

    def judged() -> dg.AssetCheckEvaluation:
        [found] = freshness_evaluations(settings, instance, ["silver_orders"], now=later, ends={})
        return found

    # Stopped cleanly (no PID file) and caught up: fresh, though the last report is ten minutes old.
    assert judged().passed
    # A new bronze version it has not read: behind, a warning, never an error.
    (log / f"{6:020d}.json").write_text("{}")
    behind = judged()
    assert not behind.passed and behind.severity == dg.AssetCheckSeverity.WARN
    assert "1 version of bronze_orders behind" in behind.description
    # A live stream asked to keep it fresh that has not reported it for ten minutes has stalled.
    pid_file(settings).write_text(f"{os.getpid()}\nbronze_orders silver_orders\n")
    stalled = judged()
    assert not stalled.passed and stalled.severity == dg.AssetCheckSeverity.ERROR
    # A stream that died (its PID file left behind, its process gone) with the table behind: an error too.
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    pid_file(settings).write_text(f"{dead}\nbronze_orders silver_orders\n")
    died = judged()
    assert not died.passed and died.severity == dg.AssetCheckSeverity.ERROR and "without a clean stop" in died.description


def test_a_topic_whose_end_offsets_moved_is_materialized_with_the_observed_figures():
    """The topic's overview shows its latest materialization: the sensor records one when records were appended
    since the last, with what it observed; an unchanged topic gets an observation."""
    import dagster as dg

    from lakehouse.orchestration.assets import topic_key
    from lakehouse.orchestration.streams import topic_event

    topic = shop.ORDERS.topic_spec
    instance = dg.DagsterInstance.ephemeral()
    # What the topic's own materialization recorded when a run created it: 932 records.
    instance.report_runless_asset_event(dg.AssetMaterialization(topic_key(topic), metadata={
        "retained_records": 932, "end_offsets": dg.MetadataValue.json({"0": 500, "1": 432})}))
    ends = {0: (0, 2000), 1: (0, 1444)}
    event = topic_event(instance, topic, ends, [])
    assert isinstance(event, dg.AssetMaterialization) and event.metadata["retained_records"].value == 3444
    instance.report_runless_asset_event(event)
    newest = instance.get_latest_materialization_event(topic_key(topic)).asset_materialization
    assert newest.metadata["retained_records"].value == 3444
    assert isinstance(topic_event(instance, topic, ends, []), dg.AssetObservation)   # nothing appended since
