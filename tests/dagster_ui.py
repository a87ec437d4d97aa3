"""`lakehouse ui` for the end-to-end tests: start it on a port, ask its GraphQL endpoint, stop it and its children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
ASSETS_QUERY = "{ assetNodes { assetKey { path } groupName } }"


def lakehouse_env(settings, **env: str) -> dict[str, str]:
    """This process's environment with the LAKEHOUSE_* variables that make a `lakehouse` command use `settings`'
    home, jars and broker (a `Settings` from the `broker` fixture), then `env` over them."""
    return {
        **os.environ,
        "LAKEHOUSE_HOME": settings.home,
        "LAKEHOUSE_JARS_DIR": settings.jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2",
        **env,
    }


def graphql(port: int, query: str, variables: dict | None = None, timeout: float = 30) -> dict:
    """The `data` of one GraphQL request to the UI on 127.0.0.1:`port` (an answer with errors fails the test)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    body = json.load(urllib.request.urlopen(request, timeout=timeout))
    assert "errors" not in body, body
    return body["data"]


def wait_for_assets(port: int, alive: Callable[[], None], timeout: float = 180) -> dict[str, str]:
    """Asset name -> group, once the UI's GraphQL lists the assets; `alive()` raises if the UI process has died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        try:
            nodes = graphql(port, ASSETS_QUERY, timeout=5).get("assetNodes")
            if nodes:
                return {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes}
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"the UI on port {port} did not serve the assets within {timeout:.0f} s")


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def dagster_processes(home: str | Path, port: int) -> list[int]:
    """The processes a `lakehouse ui --port <port>` on LAKEHOUSE_HOME `home` started: every dagster child carries its
    instance folder in its arguments, and `dg dev` its module and port (DAGSTER_HOME is in its environment only)."""
    dagster_dev = f"dev -m lakehouse.orchestration.definitions --host 127.0.0.1 --port {port}"
    return processes_mentioning(str(Path(home) / "dagster")) + processes_mentioning(dagster_dev)


@contextmanager
def running_ui(env: dict[str, str], port: int, log_dir: Path, timeout: float = 180) -> Iterator[dict[str, str]]:
    """`lakehouse ui --port <port>` with `env` (its LAKEHOUSE_HOME among them), up until the block ends; yields the
    assets it serves (name -> group). On exit it gets SIGTERM (what `kill PID` sends), and whatever dagster process
    outlives it is killed and reported."""
    err_path = log_dir / f"ui-{port}.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([str(LAKEHOUSE), "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                stderr=err)

    def alive() -> None:
        assert proc.poll() is None, f"lakehouse ui exited: {err_path.read_text()[-2000:]}"

    leftover: list[int] = []
    try:
        yield wait_for_assets(port, alive, timeout)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            deadline = time.monotonic() + 30
            while dagster_processes(env["LAKEHOUSE_HOME"], port) and time.monotonic() < deadline:
                time.sleep(0.5)
            leftover = dagster_processes(env["LAKEHOUSE_HOME"], port)
            for pid in leftover:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert not leftover, f"dagster processes outlived `lakehouse ui`: {leftover}"
