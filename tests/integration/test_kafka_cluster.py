"""Three KRaft nodes from `lakehouse kafka start --nodes 3`: status shows each node and the quorum, topics get RF 3 and
min ISR 2, and one node killed with SIGKILL while producing and streaming loses and doubles nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from bench.drills import run_broker_loss
from lakehouse.infra.kafka_broker import port_is_free
from lakehouse.infra.kafka_cluster import cluster_of, quorum, under_replicated
from lakehouse.infra.settings import Settings
from lakehouse.schemas import topics
from lakehouse.streaming.kafka_topics import ReplicationImpossible, ensure_topics
from tests.conftest import free_port

pytestmark = pytest.mark.integration

EVENTS = 400
SMALL = {"LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "200"}


def free_base() -> int:
    """A port p with p..p+5 free: three nodes' client and controller ports (node i: p + 2(i-1), p + 1 + 2(i-1))."""
    for _ in range(100):
        base = free_port()
        if base + 5 <= 65535 and all(port_is_free("127.0.0.1", base + i) for i in range(6)):
            return base
    raise RuntimeError("no six free consecutive ports")


def lakehouse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("lakehouse")), *args], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cluster(jars_dir: str, tmp_path_factory: pytest.TempPathFactory):
    """`lakehouse kafka start --nodes 3` in a home of its own; stopped by `kafka stop`, by PID, at the end."""
    home = tmp_path_factory.mktemp("kafka-cluster")
    base = free_base()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir, "LAKEHOUSE_KAFKA_PORT": str(base),
                "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(base + 1), "LAKEHOUSE_KAFKA_HEAP": "256m"})
    settings = Settings(home=str(home), jars_dir=jars_dir, kafka_port=base, kafka_controller_port=base + 1,
                        kafka_nodes=3, kafka_heap="256m", spark_shuffle_partitions=2)
    nodes = cluster_of(settings)
    try:
        started = lakehouse(env, "kafka", "start", "--nodes", "3")
        assert started.returncode == 0, started.stderr
        # Without LAKEHOUSE_KAFKA_NODES the other commands would bootstrap from node 1 alone: the output says so.
        assert "LAKEHOUSE_KAFKA_NODES=3" in started.stdout
        yield settings, {**env, "LAKEHOUSE_KAFKA_NODES": "3"}, started.stdout
        stopped = lakehouse(env, "kafka", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert [line for line in stopped.stdout.splitlines() if line.startswith("Stopped Kafka node")] == [
            f"Stopped Kafka node {i} (pid {pid})." for i, pid in enumerate(_pids(stopped.stdout), start=1)]
        assert len(_pids(stopped.stdout)) == 3
    finally:
        nodes.stop()
    assert nodes.running() == {}


def _pids(text: str) -> list[int]:
    return [int(line.split("(pid ")[1].rstrip(").")) for line in text.splitlines() if line.startswith("Stopped Kafka node")]


def test_start_and_status_show_three_nodes_and_the_quorum(cluster):
    """The start names three nodes with their addresses and PIDs; `kafka status` shows each up, a leader among three
    voters with their lag, and no under-replicated partition (exit 0)."""
    settings, env, started = cluster
    for i, (port, controller) in enumerate(settings.kafka_node_ports(), start=1):
        assert f"node {i}: 127.0.0.1:{port} (controller 127.0.0.1:{controller}), pid " in started
    status = lakehouse(env, "kafka", "status")
    print(status.stdout)
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith("Kafka cluster of 3 nodes (each a broker and a KRaft controller), 3 up")
    node_lines = [line.split() for line in lines if line.startswith("  node ")]
    assert [(n[1], n[2], n[-1]) for n in node_lines] == [
        (str(i), f"127.0.0.1:{port}", "up") for i, (port, _) in enumerate(settings.kafka_node_ports(), start=1)]
    (quorum_line,) = [line for line in lines if line.startswith("Controller quorum: leader node ")]
    assert all(f"node {i} (" in quorum_line for i in (1, 2, 3)) and "(leader, lag 0)" in quorum_line
    assert "Under-replicated partitions: 0 of " in status.stdout
    assert f"Bootstrap: {settings.kafka_bootstrap}" in status.stdout


def test_topics_follow_the_cluster_rf_3_min_isr_2(cluster):
    """With the default replication factor (0: the cluster's), every partition of every topic has three replicas in
    sync and min.insync.replicas 2; a factor above the brokers up is one sentence."""
    settings, _, _ = cluster
    with pytest.raises(ReplicationImpossible) as info:     # before the topics exist: none is created
        ensure_topics(settings.kafka_bootstrap, topics.ALL, replication_factor=4)
    assert "LAKEHOUSE_KAFKA_REPLICATION_FACTOR=4" in str(info.value) and "\n" not in str(info.value)
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    metadata = admin.list_topics(timeout=10)
    for spec in topics.ALL:
        parts = metadata.topics[spec.name].partitions.values()
        assert len(parts) == spec.partitions
        assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in parts), spec.name
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in topics.ALL]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result()["min.insync.replicas"].value == "2", resource.name


def test_a_node_killed_mid_stream_loses_and_doubles_nothing(spark, cluster, tmp_path):
    """kill -9 of the quorum leader's node while producing and streaming bronze and silver of page views: producing
    and the stream carry on without it (acks=all, min ISR 2; the stream's bootstrap lists all three); it rejoins,
    bronze holds exactly the acknowledged coordinates, silver the acknowledged ids, and no partition stays
    under-replicated."""
    settings, _, _ = cluster
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    nodes = cluster_of(settings)
    voters, error = quorum(list(nodes.nodes), settings.jars_dir, tmp_path / "quorum-logs")
    leader = next((v.node_id for v in voters if v.role == "Leader"), None)
    assert leader is not None, error
    victim = nodes.node(leader)
    pid_before = victim.read_pid()
    # Away 5 s and until bronze has committed without it: Kafka fences a dead broker after 9 s
    # (broker.session.timeout.ms) and moves its partitions' leadership; Spark's next offset request then succeeds.
    report = run_broker_loss(settings, node=victim, losses=1, down_s=(5.0,), events=EVENTS, seed=41,
                             tables=("silver_page_views",), spark=spark, workdir=tmp_path, warm_up_rate=0.5,
                             rate=5.0, settle_s=4, commit_timeout_s=300, catch_up_s=240, extra_env=SMALL,
                             verify_layers=(), commit_while_down=True)
    text = report.text()
    print(text)
    assert report.error is None and report.exit_code == 0, text
    (loss,) = report.events
    assert loss.producing, text
    # Carried on: records were acknowledged and bronze committed while the node was dead, and no Kafka query was
    # stopped for a lost broker (two of three still answered).
    assert loss.acked_while_down > 0 and "bronze_page_views" in loss.committed_while_down, text
    assert report.watchdog_stops == 0, text
    assert report.failed == 0 and report.unresolved == 0 and report.acked == report.sent == EVENTS, text
    assert {(c.layer, c.table) for c in report.checks} >= {("bronze", "bronze_page_views"),
                                                           ("silver", "silver_page_views")}, text
    assert all(c.checked > 0 for c in report.checks if c.table != "late_arrivals"), text
    assert [c for c in report.checks if c.differences] == [] and report.passed, text
    pid_after = victim.read_pid()
    assert pid_after is not None and pid_after != pid_before
    deadline = time.monotonic() + 90
    while (lagging := under_replicated(settings.kafka_bootstrap)[1]) and time.monotonic() < deadline:
        time.sleep(1)
    assert lagging == [], lagging
