"""The three-node Kafka's layout without a JVM: ports, bootstrap, node configs, replication, status text, and the
user's mistakes as one sentence."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from lakehouse.cli import main as cli
from lakehouse.infra.kafka_broker import BrokerError, local_node
from lakehouse.infra.kafka_cluster import (ClusterStatus, Voter, cluster_of, initial_controllers, parse_replication,
                                           recorded_cluster)
from lakehouse.infra.settings import Settings, SettingsError
from lakehouse.streaming.kafka_topics import topic_replication


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_one_node_is_as_before(tmp_path: Path):
    """LAKEHOUSE_KAFKA_NODES defaults to 1: bootstrap host:port, and the node's config has RF 1 internals and its own
    controller as the quorum, with no cluster defaults."""
    s = Settings(home=str(tmp_path))
    assert s.kafka_nodes == 1 and s.kafka_bootstrap == "127.0.0.1:9092"
    assert s.kafka_node_ports() == [(9092, 9093)]
    p = props(local_node(s).server_properties())
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert p["offsets.topic.replication.factor"] == "1" and p["transaction.state.log.min.isr"] == "1"
    assert "default.replication.factor" not in p and "min.insync.replicas" not in p


def test_three_nodes_ports_bootstrap_and_folders(tmp_path: Path):
    """Node i listens on the base ports + 2(i-1); the default bootstrap lists all three; each node has its folder."""
    s = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_NODES": "3"})
    assert s.kafka_node_ports() == [(9092, 9093), (9094, 9095), (9096, 9097)]
    assert s.kafka_bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    cluster = cluster_of(s)
    assert cluster.bootstrap == s.kafka_bootstrap
    assert [n.directory for n in cluster.nodes] == [tmp_path / "kafka-cluster" / f"node-{i}" for i in (1, 2, 3)]
    # An explicit bootstrap is used as is.
    s = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_NODES": "3",
                           "LAKEHOUSE_KAFKA_BOOTSTRAP": "b1:9092,b2:9092"})
    assert s.kafka_bootstrap == "b1:9092,b2:9092"


def test_cluster_node_config_replicates_internal_topics(tmp_path: Path):
    """Each node is broker and controller, finds the quorum through all three controllers, and replicates internal
    and new topics three times with min ISR 2."""
    s = Settings(home=str(tmp_path), kafka_port=29290, kafka_controller_port=29291)
    nodes = cluster_of(s, 3).nodes
    p = props(nodes[1].server_properties())
    assert p["node.id"] == "2" and p["process.roles"] == "broker,controller"
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:29292,CONTROLLER://127.0.0.1:29293"
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:29291,127.0.0.1:29293,127.0.0.1:29295"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "share.coordinator.state.topic.replication.factor", "default.replication.factor"):
        assert p[key] == "3", key
    for key in ("transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr", "min.insync.replicas"):
        assert p[key] == "2", key
    assert initial_controllers(nodes, {"1": "a", "2": "b", "3": "c"}) == (
        "1@127.0.0.1:29291:a,2@127.0.0.1:29293:b,3@127.0.0.1:29295:c")


@pytest.mark.parametrize("env, words", [
    ({"LAKEHOUSE_KAFKA_NODES": "3", "LAKEHOUSE_KAFKA_CONTROLLER_PORT": "9094"}, ("port 9094", "odd number")),
    ({"LAKEHOUSE_KAFKA_NODES": "3", "LAKEHOUSE_KAFKA_PORT": "65532", "LAKEHOUSE_KAFKA_CONTROLLER_PORT": "65533"},
     ("above 65535",)),
    ({"LAKEHOUSE_KAFKA_NODES": "0"}, ("LAKEHOUSE_KAFKA_NODES", "from 1")),
    ({"LAKEHOUSE_KAFKA_REPLICATION_FACTOR": "-1"}, ("LAKEHOUSE_KAFKA_REPLICATION_FACTOR", "follow the cluster")),
])
def test_port_and_count_mistakes_are_one_sentence(tmp_path: Path, env, words):
    """Ports that two nodes would share, ports past 65535, and impossible counts are refused in one sentence."""
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), **env})
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_replication_follows_the_cluster_unless_given():
    """0 asks for the broker's default (-1) and sets nothing; a given factor brings its min ISR (2 from RF 3 on)."""
    assert topic_replication(0) == (-1, {})
    assert topic_replication(1) == (1, {"min.insync.replicas": "1"})
    assert topic_replication(3) == (3, {"min.insync.replicas": "2"})
    assert Settings().kafka_replication_factor == 0


def test_quorum_tool_output_is_parsed():
    """kafka-metadata-quorum's replication table: node, role, lag; observers too; a garbled line is skipped."""
    text = """NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status
3       NqZ1Nf0JQn2yr6vE0kzQ6w  412           0    1764445469000       1764445469000          Leader
1       xsKzYQpDT2-hq3yAuWrHcw  410           2    1764445468900       1764445468900          Follower
2       Ep9xR0PJT3a3wlQZ6b9f2g  300           112  1764445460000       1764445460000          Follower
oops
"""
    assert parse_replication(text) == [Voter(3, "Leader", 0), Voter(1, "Follower", 2), Voter(2, "Follower", 112)]
    assert parse_replication("") == [] and parse_replication("error: timed out") == []


def test_status_text_names_every_node_the_quorum_and_lagging_partitions(tmp_path: Path):
    """One line per node (address, controller, pid, up/down), the quorum's leader and voters' lag, the URP count."""
    cluster = cluster_of(Settings(home=str(tmp_path)), 3)
    status = ClusterStatus(cluster, {1: 101, 3: 303}, cluster_id="abc",
                           voters=[Voter(1, "Leader", 0), Voter(2, "Follower", 40), Voter(3, "Follower", 0)],
                           partitions=15, under_replicated=["t-0 (in sync [1, 3] of [1, 2, 3])"], topics=["t"])
    text = status.text()
    assert text.splitlines()[0].startswith("Kafka cluster of 3 nodes (each a broker and a KRaft controller), 2 up")
    assert "  node 2  127.0.0.1:9094" in text and "pid -" in text and text.count(" down") == 1
    assert "Controller quorum: leader node 1; voters: node 1 (leader, lag 0), node 2 (follower, lag 40)" in text
    assert "Under-replicated partitions: 1 of 15: t-0 (in sync [1, 3] of [1, 2, 3])." in text
    assert not status.healthy
    down = ClusterStatus(cluster, {}, quorum_error="no node is running", admin_error="no node is running")
    assert "not running" in down.text().splitlines()[0] and "Controller quorum: unknown (no node is running)" in down.text()


def test_a_cluster_formatted_with_other_ports_is_one_sentence(tmp_path: Path):
    """Starting with settings that differ from the recorded layout names the layout and the way out, before any JVM."""
    s = Settings(home=str(tmp_path), kafka_port=29290, kafka_controller_port=29291)
    first = cluster_of(s, 3)
    layout = {"cluster_id": "c", "directory_ids": {"1": "a", "2": "b", "3": "c"},
              "nodes": [[n.node_id, n.host, n.port, n.controller_port] for n in first.nodes]}
    first.directory.mkdir(parents=True)
    first.layout_file.write_text(json.dumps(layout))
    meta = first.nodes[0].data_dir / "meta.properties"
    meta.parent.mkdir(parents=True)
    meta.write_text("cluster.id=c\n")
    recorded = recorded_cluster(Settings(home=str(tmp_path)))
    assert recorded is not None and recorded.bootstrap == first.bootstrap
    moved = cluster_of(Settings(home=str(tmp_path), kafka_port=29390, kafka_controller_port=29391), 3)
    with pytest.raises(BrokerError) as info:
        moved.layout()   # what a start checks before it formats or launches anything
    message = str(info.value)
    assert "\n" not in message and "127.0.0.1:29290" in message and "LAKEHOUSE_KAFKA_PORT" in message


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("LAKEHOUSE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield monkeypatch
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_two_nodes_with_replication_factor_3_is_one_sentence(clean_env, capsys):
    """`kafka start --nodes 2` with LAKEHOUSE_KAFKA_REPLICATION_FACTOR=3: exit 2 and one sentence, nothing started."""
    clean_env.setenv("LAKEHOUSE_KAFKA_REPLICATION_FACTOR", "3")
    assert cli.main(["kafka", "start", "--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: LAKEHOUSE_KAFKA_REPLICATION_FACTOR=3 needs at least 3 brokers but --nodes 2")
    assert "\n" not in err


def test_status_of_a_cluster_never_started(clean_env, capsys):
    """With LAKEHOUSE_KAFKA_NODES=3 and nothing started, `kafka status` says where the nodes would listen (exit 1)."""
    clean_env.setenv("LAKEHOUSE_KAFKA_NODES", "3")
    assert cli.main(["kafka", "status"]) == 1
    out = capsys.readouterr().out
    assert "not running" in out and "127.0.0.1:9092, 127.0.0.1:9094, 127.0.0.1:9096" in out


@pytest.mark.parametrize("heap, buffer", [("256m", 64 << 20), ("512m", 128 << 20), ("4g", 128 << 20)])
def test_the_log_cleaners_buffer_fits_the_heap(tmp_path: Path, heap: str, buffer: int):
    """The log cleaner's dedupe buffer, allocated on the heap at start, is a quarter of a small heap and Kafka's
    128 MiB default otherwise (its default in a 256m heap killed a node with OutOfMemoryError now and then)."""
    s = Settings(home=str(tmp_path), kafka_heap=heap)
    assert props(local_node(s).server_properties())["log.cleaner.dedupe.buffer.size"] == str(buffer)
