"""`lakehouse ui` serves the Dagster UI on the project's DAGSTER_HOME and stops its whole process tree."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port



def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _ignores_sigint(pid: int) -> bool:
    """Whether `lakehouse ui` started with SIGINT ignored (read after its exec, long before its imports end)."""
    deadline = time.monotonic() + 10
    while b"ui\0--port" not in Path(f"/proc/{pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def test_ui_serves_the_assets_and_stops_by_pid(jars_dir, tmp_path):
    """The UI answers GraphQL with every asset of the definitions; `kill PID` of a script's background
    `lakehouse ui` (SIGINT ignored) stops it and leaves no process."""
    port = free_port()
    home = tmp_path / "home"
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir}
    lakehouse = Path(sys.executable).with_name("lakehouse")
    # As a script starts it: a non-interactive shell's background job begins with SIGINT ignored.
    err_file = shlex.quote(str(tmp_path / "ui.err"))
    script = f"{shlex.quote(str(lakehouse))} ui --port {port} > /dev/null 2> {err_file} & echo $!; wait"
    proc = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    ui_pid = int(proc.stdout.readline())
    assert _ignores_sigint(ui_pid), "the launch did not reproduce a script's background job"
    marker = str(home / "dagster")  # every dagster child process carries its instance folder in its arguments
    try:
        deadline = time.monotonic() + 180
        assets = None
        while time.monotonic() < deadline and assets is None:
            assert proc.poll() is None, (tmp_path / "ui.err").read_text()[-2000:]
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/graphql",
                    data=json.dumps({"query": "{ assetNodes { assetKey { path } groupName } }"}).encode(),
                    headers={"Content-Type": "application/json"},
                )
                body = json.load(urllib.request.urlopen(request, timeout=5))
                nodes = body.get("data", {}).get("assetNodes")
                assets = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes} if nodes else None
            except OSError:
                pass
            if assets is None:
                time.sleep(1)
        assert assets, "the UI did not serve the assets in time"
        from lakehouse.orchestration.definitions import defs

        assert set(assets) == {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
        assert assets["silver_orders"] == "silver" and assets["kafka/shop_orders_v1"] == "kafka"
        assert (home / "dagster" / "dagster.yaml").exists()
    finally:
        os.kill(ui_pid, signal.SIGTERM)  # what `kill PID` sends
    dagster_dev = f"dev -m lakehouse.orchestration.definitions --host 127.0.0.1 --port {port}"  # DAGSTER_HOME is in its env only

    def survivors() -> list[int]:
        return _processes_mentioning(marker) + _processes_mentioning(dagster_dev)

    deadline = time.monotonic() + 30
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.5)
    leftover = survivors()
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, "dagster processes outlived `lakehouse ui`"
    assert proc.wait(timeout=30) == 0, "`lakehouse ui` did not exit after SIGTERM"
    # It ran the current command: `dagster dev` would have warned that `dg dev` supersedes it.
    assert "Use 'dg dev' instead" not in (tmp_path / "ui.err").read_text()
