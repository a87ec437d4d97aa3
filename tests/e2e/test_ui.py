"""`lakehouse ui` serves the Dagster UI on the project's DAGSTER_HOME and stops its whole process tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.integration


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


def test_ui_serves_the_assets_and_stops_by_pid(jars_dir, tmp_path):
    """The UI answers GraphQL with every asset of the definitions; SIGTERM to `lakehouse ui` leaves no process."""
    port = free_port()
    home = tmp_path / "home"
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir}
    lakehouse = Path(sys.executable).with_name("lakehouse")
    proc = subprocess.Popen([str(lakehouse), "ui", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ui.err", "wb"))
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
        from orchestration.definitions import defs

        assert set(assets) == {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
        assert assets["silver_orders"] == "silver" and assets["kafka/shop_orders_v1"] == "kafka"
        assert (home / "dagster" / "dagster.yaml").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    leftover = _processes_mentioning(marker)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, "dagster processes outlived `lakehouse ui`"
