"""A Spark standalone cluster on this machine: a master and N workers from the pyspark wheel, stopped by PID."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lakehouse.infra.processes import pid_alive, port_is_free, process_args, terminate
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

HOST = "127.0.0.1"          # loopback only: the cluster serves this machine's drivers
DEFAULT_PORT = 7077         # Spark's own defaults, what spark:// URLs and tutorials assume
DEFAULT_UI_PORT = 8080
DEFAULT_MEMORY = "2g"       # two executors of 1g (infra/spark.py): two applications at once
DAEMON_HEAP = "512m"        # master and workers only schedule; Spark's default of 1g each is idle memory here
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STOP_WAIT_S = 30.0


class ClusterError(RuntimeError):
    """The cluster cannot be started, stopped or reached; the message says why and what to do."""


def spark_home() -> Path:
    """The pyspark wheel's folder: its bin/spark-class and jars/ are a Spark distribution without sbin/."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def machine_cores() -> int:
    return os.cpu_count() or 1


def cluster_dir(settings: Settings) -> Path:
    return Path(settings.home) / "spark-cluster"


@dataclass(frozen=True)
class ClusterSpec:
    """What `start` was asked for; kept in <home>/spark-cluster/cluster.json for `status` and `stop`."""

    workers: int = 1
    cores: int = 0              # task slots per worker; 0: twice this machine's cores, shared by the workers
    app_cores: int = 0          # slots an application gets at most (unless it sets spark.cores.max); 0: the machine's cores
    memory: str = DEFAULT_MEMORY  # per worker, what its executors may take
    port: int = DEFAULT_PORT
    ui_port: int = DEFAULT_UI_PORT

    @property
    def worker_cores(self) -> int:
        # Standalone Spark never takes cores back from a running application: one that holds them all (an idle
        # `lakehouse serve`, a stream) leaves the next one waiting forever. Twice the machine's cores, at most the
        # machine's per application, run two at once, each as parallel as under local[*], as two local[*]
        # processes would share the machine.
        return self.cores or max(1, 2 * machine_cores() // self.workers)

    @property
    def application_cores(self) -> int:
        return self.app_cores or machine_cores()

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"


@dataclass(frozen=True)
class Daemon:
    """A master or a worker process, its folder holding its PID file, properties and log."""

    main_class: str
    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def pid_file(self) -> Path:
        return self.directory / "pid"

    @property
    def properties_file(self) -> Path:
        return self.directory / "spark.conf"

    @property
    def log_file(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def work_dir(self) -> Path:
        return self.directory / "work"

    def read_pid(self) -> int | None:
        """The PID of this daemon; a PID file naming anything else is removed as stale."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        args = process_args(pid)
        # PIDs are reused: after a crash or reboot the file may name an unrelated process, never to be signalled.
        if pid_alive(pid) and self.main_class in args and str(self.properties_file) in args:
            return pid
        log.warning("removed stale Spark %s PID file %s: pid %d is not this daemon", self.name, self.pid_file, pid)
        self.pid_file.unlink(missing_ok=True)
        return None

    def launch(self, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Start detached through the wheel's spark-class (which execs the JVM: the PID stays the daemon's)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [str(spark_home() / "bin" / "spark-class"), self.main_class, *args,
                   "--properties-file", str(self.properties_file)]
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)   # survives the command that started it
        self.pid_file.write_text(str(proc.pid))
        return proc

    def stop(self, timeout_s: float = STOP_WAIT_S) -> int | None:
        """SIGTERM by PID, SIGKILL if it lingers; the PID stopped, or None when it was not running."""
        pid = self.read_pid()
        if pid is None:
            return None
        if terminate(pid, timeout_s):
            log.warning("Spark %s (pid %d) did not stop within %.0f s; killed it", self.name, pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        wanted = [line for line in text.splitlines() if re.search(r"ERROR|Exception|Error:|Caused by", line)]
        return " | ".join((wanted or text.splitlines())[-lines:])


def master(settings: Settings) -> Daemon:
    return Daemon(MASTER_CLASS, cluster_dir(settings) / "master")


def workers(settings: Settings) -> list[Daemon]:
    """Every worker folder there is (a previous start may have had more workers than the last)."""
    found = [p for p in cluster_dir(settings).glob("worker-*") if p.name.removeprefix("worker-").isdigit()]
    return [Daemon(WORKER_CLASS, folder) for folder in sorted(found, key=lambda p: int(p.name.removeprefix("worker-")))]


def saved_spec(settings: Settings) -> ClusterSpec | None:
    try:
        return ClusterSpec(**json.loads((cluster_dir(settings) / "cluster.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _env(conf_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        # Or a worker registers, and the executors listen, on the machine's external address.
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_HEAP,
        # No spark-env.sh or spark-defaults.conf from elsewhere changes what the daemons do.
        "SPARK_CONF_DIR": str(conf_dir),
        # Executors of a driver that names no Python (spark.pyspark.python) still get this venv's.
        "PYSPARK_PYTHON": sys.executable,
    }


def _properties(values: dict[str, Any]) -> str:
    return "".join(f"{key} {value}\n" for key, value in values.items())


def running_pids(settings: Settings) -> dict[str, int]:
    """{daemon name: pid} of the cluster's daemons that run now."""
    return {d.name: pid for d in [master(settings), *workers(settings)] if (pid := d.read_pid()) is not None}


def check_can_start(settings: Settings, spec: ClusterSpec) -> None:
    """Raise ClusterError with one sentence when the cluster cannot start as asked."""
    running = running_pids(settings)
    if running:
        raise ClusterError(f"the Spark cluster of this home is already running ({_pids(running)}); "
                           "`lakehouse spark-cluster stop` stops it.")
    if spec.port == spec.ui_port:
        raise ClusterError(f"--port and --ui-port are both {spec.port}; give them different ports.")
    if spec.ui_port + spec.workers > 65535:
        raise ClusterError(f"worker {spec.workers}'s web UI would need port {spec.ui_port + spec.workers}, above 65535; "
                           "choose a lower --ui-port.")
    for port, what, flag in ((spec.port, "master", "--port"), (spec.ui_port, "master's web UI", "--ui-port")):
        if not port_is_free(HOST, port):
            raise ClusterError(f"port {port} on {HOST} (the {what}) is taken by another program; choose a free "
                               f"one with {flag}.")


def start(settings: Settings, spec: ClusterSpec, timeout_s: float = 90.0) -> dict:
    """Start the master and spec.workers workers detached; wait until the master lists them ALIVE; its JSON."""
    check_can_start(settings, spec)
    base = cluster_dir(settings)
    base.mkdir(parents=True, exist_ok=True)
    (base / "cluster.json").write_text(json.dumps(asdict(spec)))
    conf_dir = base / "conf"
    conf_dir.mkdir(exist_ok=True)
    env = _env(conf_dir)

    boss = master(settings)
    boss.directory.mkdir(parents=True, exist_ok=True)
    # The REST submission server (port 6066) is not used: drivers run where `lakehouse` runs (client mode).
    boss.properties_file.write_text(_properties({"spark.master.rest.enabled": "false",
                                                 "spark.deploy.defaultCores": spec.application_cores}))
    procs = {boss.name: (boss, boss.launch(["--host", HOST, "--port", str(spec.port), "--webui-port",
                                            str(spec.ui_port)], env))}
    for i in range(1, spec.workers + 1):
        worker = Daemon(WORKER_CLASS, base / f"worker-{i}")
        worker.directory.mkdir(parents=True, exist_ok=True)
        # An application's folder (its jars, the executors' stdout and stderr) goes a week after it ended.
        worker.properties_file.write_text(_properties({"spark.worker.cleanup.enabled": "true"}))
        args = ["--host", HOST, "--cores", str(spec.worker_cores), "--memory", spec.memory,
                "--work-dir", str(worker.work_dir), "--webui-port", str(spec.ui_port + i), spec.master_url]
        procs[worker.name] = (worker, worker.launch(args, env))
    try:
        return _wait_ready(spec, procs, timeout_s)
    except BaseException:
        stop(settings)
        raise


def _wait_ready(spec: ClusterSpec, procs: dict[str, tuple[Daemon, subprocess.Popen]], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    state: dict = {}
    while time.monotonic() < deadline:
        for daemon, proc in procs.values():
            if proc.poll() is not None:
                raise ClusterError(f"the Spark {daemon.name} exited with code {proc.returncode} while starting; see "
                                   f"{daemon.log_file}. {daemon.tail()}".strip())
        try:
            state = master_state(spec.ui_port, timeout_s=2)
        except ClusterError:
            time.sleep(0.5)
            continue
        if state.get("status") == "ALIVE" and len(alive_workers(state)) >= spec.workers:
            return state
        time.sleep(0.5)
    got = len(alive_workers(state)) if state else 0
    raise ClusterError(f"the Spark cluster did not come up within {timeout_s:.0f} s ({got} of {spec.workers} workers "
                       f"registered); see the logs in {next(iter(procs.values()))[0].directory.parent}.")


def alive_workers(state: dict) -> list[dict]:
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


def master_state(ui_port: int, timeout_s: float = 5) -> dict:
    """The master's own status (its web UI's /json/): workers, cores, memory, applications."""
    url = f"http://{HOST}:{ui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ClusterError(f"the Spark master's status at {url} does not answer ({exc}).") from None


def stop(settings: Settings) -> dict[str, int]:
    """Stop the workers (which stop their executors), then the master; {daemon name: pid} of those stopped."""
    stopped = {}
    for daemon in [*workers(settings), master(settings)]:
        pid = daemon.stop()
        if pid is not None:
            stopped[daemon.name] = pid
    return stopped


def _pids(pids: dict[str, int]) -> str:
    return ", ".join(f"{name} pid {pid}" for name, pid in pids.items())


def executor_logs(settings: Settings, app_id: str) -> list[Path]:
    """The stderr files of an application's executors in the workers' work folders."""
    return sorted(p for w in workers(settings) for p in (w.work_dir / app_id).glob("*/stderr"))
