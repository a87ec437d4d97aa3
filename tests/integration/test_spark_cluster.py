"""`lakehouse spark-cluster` starts a real standalone cluster, says what to set, refuses mistakes in one sentence and
stops by PID. Work on the cluster's executors is checked by the cluster drill (tests/integration/test_kafka_cluster.py):
a stream on it, exact in every layer against plain Python and the batch lane."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.infra.kafka_broker import pid_alive, port_is_free
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark_cluster import master_state
from tests.conftest import free_port

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


def lakehouse(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(jars_dir, tmp_path_factory):
    """A one-worker cluster started by the command, on free ports in its own home; stopped by PID at the end."""
    home = tmp_path_factory.mktemp("cluster-home")
    port, ui_port = free_port(), free_port()
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir}
    started = lakehouse(env, "spark-cluster", "start", "--port", str(port), "--ui-port", str(ui_port), timeout=180)
    assert started.returncode == 0, started.stderr[-3000:] + started.stdout
    settings = Settings(home=str(home), jars_dir=jars_dir)
    pids = [int((home / "spark-cluster" / d / "pid").read_text()) for d in ("master", "worker-1")]
    yield settings, env, port, ui_port, started.stdout
    stopped = lakehouse(env, "spark-cluster", "stop", timeout=120)
    assert stopped.returncode == 0 and "Stopped the Spark cluster" in stopped.stdout, stopped.stderr + stopped.stdout
    assert not any(pid_alive(pid) for pid in pids)
    assert port_is_free("127.0.0.1", port) and port_is_free("127.0.0.1", ui_port)


def test_start_waits_for_the_worker_and_says_what_to_set(cluster):
    """`start` returns with the worker ALIVE and prints the master URL to export; `status` lists the worker."""
    settings, env, port, ui_port, printed = cluster
    assert f"export LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:{port}" in printed
    state = master_state(ui_port)
    assert state["status"] == "ALIVE" and [w["state"] for w in state["workers"]] == ["ALIVE"]
    status = lakehouse(env, "spark-cluster", "status", timeout=60)
    assert status.returncode == 0, status.stderr
    assert state["workers"][0]["id"] in status.stdout and "Total: 1 worker alive" in status.stdout


def test_mistakes_are_one_sentence(cluster, tmp_path):
    """A second start and a start on a taken port each get one sentence and exit 2; status of nothing exits 1."""
    _, env, port, _, _ = cluster
    again = lakehouse(env, "spark-cluster", "start", "--port", str(free_port()), "--ui-port", str(free_port()))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already running" in again.stderr
    other = {**env, "LAKEHOUSE_HOME": str(tmp_path / "other")}
    taken = lakehouse(other, "spark-cluster", "start", "--port", str(port), "--ui-port", str(free_port()))
    assert taken.returncode == 2 and taken.stderr == (f"error: port {port} on 127.0.0.1 (the master) is taken by another "
                                                      "program; choose a free one with --port.\n")
    assert lakehouse(other, "spark-cluster", "status").returncode == 1
