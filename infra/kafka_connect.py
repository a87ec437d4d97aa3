"""Change data capture: Debezium's PostgreSQL connector in a Kafka Connect worker (standalone), from the Maven jars.

The worker runs the broker's own `connect-runtime` (the kafka classpath) with Debezium as an isolated plugin; its
state folder is <home>/cdc: worker and connector settings, the source offsets (the database log position each
record was read up to), the plugin link and the log. The capture starts with a consistent snapshot of the
database's tables tied to a log position, then streams every committed change from its replication slot.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.infra.jars import classpath_dir, jar_paths
from lakehouse.infra.kafka_broker import java_cmd
from lakehouse.infra.processes import pid_alive, port_is_free, process_args, terminate
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class CaptureError(RuntimeError):
    """The capture cannot be started or reached; the message says why and what to do."""


def connector_config(database: Any, postgres: Any) -> dict[str, str]:
    """Debezium's settings for a pipeline's database: snapshot first, then its slot; each table to `<db>.cdc...`."""
    return {
        "name": database.connector,
        "connector.class": CONNECTOR,
        "tasks.max": "1",
        "database.hostname": postgres.host,
        "database.port": str(postgres.port),
        "database.user": postgres.role,
        "database.dbname": database.name,
        "topic.prefix": database.topic_prefix,
        "plugin.name": "pgoutput",
        "publication.name": database.publication,
        "publication.autocreate.mode": "disabled",
        "slot.name": database.slot,
        "snapshot.mode": "initial",
        "table.include.list": ",".join(f"public.{t.name}" for t in database.tables),
        "tombstones.on.delete": "true",
        # Each table's topic, if it does not exist yet: compacted (the newest change per key is kept for ever),
        # one partition (every change in the database's order), the cluster's replication factor.
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "-1",
        "topic.creation.default.cleanup.policy": "compact",
        # Plain JSON envelopes (before, after, source, op, ts_ms), without Connect's schema beside each record.
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "decimal.handling.mode": "string",
        "time.precision.mode": "connect",
    }


@dataclass(frozen=True)
class ConnectWorker:
    """A standalone Kafka Connect worker: its REST port on loopback and its state folder."""

    host: str
    port: int
    directory: Path
    bootstrap: str
    jars_dir: str
    heap: str = "256m"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def worker_file(self) -> Path:
        return self.directory / "worker.properties"

    @property
    def pid_file(self) -> Path:
        return self.directory / "connect.pid"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def offsets_file(self) -> Path:
        return self.directory / "offsets"

    @property
    def plugins_dir(self) -> Path:
        return self.directory / "plugins"

    def connector_file(self, name: str) -> Path:
        return self.directory / f"{name}.properties"

    def read_pid(self) -> int | None:
        """The PID of this worker's JVM; a PID file naming anything else is removed as stale."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        args = process_args(pid)
        if pid_alive(pid) and MAIN in args and str(self.worker_file) in args:
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def worker_properties(self) -> str:
        props = {
            "bootstrap.servers": self.bootstrap,
            "listeners": f"http://{self.host}:{self.port}",
            "offset.storage.file.filename": self.offsets_file,
            # How often the worker records how far the database's log was read: a restart resumes from there,
            # and sends again (never skips) what came after it.
            "offset.flush.interval.ms": 1000,
            "plugin.path": self.plugins_dir,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            # Every change acknowledged by all in-sync replicas, in order, once per send.
            "producer.acks": "all",
            "producer.enable.idempotence": "true",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, connectors: list[dict[str, str]], timeout_s: float = 180) -> int:
        """Launch the worker with `connectors` and wait until each runs with its task; the worker's PID."""
        running = self.read_pid()
        if running is not None:
            return running
        if not port_is_free(self.host, self.port):
            raise CaptureError(f"Port {self.port} on {self.host} is taken by another process; set LAKEHOUSE_CDC_PORT "
                               "to a free port.")
        classpath = jar_paths(self.jars_dir, "kafka")
        plugin = classpath_dir(self.jars_dir, "debezium")
        jar_paths(self.jars_dir, "debezium")           # one sentence if `lakehouse setup` has not fetched it
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.plugins_dir.mkdir(exist_ok=True)
        link = self.plugins_dir / "debezium-postgres"
        if not link.is_symlink() or link.resolve() != plugin.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(plugin.resolve(), target_is_directory=True)
        self.worker_file.write_text(self.worker_properties())
        files = []
        for config in connectors:
            path = self.connector_file(config["name"])
            path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
            files.append(str(path))
        with open(self.logs_dir / "connect.out", "ab") as out:
            proc = subprocess.Popen(java_cmd(classpath, MAIN, str(self.worker_file), *files, logs_dir=self.logs_dir,
                                             heap=self.heap),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.pid_file.write_text(str(proc.pid))
        self._wait_running(proc, [c["name"] for c in connectors], timeout_s)
        return proc.pid

    def _wait_running(self, proc: subprocess.Popen, names: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise CaptureError(f"The Kafka Connect worker exited with code {proc.returncode} while starting; see "
                                   f"{self.logs_dir}/server.log.")
            states = {name: connector_state(self.connector_status(name)) for name in names}
            failed = {n: s for n, s in states.items() if s.startswith("FAILED")}
            if failed:
                self.stop()
                raise CaptureError("The capture failed to start: " + "; ".join(f"{n}: {s}" for n, s in failed.items())
                                   + f" (log {self.logs_dir}/server.log).")
            if states and all(s == "RUNNING" for s in states.values()):
                return
            time.sleep(0.5)
        self.stop()
        raise CaptureError(f"The capture was not running within {timeout_s:.0f} s ({states}); see "
                           f"{self.logs_dir}/server.log.")

    def connector_status(self, name: str) -> dict[str, Any] | None:
        """Connect's status of one connector and its tasks (GET /connectors/<name>/status), None when unknown."""
        try:
            with urllib.request.urlopen(f"{self.url}/connectors/{name}/status", timeout=5) as response:
                return json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def stop(self, timeout_s: float = 60) -> int | None:
        """SIGTERM the worker (it commits its offsets and stops its tasks), SIGKILL if it lingers; the PID stopped."""
        pid = self.read_pid()
        if pid is None:
            return None
        terminate(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return pid


def connector_state(status: dict[str, Any] | None) -> str:
    """RUNNING when the connector and every task run; else the first state that is not, with its trace's first line."""
    if not status:
        return "STARTING"
    parts = [status.get("connector", {})] + status.get("tasks", [])
    if len(parts) < 2:
        return "STARTING"
    for part in parts:
        if part.get("state") != "RUNNING":
            trace = (part.get("trace") or "").strip().splitlines()
            return part.get("state", "UNKNOWN") + (f" ({trace[0]})" if trace else "")
    return "RUNNING"


def local_worker(settings: Settings) -> ConnectWorker:
    """The Connect worker the settings name, on the pipeline's brokers."""
    return ConnectWorker("127.0.0.1", settings.cdc_port, Path(settings.home) / "cdc", settings.kafka_bootstrap,
                         settings.jars_dir)
