"""`lakehouse ui` serves the Dagster UI on the project's DAGSTER_HOME and stops its whole process tree."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import free_port
from tests.dagster_ui import LAKEHOUSE, dagster_processes, wait_for_assets


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
    # As a script starts it: a non-interactive shell's background job begins with SIGINT ignored.
    err_file = shlex.quote(str(tmp_path / "ui.err"))
    script = f"{shlex.quote(str(LAKEHOUSE))} ui --port {port} > /dev/null 2> {err_file} & echo $!; wait"
    proc = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    ui_pid = int(proc.stdout.readline())
    assert _ignores_sigint(ui_pid), "the launch did not reproduce a script's background job"
    try:
        def alive() -> None:
            assert proc.poll() is None, (tmp_path / "ui.err").read_text()[-2000:]

        assets = wait_for_assets(port, alive, timeout=180)
        from lakehouse.orchestration.definitions import defs

        assert set(assets) == {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
        assert assets["silver_orders"] == "silver" and assets["kafka/shop_orders_v1"] == "kafka"
        assert (home / "dagster" / "dagster.yaml").exists()
    finally:
        os.kill(ui_pid, signal.SIGTERM)  # what `kill PID` sends

    deadline = time.monotonic() + 30
    while dagster_processes(home, port) and time.monotonic() < deadline:
        time.sleep(0.5)
    leftover = dagster_processes(home, port)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, "dagster processes outlived `lakehouse ui`"
    assert proc.wait(timeout=30) == 0, "`lakehouse ui` did not exit after SIGTERM"
    # It ran the current command: `dagster dev` would have warned that `dg dev` supersedes it.
    assert "Use 'dg dev' instead" not in (tmp_path / "ui.err").read_text()
