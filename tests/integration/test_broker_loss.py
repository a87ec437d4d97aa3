"""The broker dies while a flow reads from it: the run ends in one sentence, and a rerun after a restart is exact."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from lakehouse.infra.kafka_broker import local_node
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import KafkaLost, run_flow
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker of this module's own: the test kills it."""
    return own_broker


def test_losing_the_broker_mid_run_is_one_sentence_and_the_rerun_is_exact(spark, broker, jars_dir, tmp_path):
    """kill -9 the broker after bronze's first micro-batch: KafkaLost names the broker and what to do; after a
    restart the same flow completes, and bronze holds each delivered record exactly once."""
    ensure_topics(broker.kafka_bootstrap, [shop.PAGE_VIEWS.topic_spec])
    records = [r for r in generate(4000, seed=21, mix=Mix(duplicate=0, malformed=0)) if r.topic == shop.PAGE_VIEWS.topic_spec.name]
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == len(records) and report.failed == 0
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap, max_offsets_per_trigger=200)
    flow = BY_NAME["bronze_page_views"]
    node = local_node(broker)
    first_commit = Path(flow.target.path(ctx.lake_root)) / "_delta_log" / f"{0:020d}.json"

    def kill_after_first_batch() -> None:
        deadline = time.monotonic() + 120
        while not first_commit.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(node.read_pid(), signal.SIGKILL)

    killer = threading.Thread(target=kill_after_first_batch)
    killer.start()
    started = time.monotonic()
    with pytest.raises(KafkaLost) as lost:
        run_flow(spark, flow, ctx)
    killer.join()
    sentence = str(lost.value)
    assert "\n" not in sentence and broker.kafka_bootstrap in sentence and "lakehouse kafka start" in sentence
    assert time.monotonic() - started < 90   # the watchdog speaks after 20 s of silence, not Spark after minutes

    node.start(jars_dir)
    run_flow(spark, flow, ctx)
    bronze = spark.read.format("delta").load(shop.PAGE_VIEWS.bronze_table.path(ctx.lake_root))
    coords = [(r.topic, r.partition, r.offset) for r in bronze.select("topic", "partition", "offset").collect()]
    assert len(coords) == len(set(coords))
    assert set(coords) == {(d.topic, d.partition, d.offset) for d in report.deliveries.values()}
