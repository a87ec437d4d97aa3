"""`lakehouse ui` starts the current Dagster command, `dg dev`, from the pinned dagster-dg-cli beside this Python."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from lakehouse.cli import main as cli
from lakehouse.infra.settings import Settings


class _Exited:
    """A child that has already exited with 0."""

    pid = 2 ** 22 + 7     # no such process group: the clean-up's kill finds nothing
    returncode = 0

    def poll(self) -> int:
        return 0


def test_the_ui_runs_dg_dev_of_this_environment(monkeypatch, tmp_path):
    started: list[list[str]] = []
    real = cli.subprocess.Popen

    def popen(cmd, *args, **kwargs):
        """The UI's child is recorded, not started; other children (of imports) start as usual."""
        if isinstance(cmd, list) and cmd and cmd[0].endswith("/dg"):
            started.append(cmd)
            return _Exited()
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(cli.subprocess, "Popen", popen)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = cli.cmd_ui(Settings(home=str(tmp_path)), argparse.Namespace(host="127.0.0.1", port=3171))
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert code == 0
    [cmd] = started
    assert cmd == [str(Path(sys.executable).with_name("dg")), "dev", "-m", "lakehouse.orchestration.definitions",
                   "--host", "127.0.0.1", "--port", "3171"]
    assert Path(cmd[0]).exists()      # the pin installed it


def test_a_missing_dg_is_one_sentence(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli.sys, "executable", str(tmp_path / "python"))
    assert cli.cmd_ui(Settings(home=str(tmp_path)), argparse.Namespace(host="127.0.0.1", port=3171)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'dg'} is missing") and len(err.strip().splitlines()) == 1
