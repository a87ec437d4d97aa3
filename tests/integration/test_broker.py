"""The broker launcher: clear sentences for a broker already running and a port already taken; stale PID files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.infra.kafka_broker import BrokerAlreadyRunning, BrokerError, KafkaNode, local_node
from tests.conftest import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(own_broker):
    """A broker of this module's own: these tests start it again and read its PID file."""
    return own_broker


def test_a_second_start_says_the_broker_is_already_running(broker):
    """Starting the running broker again raises one sentence naming its pid and address, and leaves it running."""
    node = local_node(broker)
    pid = node.read_pid()
    assert pid
    with pytest.raises(BrokerAlreadyRunning) as info:
        node.start(broker.jars_dir)
    message = str(info.value)
    assert "already running" in message and str(pid) in message and node.bootstrap in message
    assert "\n" not in message
    assert node.read_pid() == pid


def test_a_taken_port_is_named_with_the_setting_to_change(jars_dir, tmp_path: Path):
    """A port held by another process stops the start before Java runs, with the setting that fixes it."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        node = KafkaNode(1, "127.0.0.1", taken, free_port(), tmp_path / "kafka")
        with pytest.raises(BrokerError) as info:
            node.start(jars_dir)
    assert f"Port {taken}" in str(info.value) and "LAKEHOUSE_KAFKA_PORT" in str(info.value)
    assert not node.pid_file.exists()


def test_stop_when_not_running_is_a_no_op(tmp_path: Path):
    """Stopping a broker that never started returns None and raises nothing."""
    node = KafkaNode(1, "127.0.0.1", free_port(), free_port(), tmp_path / "kafka")
    assert node.stop() is None


def test_a_stale_pid_file_is_never_signalled(jars_dir, tmp_path: Path):
    """A PID file naming an unrelated process: `kafka stop` leaves it alone, `kafka start` starts the broker anyway."""
    env = {
        **os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_JARS_DIR": jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(free_port()), "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    pid_file = tmp_path / "home" / "kafka" / "kafka.pid"
    pid_file.parent.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        pid_file.write_text(str(bystander.pid))
        stopped = _lakehouse(env, "kafka", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "Kafka is not running." in stopped.stdout and "stale" in stopped.stderr
        assert bystander.poll() is None, "`kafka stop` killed a process that is not the broker"
        assert not pid_file.exists()

        pid_file.write_text(str(bystander.pid))
        started = _lakehouse(env, "kafka", "start")
        assert started.returncode == 0, started.stderr
        broker_pid = int(pid_file.read_text())
        assert broker_pid != bystander.pid and f"(pid {broker_pid})" in started.stdout
        stopped = _lakehouse(env, "kafka", "stop")
        assert f"Stopped Kafka (pid {broker_pid})." in stopped.stdout
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        _lakehouse(env, "kafka", "stop")


def _lakehouse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("lakehouse")), *args], env=env,
                          capture_output=True, text=True, timeout=300)
