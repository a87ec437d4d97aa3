"""The fault drills of bench/drills.py, scaled down for CI: `lakehouse stream gold_revenue_per_minute` (the
orders path: bronze, silver and a window table) killed with SIGKILL (its whole process group) three times while
events are produced, restarted each time in the other mode (a query per flow, one query per topic), and the broker killed once
under it; each time nothing is lost or duplicated in any layer, every silver
and gold table equals the batch lane's recomputation, and gold_revenue_per_minute equals plain Python.

The full drills (`python -m bench.drill_crash`, `python -m bench.drill_broker_loss`) run the same code
with 20 kills and several losses over more tables and events.
"""

from __future__ import annotations

import pytest

from bench.drills import QUERY_PER_FLOW, QUERY_PER_TOPIC, DrillReport, run_broker_loss, run_crash
from lakehouse.infra.kafka_broker import local_node
from lakehouse.infra.settings import Settings
from lakehouse.schemas import topics
from lakehouse.streaming.kafka_topics import ensure_topics
from tests.conftest import drop_topics


# 3 flows, one per layer: every kill point and handover of the full drills, without the second topic's queries,
# which doubled the stream's work on two cores (the full drills stream more tables).
TABLES = ("gold_revenue_per_minute",)
EVENTS = 1000
LOSS_EVENTS = 600    # at 8/s after the first commit: about a minute of producing, across the 25 s loss and the recovery
SMALL = {"LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "400"}       # a restart's backlog in a few bronze batches, not one


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker of this module's own: the broker-loss drill kills it (the crash test runs on it first)."""
    return own_broker


@pytest.fixture
def crash_broker(broker, tmp_path_factory: pytest.TempPathFactory):
    """The module's broker with no topic on it, and a home (lake, stream state) of the crash test's own; the topics it
    made are dropped after it, so the broker-loss test's stream reads only what its own producer sent."""
    drop_topics(broker.kafka_bootstrap)
    yield Settings(home=str(tmp_path_factory.mktemp("drill-crash")), jars_dir=broker.jars_dir,
                   kafka_port=broker.kafka_port, kafka_controller_port=broker.kafka_controller_port,
                   spark_shuffle_partitions=2)
    drop_topics(broker.kafka_bootstrap)


def assert_exact(report: DrillReport, batch_lane: bool = True) -> None:
    """Nothing lost or doubled in any layer; gold equal to plain Python and (with `batch_lane`) to the batch lane."""
    text = report.text()
    assert report.error is None, text
    assert report.exit_code == 0, text                       # SIGTERM after the drill: a clean stop
    assert report.unresolved == 0 and report.acked > 0, text
    layers = {c.layer for c in report.checks}
    assert layers == {"bronze", "silver", "plain Python"} | ({"batch lane"} if batch_lane else set()), text
    # Each layer was checked on real rows; the batch lane recomputed the gold table over silver (silver itself
    # is checked record by record against what was sent; the full drills recompute silver over bronze too).
    assert all(c.checked > 0 for c in report.checks if c.table != "late_arrivals"), text
    verified = {c.table for c in report.checks if c.layer == "batch lane"}
    assert verified == ({"gold_revenue_per_minute"} if batch_lane else set()), text
    assert [c for c in report.checks if c.differences] == [], text
    assert report.differences == 0 and report.passed, text


def test_crash_three_kills_lose_and_duplicate_nothing(spark, crash_broker, tmp_path):
    """kill -9 of the stream's process group (Python and Spark JVM) three times, a random 0-2 s after a commit of
    bronze, then of silver, then of gold (where that layer commits within a minute of the run's first commit),
    a restart each time in the other mode: a query per flow is killed after bronze, one query per topic after
    silver (inside its batch, before the gold write of the same batch, or just after), a query per flow after gold,
    and one query per topic finishes. Then the lake holds each acknowledged record exactly once in every layer."""
    ensure_topics(crash_broker.kafka_bootstrap, topics.ALL)
    report = run_crash(crash_broker, kills=3, events=EVENTS, seed=31, tables=TABLES, spark=spark, workdir=tmp_path,
                       max_delay_s=2, reach_s=60, targets=("bronze_orders", "silver_orders", "gold_revenue_per_minute"),
                       cycle_guess_s=50, commit_timeout_s=300, catch_up_s=300, extra_env=SMALL,
                       verify_layers=("gold",), alternate=True)
    print(report.text())
    assert len(report.events) == 3 and report.restarts == 3, report.text()
    assert [e.stream for e in report.events] == [QUERY_PER_FLOW, QUERY_PER_TOPIC, QUERY_PER_FLOW], report.text()
    # The whole group died each time, the Spark JVM with it (StreamProcess.kill also checks /proc for survivors).
    assert all(any(name == "java" for _, name in e.killed) for e in report.events), report.text()
    assert sum(e.producing for e in report.events) >= 1, report.text()
    assert report.failed == 0 and report.acked == report.sent == EVENTS, report.text()
    assert_exact(report)


def test_broker_loss_the_stream_resumes_by_itself(spark, broker, jars_dir, tmp_path):
    """kill -9 of the broker (the conftest fixture's) mid-stream while producing, started again 25 s later (past
    the stream's 20 s broker watchdog): the stream restarts its Kafka flows by itself, the producer's buffered
    records arrive once each, and the fixture's broker is running again afterwards (same launcher, same data).
    Events go slowly (1/s) until the stream's first commit, so that a slow start on a loaded machine still leaves
    most of them to be sent across the loss."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    node = local_node(broker)
    pid_before = node.read_pid()
    report = run_broker_loss(broker, losses=1, down_s=(25.0,), events=LOSS_EVENTS, seed=37, tables=TABLES, spark=spark,
                             workdir=tmp_path, rate=8.0, settle_s=6, commit_timeout_s=240, catch_up_s=240,
                             extra_env=SMALL, verify_layers=("gold",), warm_up_rate=1.0)
    print(report.text())
    pid_after = node.read_pid()
    assert pid_after is not None and pid_after != pid_before, "the fixture's broker must be running again"
    (loss,) = report.events
    assert loss.producing and loss.recovered_s is not None, report.text()
    # Resumed by itself: the watchdog stopped the Kafka flows and the supervisor restarted them with backoff.
    assert report.watchdog_stops >= 1 and report.stream_restarts >= 1, report.text()
    # Only what the broker acknowledged must arrive; with a 25 s outage every record is acknowledged in the end.
    assert report.failed == 0 and report.acked == report.sent == LOSS_EVENTS, report.text()
    assert_exact(report)
