"""The `lakehouse` subcommands as a user types them, against a real broker, each in its own process."""

from __future__ import annotations

import os
import re
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from confluent_kafka import Consumer, TopicPartition
import dagster as dg

from lakehouse.orchestration.runs import COMMAND_TAG, dagster_instance
from lakehouse.schemas import topics
from lakehouse.pipelines.shop.generator import generate
from lakehouse.streaming.kafka_topics import ensure_topics
from tests.conftest import free_port
from tests.dagster_ui import lakehouse_env
from lakehouse.pipelines import shop


LAKEHOUSE = Path(sys.executable).with_name("lakehouse")


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker of this module's own: `kafka status` reads the broker's state folder."""
    return own_broker


def environment(settings, **env: str) -> dict[str, str]:
    """The environment a `lakehouse` command gets: the test broker's ports and jars, then `env` over them."""
    return lakehouse_env(settings, **env)


def lakehouse(settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAKEHOUSE), *args], env=environment(settings, **env), capture_output=True, text=True,
                          timeout=600)


def test_topics_produce_status_run_and_sql(broker):
    """topics creates then finds the topics; produce sends what the generator makes; run and sql see every record."""
    early = lakehouse(broker, "produce", "--count", "5")   # the broker has no topics yet
    assert early.returncode == 2 and "Traceback" not in early.stderr, early.stderr[-2000:]
    assert early.stderr.strip().splitlines() == [
        f"error: The topics {', '.join(sorted(t.name for t in topics.ALL))} do not exist at {broker.kafka_bootstrap}; "
        "create the topics first with `lakehouse topics` (or materialize the topic assets in the Dagster UI)."]
    first = lakehouse(broker, "topics")
    assert first.returncode == 0, first.stderr
    assert all(re.search(rf"{re.escape(t.name)}\s+\|\s+created", first.stdout) for t in topics.ALL), first.stdout
    again = lakehouse(broker, "topics")
    assert all(re.search(rf"{re.escape(t.name)}\s+\|\s+exists", again.stdout) for t in topics.ALL), again.stdout

    sent = lakehouse(broker, "produce", "--count", "300", "--seed", "9")
    assert sent.returncode == 0, sent.stderr
    assert "Sent 300 records" in sent.stdout and "300 acknowledged, 0 failed" in sent.stdout
    per_topic = Counter(r.topic for r in generate(300, seed=9))  # topic choice depends on the seed only
    for topic, count in per_topic.items():
        assert f"{topic}: {count}" in sent.stdout

    status = lakehouse(broker, "kafka", "status")
    assert status.returncode == 0 and "is running" in status.stdout
    assert all(t.name in status.stdout for t in topics.ALL)

    ran = lakehouse(broker, "run", "bronze_orders", "bronze_page_views")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert f"bronze_orders: rows_written={per_topic[shop.ORDERS.topic_spec.name]}" in ran.stdout
    # A run of the code location's job catch_up, tagged with the command, its materializations in the instance.
    instance = dagster_instance(broker)
    [run] = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(job_name="catch_up"))]
    assert run.tags[COMMAND_TAG] == "lakehouse run bronze_orders bronze_page_views"
    assert run.remote_job_origin.location_name == "lakehouse.orchestration.definitions"
    assert f"run {run.run_id} of job catch_up" in ran.stdout
    [mat] = instance.fetch_materializations(dg.AssetKey("bronze_orders"), limit=5).records
    assert mat.run_id == run.run_id
    assert mat.asset_materialization.metadata["rows_written"].value == per_topic[shop.ORDERS.topic_spec.name]

    query = lakehouse(broker, "sql", "SELECT topic, count(*) AS n FROM bronze_page_views GROUP BY topic")
    assert query.returncode == 0, query.stderr[-2000:]
    assert re.search(rf"{re.escape(shop.PAGE_VIEWS.topic_spec.name)}\s+\|\s+{per_topic[shop.PAGE_VIEWS.topic_spec.name]}\b", query.stdout)
    assert "(1 row)" in query.stdout


def test_user_mistakes_get_one_sentence(broker):
    """An unknown asset, a bad query and an unreachable broker each get one 'error:' line and no traceback."""
    cases = [
        (("run", "bronze_ordrs"), {}, "There is no asset named bronze_ordrs"),
        (("sql", "SELECT nope FROM bronze_orders"), {}, "There is no column named nope"),
        (("run", "bronze_orders"), {"LAKEHOUSE_KAFKA_PORT": str(free_port())}, "No Kafka broker answers at"),
    ]
    for args, env, sentence in cases:
        proc = lakehouse(broker, *args, **env)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode != 0, args
        assert len(errors) == 1 and sentence in errors[0], (args, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])


def test_produce_without_a_broker_fails_fast_with_one_line(tmp_path):
    """`lakehouse produce` at an address where nothing listens exits 2 within seconds, one line on stderr."""
    environ = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}
    started = time.monotonic()
    proc = subprocess.run([str(LAKEHOUSE), "produce", "--count", "50"], env=environ, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], f"{len(proc.stderr.splitlines())} lines:\n{proc.stderr[:2000]}"
    assert proc.stderr.startswith("error: No Kafka broker answers at")
    assert elapsed < 30, f"took {elapsed:.0f}s to give up"  # 5s to give up, plus start-up on a busy machine


def _end_offsets(bootstrap: str) -> dict[tuple[str, int], int]:
    """The next offset of every partition of the spec'd topics."""
    statuses = ensure_topics(bootstrap, topics.ALL)
    return {(s.name, p): offset for s in statuses for p, offset in s.end_offsets.items()}


def _ids_between(bootstrap: str, start: dict, end: dict) -> tuple[set[str], set[str]]:
    """Event ids and order ids of the parseable records between two sets of offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ids-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, start.get((t, p), 0)) for (t, p) in end])
    left = sum(end[k] - start.get(k, 0) for k in end)
    event_ids, order_ids = set(), set()
    deadline = time.monotonic() + 60
    while left and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None or msg.error() or msg.offset() >= end[(msg.topic(), msg.partition())]:
            continue
        left -= 1
        try:
            event = json.loads(msg.value())
        except ValueError:  # the malformed share, on purpose
            continue
        event_ids.add(event.get("event_id"))
        if "order_id" in event:
            order_ids.add(event["order_id"])
    consumer.close()
    assert left == 0, f"{left} records not read back"
    return event_ids - {None}, order_ids


def test_two_default_produce_runs_send_disjoint_ids(broker):
    """Two `lakehouse produce --count 50` runs with the default seed send no event id or order id twice."""
    bootstrap = broker.kafka_bootstrap
    before = _end_offsets(bootstrap)
    assert lakehouse(broker, "produce", "--count", "50").returncode == 0
    between = _end_offsets(bootstrap)
    assert lakehouse(broker, "produce", "--count", "50").returncode == 0
    after = _end_offsets(bootstrap)
    first_events, first_orders = _ids_between(bootstrap, before, between)
    second_events, second_orders = _ids_between(bootstrap, between, after)
    assert len(first_events) > 30 and len(second_events) > 30
    assert first_events.isdisjoint(second_events)
    assert first_orders.isdisjoint(second_orders)


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (("sql", "SELECT 1"), {"LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "-1"},
         "error: LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS=-1 is not valid; use an integer from 1 to"),
        (("ui", "--port", "99999"), {}, "error: argument --port: '99999' is not an integer from 1 to 65535"),
    ],
)
def test_a_bad_setting_or_option_is_one_line_and_exit_2(tmp_path, args, env, expected):
    """A bad setting or option, as a user types it, exits 2 with one line on stderr and nothing started."""
    environ = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), **env}
    proc = subprocess.run([str(LAKEHOUSE), *args], env=environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr[-2000:]
    assert proc.stderr.startswith(expected), proc.stderr
    assert proc.stdout == ""
