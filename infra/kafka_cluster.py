"""Several KRaft nodes on one machine with one cluster id: start, stop by PID, and what `kafka status` shows.

Each node is a broker and a controller ("combined" mode). Separate controller processes would add three JVMs
on the same two cores and buy nothing here: keeping the quorum clear of broker load matters when the roles
run on different hosts. Three combined nodes keep a majority of voters (two of three) and two in-sync
replicas when any one of them dies.

The quorum is dynamic (KIP-853): every node is formatted with the same `--initial-controllers` list, as the
one-node start's `--standalone` makes a quorum of one, so both layouts run kraft.version 1, find the quorum
through controller.quorum.bootstrap.servers and are shown alike. A static controller.quorum.voters list
works for a fixed three as well, but a voter that lost its disk could rejoin under its old identity and
elect itself on an empty log; with directory ids the quorum refuses it.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse.infra.jars import jar_paths
from lakehouse.infra.kafka_broker import BrokerError, KafkaNode, java_cmd, new_cluster_id
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

CLUSTER_FOLDER = "kafka-cluster"
QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


@dataclass(frozen=True)
class KafkaCluster:
    """The nodes of one cluster, each in <home>/kafka-cluster/node-<id>."""

    nodes: tuple[KafkaNode, ...]
    directory: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def layout_file(self) -> Path:
        return self.directory / "cluster.json"

    def running(self) -> dict[int, int]:
        """Node id -> PID of each node whose broker runs."""
        return {node.node_id: pid for node in self.nodes if (pid := node.read_pid())}

    def node(self, node_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == node_id)

    def start(self, jars_dir: str, *, timeout_s: float = 120) -> dict[int, int]:
        """Start every node that is down (all on a first start), wait until each serves and all are registered;
        node id -> PID of the nodes started."""
        running = self.running()
        down = [node for node in self.nodes if node.node_id not in running]
        if not down:
            raise BrokerError(f"The Kafka cluster is already running on {self.bootstrap} (pids "
                              f"{', '.join(str(pid) for pid in running.values())}); state in {self.directory}.")
        for node in down:
            node.check_ports()
        layout = self.layout()
        cluster_id, voters = layout["cluster_id"], initial_controllers(self.nodes, layout["directory_ids"])
        # All formatted (each a JVM of a few seconds, so at once) before any starts: a failed format leaves nothing
        # running.
        with ThreadPoolExecutor(len(down)) as pool:
            list(pool.map(lambda node: node.prepare(jars_dir, cluster_id=cluster_id, initial_controllers=voters), down))
        launched: dict[int, subprocess.Popen] = {}
        try:
            for node in down:
                launched[node.node_id] = node.launch(jars_dir)
            # Started together: a node serves clients only once a majority of voters elected a leader.
            deadline = time.monotonic() + timeout_s
            for node in down:
                node.wait_ready(launched[node.node_id], max(1.0, deadline - time.monotonic()))
            self._wait_registered(deadline)
        except BaseException:
            for node_id in launched:
                self.node(node_id).stop()
            raise
        return {node_id: proc.pid for node_id, proc in launched.items()}

    def layout(self) -> dict:
        """The cluster id and each node's metadata directory id: made on a first start, read afterwards."""
        ports = [[node.node_id, node.host, node.port, node.controller_port] for node in self.nodes]
        if not any(node.formatted for node in self.nodes):
            layout = {"cluster_id": new_cluster_id(), "nodes": ports,
                      "directory_ids": {str(node.node_id): new_cluster_id() for node in self.nodes}}
            self.directory.mkdir(parents=True, exist_ok=True)
            self.layout_file.write_text(json.dumps(layout, indent=1) + "\n")
            return layout
        layout = read_layout(self.directory)
        if layout is None:
            raise BrokerError(f"The Kafka cluster's nodes in {self.directory} have storage but {self.layout_file} is "
                              "missing; delete the folder to begin a new cluster (its topics and records go with it).")
        if layout["nodes"] != ports:
            raise BrokerError(
                f"The Kafka cluster in {self.directory} was formatted as {_layout_text(layout)}; start it with those "
                f"settings (LAKEHOUSE_KAFKA_NODES, LAKEHOUSE_KAFKA_PORT, LAKEHOUSE_KAFKA_CONTROLLER_PORT) or delete the "
                "folder to begin a new cluster (its topics and records go with it).")
        return layout

    def _wait_registered(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        brokers: set[int] = set()
        while time.monotonic() < deadline:
            try:
                brokers = set(admin.list_topics(timeout=2).brokers)
            except Exception:  # noqa: BLE001 - not answering yet: retry until the deadline
                brokers = set()
            if len(brokers) == len(self.nodes):
                return
            time.sleep(0.3)
        raise BrokerError(f"Only brokers {sorted(brokers)} of {len(self.nodes)} registered with the Kafka cluster in "
                          f"time; see server.log in {self.directory}/node-*/logs.")

    def stop(self, timeout_s: float = 30) -> dict[int, int]:
        """SIGTERM every running node at once (SIGKILL what lingers); node id -> PID stopped."""
        stopped: dict[int, int] = {}

        def stop(node: KafkaNode) -> None:
            pid = node.stop(timeout_s)
            if pid:
                stopped[node.node_id] = pid

        threads = [threading.Thread(target=stop, args=(node,)) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return dict(sorted(stopped.items()))


def cluster_of(settings: Settings, nodes: int | None = None) -> KafkaCluster:
    """The cluster the settings describe (`nodes` overrides LAKEHOUSE_KAFKA_NODES)."""
    pairs = settings.kafka_node_ports(nodes)
    host = settings.kafka_host
    quorum = ",".join(f"{host}:{controller}" for _, controller in pairs)
    directory = Path(settings.home) / CLUSTER_FOLDER
    return KafkaCluster(tuple(
        KafkaNode(i, host, port, controller, directory / f"node-{i}", heap=settings.kafka_heap, quorum=quorum,
                  cluster_size=len(pairs))
        for i, (port, controller) in enumerate(pairs, start=1)), directory)


def read_layout(directory: Path) -> dict | None:
    try:
        return json.loads((directory / "cluster.json").read_text())
    except (OSError, ValueError):
        return None


def recorded_cluster(settings: Settings) -> KafkaCluster | None:
    """The cluster this home formatted, as it was formatted (whatever the settings say now); None if none."""
    directory = Path(settings.home) / CLUSTER_FOLDER
    layout = read_layout(directory)
    if layout is None:
        return None
    nodes = layout["nodes"]
    quorum = ",".join(f"{host}:{controller}" for _, host, _, controller in nodes)
    return KafkaCluster(tuple(
        KafkaNode(node_id, host, port, controller, directory / f"node-{node_id}", heap=settings.kafka_heap,
                  quorum=quorum, cluster_size=len(nodes))
        for node_id, host, port, controller in nodes), directory)


def initial_controllers(nodes: tuple[KafkaNode, ...], directory_ids: dict[str, str]) -> str:
    """StorageTool's --initial-controllers: id@host:controller-port:directory-id for every voter."""
    return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}:{directory_ids[str(n.node_id)]}" for n in nodes)


def _layout_text(layout: dict) -> str:
    nodes = layout["nodes"]
    return f"{len(nodes)} nodes on " + ", ".join(f"{host}:{port} (controller {ctl})" for _, host, port, ctl in nodes)


# ------------------------------------------------------------------ status

@dataclass
class Voter:
    node_id: int
    role: str            # Leader, Follower or Observer
    lag: int | None      # records of the metadata log behind the leader


@dataclass
class ClusterStatus:
    """What `lakehouse kafka status` prints for a cluster."""

    cluster: KafkaCluster
    pids: dict[int, int]
    cluster_id: str = ""
    voters: list[Voter] = field(default_factory=list)
    quorum_error: str = ""
    partitions: int = 0
    under_replicated: list[str] = field(default_factory=list)   # "topic-partition (isr [..] of replicas [..])"
    topics: list[str] = field(default_factory=list)
    admin_error: str = ""

    @property
    def leader(self) -> int | None:
        return next((v.node_id for v in self.voters if v.role == "Leader"), None)

    @property
    def healthy(self) -> bool:
        return (len(self.pids) == len(self.cluster.nodes) and self.leader is not None and not self.under_replicated
                and not self.admin_error)

    def text(self) -> str:
        c = self.cluster
        up = len(self.pids)
        state = f"{up} up" if up else "not running"
        lines = [f"Kafka cluster of {len(c.nodes)} nodes (each a broker and a KRaft controller), {state}; "
                 f"state in {c.directory}" + (f", cluster id {self.cluster_id}" if self.cluster_id else "") + "."]
        for node in c.nodes:
            pid = self.pids.get(node.node_id)
            lines.append(f"  node {node.node_id}  {node.bootstrap:<21} controller {node.host}:{node.controller_port:<6} "
                         f"pid {pid or '-':<8} {'up' if pid else 'down'}")
        if self.voters:
            shown = ", ".join(f"node {v.node_id} ({v.role.lower()}, lag {'-' if v.lag is None else v.lag})"
                              for v in self.voters)
            lines.append(f"Controller quorum: leader node {self.leader if self.leader is not None else 'none'}; "
                         f"voters: {shown}.")
        else:
            lines.append(f"Controller quorum: unknown ({self.quorum_error or 'no answer'}).")
        if self.admin_error:
            lines.append(f"Under-replicated partitions: unknown ({self.admin_error}).")
        else:
            lines.append(f"Under-replicated partitions: {len(self.under_replicated)} of {self.partitions}"
                         + (f": {', '.join(self.under_replicated[:10])}" + (" ..." if len(self.under_replicated) > 10 else "")
                            if self.under_replicated else "") + ".")
            lines.append(f"Topics: {', '.join(self.topics) or 'none'}.")
        lines.append(f"Bootstrap: {c.bootstrap}")
        return "\n".join(lines)


def cluster_status(cluster: KafkaCluster, jars_dir: str, *, timeout_s: float = 30) -> ClusterStatus:
    """Each node's PID, the quorum (Kafka's MetadataQuorumCommand) and under-replicated partitions (AdminClient)."""
    status = ClusterStatus(cluster, cluster.running())
    layout = read_layout(cluster.directory) or {}
    status.cluster_id = layout.get("cluster_id", "")
    live = [cluster.node(node_id) for node_id in status.pids]
    if not live:
        status.quorum_error = status.admin_error = "no node is running"
        return status
    status.voters, status.quorum_error = quorum(live, jars_dir, cluster.directory / "logs", timeout_s)
    try:
        status.partitions, status.under_replicated, status.topics = under_replicated(
            ",".join(n.bootstrap for n in live), timeout_s=min(10.0, timeout_s))
    except Exception as exc:  # noqa: BLE001 - shown as the reason the count is unknown
        status.admin_error = str(exc)
    return status


def quorum(live: list[KafkaNode], jars_dir: str, logs_dir: Path, timeout_s: float = 30) -> tuple[list[Voter], str]:
    """The quorum's voters and observers with their roles and lag, from Kafka's own tool; ([], reason) if unknown."""
    controllers = ",".join(f"{n.host}:{n.controller_port}" for n in live)
    logs_dir.mkdir(parents=True, exist_ok=True)
    cmd = java_cmd(jar_paths(jars_dir, "kafka"), QUORUM_TOOL, "--bootstrap-controller", controllers,
                   "describe", "--replication", logs_dir=logs_dir, heap="128m")
    cmd.insert(1, "-XX:TieredStopAtLevel=1")   # a short-lived tool: C1 only starts sooner
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"no answer from the controllers at {controllers} within {timeout_s:.0f} s"
    if proc.returncode != 0:
        return [], (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[0][:300]
    return sorted(parse_replication(proc.stdout), key=lambda v: v.node_id), ""


def parse_replication(text: str) -> list[Voter]:
    """Rows of `kafka-metadata-quorum describe --replication`: NodeId, DirectoryId, LogEndOffset, Lag, ..., Status."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or "NodeId" not in lines[0]:
        return []
    header = lines[0]
    voters = []
    for row in lines[1:]:
        if len(row) != len(header) or not row[0].isdigit():
            continue
        values = dict(zip(header, row))
        lag = values.get("Lag", "")
        voters.append(Voter(int(values["NodeId"]), values.get("Status", "?"),
                            int(lag) if re.fullmatch(r"-?\d+", lag) else None))
    return voters


def under_replicated(bootstrap: str, *, timeout_s: float = 10) -> tuple[int, list[str], list[str]]:
    """(partitions, the under-replicated ones, user topics) over every topic the cluster has, internal ones included.

    A partition is under-replicated when its in-sync replicas are fewer than its replicas (or it has no leader).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    metadata = admin.list_topics(timeout=timeout_s)
    partitions = 0
    lagging = []
    for name, topic in sorted(metadata.topics.items()):
        for pid, part in sorted(topic.partitions.items()):
            partitions += 1
            if len(part.isrs) < len(part.replicas) or part.leader < 0:
                lagging.append(f"{name}-{pid} (in sync {sorted(part.isrs)} of {sorted(part.replicas)})")
    topics = sorted(name for name in metadata.topics if not name.startswith("__"))
    return partitions, lagging, topics
