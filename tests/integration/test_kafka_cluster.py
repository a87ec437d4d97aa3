"""Three KRaft nodes from `lakehouse kafka start --nodes 3`: status shows each node and the quorum, topics get RF 3 and
min ISR 2; and `lakehouse drill cluster` (the cluster profile, all three engines at once) kills one node with SIGKILL
while producing and streaming on them, and nothing is lost or doubled."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from lakehouse.infra.kafka_broker import port_is_free
from lakehouse.infra.kafka_cluster import cluster_of
from lakehouse.infra.settings import Settings
from lakehouse.schemas import topics
from lakehouse.streaming.kafka_topics import ReplicationImpossible, ensure_topics
from tests.conftest import free_port

pytestmark = pytest.mark.integration

EVENTS = 600     # the shop's generator sends its 250 dimension records first: about 60 orders follow


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


def _in_sync(metadata) -> bool:
    listed = metadata.topics
    return all(s.name in listed and all(len(p.isrs) == 3 for p in listed[s.name].partitions.values())
               for s in topics.ALL)


def test_topics_follow_the_cluster_rf_3_min_isr_2(cluster):
    """With the default replication factor (0: the cluster's), every partition of every topic has three replicas in
    sync and min.insync.replicas 2; a factor above the brokers up is one sentence."""
    settings, _, _ = cluster
    with pytest.raises(ReplicationImpossible) as info:     # before the topics exist: none is created
        ensure_topics(settings.kafka_bootstrap, topics.ALL, replication_factor=4)
    assert "LAKEHOUSE_KAFKA_REPLICATION_FACTOR=4" in str(info.value) and "\n" not in str(info.value)
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    # Each node learns of a new topic on its own: this client may ask one that has not yet (a CI run did).
    deadline = time.monotonic() + 30
    while not _in_sync(metadata := admin.list_topics(timeout=10)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for spec in topics.ALL:
        parts = metadata.topics[spec.name].partitions.values()
        assert len(parts) == spec.partitions
        assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in parts), spec.name
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in topics.ALL]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result()["min.insync.replicas"].value == "2", resource.name


def test_the_cluster_drill_kills_a_node_under_a_stream_on_all_three_engines(jars_dir, tmp_path):
    """`lakehouse drill cluster`, reduced: a standalone master and worker, three KRaft nodes and the S3 server in a
    folder of its own; `lakehouse stream` of the orders path runs on the executors and writes the s3a:// lake; kill -9
    of the quorum leader's node while producing, then kill -9 of the stream mid-batch. Producing and the stream carry
    on without the node (acks=all, min ISR 2, every node in the bootstrap), it rejoins, the stream restarts from its
    checkpoint on S3; bronze holds exactly the acknowledged coordinates, silver the valid ids, gold equals the batch
    lane and plain Python, the S3 server lists bronze's Delta log without a gap, its previous version reads back
    (VERSION AS OF), no partition stays under-replicated, and every process the drill started is gone."""
    base, master, ui, s3 = free_base(), free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "AWS_"))}
    env.update({"LAKEHOUSE_JARS_DIR": jars_dir, "LAKEHOUSE_HOME": str(tmp_path / "home"),
                "LAKEHOUSE_KAFKA_PORT": str(base), "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(base + 1),
                "LAKEHOUSE_KAFKA_HEAP": "256m", "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{master}",
                "LAKEHOUSE_S3_ENDPOINT": f"http://127.0.0.1:{s3}", "TMPDIR": str(tmp_path)})
    drill = subprocess.run([str(Path(sys.executable).with_name("lakehouse")), "drill", "cluster", "--events", str(EVENTS),
                            "--losses", "1", "--stream-kills", "1", "--seed", "41", "--spark-ui-port", str(ui)],
                           env=env, capture_output=True, text=True, timeout=1500)
    text = drill.stdout
    print(text, drill.stderr[-4000:])
    assert drill.returncode == 0, text[-3000:] + drill.stderr[-3000:]
    assert "broker losses: 1 (SIGKILL to the broker), broker restarts: 1, losses while producing: 1/1" in text
    # Carried on: records were acknowledged and bronze committed while the node was dead, and no Kafka query was
    # stopped for a lost broker (two of three still answered).
    away = re.search(r"while it was away: ([\d,]+) records acknowledged, Kafka flows that committed: (.*)", text)
    assert away and int(away.group(1).replace(",", "")) > 0 and "bronze_orders" in away.group(2), text
    assert "(broker watchdog stops: 0)" in text
    assert f"records produced: sent {EVENTS}, acknowledged {EVENTS} (" in text and "failed 0, unresolved 0" in text
    checked = {m.group(1, 2): int(m.group(3).replace(",", "")) for m in re.finditer(
        r"^(bronze|silver|batch lane|plain Python)\s+(\w+)\s+([\d,]+)\s+0\s", text, re.M)}
    assert {("bronze", "bronze_orders"), ("silver", "silver_orders"), ("batch lane", "gold_revenue_per_minute"),
            ("plain Python", "gold_revenue_per_minute")} <= set(checked), text
    assert all(n > 0 for (_, table), n in checked.items() if table not in ("quarantine", "late_arrivals")), text
    assert checked["bronze", "bronze_orders"] >= 20, text
    # The stream killed (its Spark JVM among the processes) and restarted on the S3 checkpoint, which lost and doubled
    # nothing (the checks above); the lake's objects as the S3 server lists them, and an older version read back.
    kill = re.search(r"^stream kill 1: at \d+ s, SIGKILL to the whole process group \((.*)\) .* committed again "
                     r"[\d.]+ s later$", text, re.M)
    assert kill and "java" in kill.group(1).split(", "), text
    lake = {m.group(1): (int(m.group(2).replace(",", "")), int(m.group(3))) for m in re.finditer(
        r"^(S3 server|time travel)\s+bronze_orders\s+([\d,]+)\s+(\d+)\s", text, re.M)}
    tasks = re.search(r"^Spark cluster\s+executors\s+([\d,]+)\s+0\s", text, re.M)
    assert tasks and int(tasks.group(1).replace(",", "")) > 0, text     # the stream ran on the worker's executor
    assert lake["S3 server"][0] >= 2 and lake["time travel"][0] > 0 and lake["S3 server"][1] == lake["time travel"][1] == 0
    assert "differences: 0\nresult: PASS" in text and "under-replicated partitions after the drill: 0" in text
    # The stream ran on the cluster, the lake was on S3, and the drill's engines are all stopped.
    assert "lake s3a://lakehouse/lake at http://127.0.0.1:" in text + drill.stderr
    for port in (base, base + 2, base + 4, master, ui, s3):
        assert port_is_free("127.0.0.1", port), port
