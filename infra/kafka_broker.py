"""A real Kafka broker in KRaft mode, started from the Maven jars, stopped by its PID."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from lakehouse.infra.jars import jar_paths
from lakehouse.infra.processes import pid_alive, port_is_free, process_args, terminate  # noqa: F401 - re-exported
from lakehouse.infra.settings import Settings, memory_bytes

log = logging.getLogger(__name__)

LOG4J2_FILE = Path(__file__).resolve().parent / "conf" / "kafka-log4j2.properties"


class BrokerError(RuntimeError):
    """The broker cannot be started or reached; the message says why and what to do."""


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node acting as broker and controller; a cluster is several of these."""

    node_id: int
    host: str
    port: int
    controller_port: int
    directory: Path
    heap: str = "512m"
    # A cluster's controller.quorum.bootstrap.servers (every node's controller); empty: this node alone.
    quorum: str = ""
    cluster_size: int = 1

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def config_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.directory / "kafka.pid"

    @property
    def console_log(self) -> Path:
        return self.logs_dir / "kafka.out"

    def server_properties(self) -> str:
        controller = f"{self.host}:{self.controller_port}"
        # Internal topics follow the cluster: RF 3 and min ISR 2 from three nodes on, so one may die.
        replicas = min(self.cluster_size, 3)
        min_isr = 2 if replicas >= 3 else 1
        props = {
            "node.id": self.node_id,
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": self.quorum or controller,
            "log.dirs": self.data_dir,
            # One node: internal topics must have RF 1 (min ISR 1) or consumer groups and transactions hang.
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": 0,
            # Topics come from the specs in schemas/, never from a typo in a consumer.
            "auto.create.topics.enable": "false",
            "num.partitions": 1,
            # The log cleaner allocates this on the heap at start: Kafka's 128 MiB default in a 256m heap made a
            # node die with OutOfMemoryError while starting now and then. A quarter of the heap, at most that.
            "log.cleaner.dedupe.buffer.size": min(128 << 20, memory_bytes(self.heap) // 4),
        }
        if self.cluster_size > 1:
            # What `lakehouse topics` creates with (replication factor -1: the cluster's default). With RF 3 and
            # min ISR 2, an acks=all write is on two nodes before it is acknowledged, and one node may be down.
            props["default.replication.factor"] = replicas
            props["min.insync.replicas"] = min_isr
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def read_pid(self) -> int | None:
        """The PID of this node's running broker; a PID file naming anything else is removed as stale."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if pid_alive(pid) and self._is_own_broker(pid):
            return pid
        # PIDs are reused: after a crash or reboot the file may name an unrelated process, never to be signalled.
        log.warning("removed stale Kafka PID file %s: pid %d is not this node's broker (gone, or another program)", self.pid_file, pid)
        self.pid_file.unlink(missing_ok=True)
        return None

    def _is_own_broker(self, pid: int) -> bool:
        """Whether `pid` runs kafka.Kafka with this node's config file (which lives in its state folder)."""
        args = process_args(pid)
        return "kafka.Kafka" in args and str(self.config_file.absolute()) in args

    def _java_cmd(self, classpath: list[str], main_class: str, *args: str, heap: str | None = None) -> list[str]:
        return java_cmd(classpath, main_class, *args, logs_dir=self.logs_dir, heap=heap)

    def _format_storage(self, classpath: list[str], cluster_id: str | None, initial_controllers: str | None) -> None:
        if self.formatted:
            return
        if self.quorum and not (cluster_id and initial_controllers):
            # A voter that lost its disk must not rejoin under its old directory id: it could elect itself on an
            # empty log and lose what the quorum committed.
            raise BrokerError(f"Kafka node {self.node_id} has no storage in {self.data_dir} but its cluster was "
                              f"formatted before; delete {self.directory.parent} to begin a new cluster (its topics "
                              "and records go with it).")
        args = ["format", "--cluster-id", cluster_id or new_cluster_id(), "--config", str(self.config_file)]
        # A lone node is a quorum of itself (--standalone); a cluster's nodes are all formatted with the same list of
        # voters, each with its metadata directory's id.
        args += ["--initial-controllers", initial_controllers] if initial_controllers else ["--standalone"]
        proc = subprocess.run(self._java_cmd(classpath, "kafka.tools.StorageTool", *args), capture_output=True, text=True)
        if proc.returncode != 0:
            raise BrokerError(f"Formatting Kafka storage in {self.data_dir} failed: {proc.stderr.strip()[-400:]}")
        log.info("formatted Kafka storage in %s (cluster id %s)", self.data_dir, args[2])

    def start(self, jars_dir: str, *, cluster_id: str | None = None, initial_controllers: str | None = None,
              timeout_s: float = 90) -> int:
        """Format on first start, launch detached, wait until an AdminClient lists topics; returns the PID."""
        proc = self.launch(jars_dir, cluster_id=cluster_id, initial_controllers=initial_controllers)
        self.wait_ready(proc, timeout_s)
        return proc.pid

    def launch(self, jars_dir: str, *, cluster_id: str | None = None,
               initial_controllers: str | None = None) -> subprocess.Popen:
        """Format on first start and launch detached, without waiting (a cluster's nodes wait for each other)."""
        self.prepare(jars_dir, cluster_id=cluster_id, initial_controllers=initial_controllers)
        classpath = jar_paths(jars_dir, "kafka")
        with open(self.console_log, "ab") as out:
            proc = subprocess.Popen(
                self._java_cmd(classpath, "kafka.Kafka", str(self.config_file.absolute()), heap=self.heap),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # survives the command that started it
            )
        self.pid_file.write_text(str(proc.pid))
        return proc

    def check_ports(self) -> None:
        """BrokerError, one sentence, when this node is running or one of its ports is taken."""
        running = self.read_pid()
        if running:
            raise BrokerAlreadyRunning(running, self)
        for port, setting in ((self.port, "LAKEHOUSE_KAFKA_PORT"), (self.controller_port, "LAKEHOUSE_KAFKA_CONTROLLER_PORT")):
            if not port_is_free(self.host, port):
                whose = f" (Kafka node {self.node_id}'s: {setting} + {2 * (self.node_id - 1)})" if self.quorum else ""
                raise BrokerError(
                    f"Port {port} on {self.host}{whose} is taken by another process; "
                    "set LAKEHOUSE_KAFKA_PORT / LAKEHOUSE_KAFKA_CONTROLLER_PORT to free ports."
                )

    def prepare(self, jars_dir: str, *, cluster_id: str | None = None, initial_controllers: str | None = None) -> None:
        """Check the ports, write the config and format the storage if it never was."""
        self.check_ports()
        for folder in (self.data_dir, self.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.server_properties())
        self._format_storage(jar_paths(jars_dir, "kafka"), cluster_id, initial_controllers)

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()

    def wait_ready(self, proc: subprocess.Popen, timeout_s: float) -> None:
        """Until an AdminClient at this node lists topics; stops the node and raises BrokerError if it never does."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                tail = self.console_log.read_text(errors="replace").strip().splitlines()[-5:]
                raise BrokerError(
                    f"The Kafka broker {self.bootstrap} exited with code {proc.returncode} while starting; "
                    f"see {self.logs_dir}/server.log. Last lines: {' | '.join(tail)}"
                )
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:  # noqa: BLE001 - not ready yet: any client error means retry
                time.sleep(0.5)
        self.stop()
        raise BrokerError(f"The Kafka broker {self.bootstrap} did not become ready within {timeout_s:.0f}s; "
                          f"see {self.logs_dir}/server.log.")

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM the broker by its PID, SIGKILL if it lingers; returns the PID stopped, or None."""
        pid = self.read_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return None
        terminate(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return pid


def java_cmd(classpath: list[str], main_class: str, *args: str, logs_dir: Path, heap: str | None = None) -> list[str]:
    """A Kafka JVM (server or tool) with the project's log4j2 file, which logs to `logs_dir`/server.log."""
    cmd = ["java"]
    if heap:
        cmd += [f"-Xms{heap}", f"-Xmx{heap}"]
    return cmd + [
        f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE}",
        f"-Dkafka.logs.dir={logs_dir}",
        "-cp", os.pathsep.join(classpath),
        main_class, *args,
    ]



class BrokerAlreadyRunning(BrokerError):
    def __init__(self, pid: int, node: KafkaNode):
        super().__init__(f"Kafka is already running (pid {pid}) on {node.bootstrap}; data in {node.data_dir}.")
        self.pid = pid


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID, base64url without padding (what `kafka-storage random-uuid` prints).

    Like Kafka's own Uuid.randomUuid(), never one that starts with '-' (1 in 64 would): the storage
    tool's argument parser would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def local_node(settings: Settings) -> KafkaNode:
    """The single embedded node the settings describe."""
    return KafkaNode(
        node_id=1,
        host=settings.kafka_host,
        port=settings.kafka_port,
        controller_port=settings.kafka_controller_port,
        directory=Path(settings.kafka_dir),
        heap=settings.kafka_heap,
    )
