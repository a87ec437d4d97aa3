"""The PID file of `lakehouse stream`: which process streams on a home, and which flows it was asked to keep fresh.

Its first line is the PID, the second the flows, the third each flow's trigger (flow=seconds). The stream
removes it when it stops cleanly; a file whose process is gone is a stream that ended without that stop.
"""

from __future__ import annotations

import os
from pathlib import Path

from lakehouse.infra.settings import Settings


def pid_file(settings: Settings) -> Path:
    """Where the running stream of `settings.home` writes its PID and flows."""
    return Path(settings.home) / "stream.pid"


def _lines(settings: Settings) -> list[str]:
    try:
        return pid_file(settings).read_text().splitlines()
    except OSError:
        return []


def running_stream(settings: Settings) -> int | None:
    """The PID of a `lakehouse stream` running on this home, if any."""
    try:
        pid = int(pid_file(settings).read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


def streamed_flows(settings: Settings) -> list[str]:
    """The flows the stream runs (or ran, if it died), as its PID file lists them on the line after the PID."""
    lines = _lines(settings)
    return lines[1].split() if len(lines) > 1 else []


def streamed_triggers(settings: Settings) -> dict[str, float]:
    """Each streamed flow's trigger in seconds, as the running stream's PID file lists them (flow=seconds)."""
    lines = _lines(settings)
    pairs = (item.split("=", 1) for item in (lines[2].split() if len(lines) > 2 else []) if "=" in item)
    try:
        return {flow: float(seconds) for flow, seconds in pairs}
    except ValueError:
        return {}


def died_stream_flows(settings: Settings) -> list[str]:
    """The flows of a stream whose process ended without its clean stop (its PID file is still there)."""
    return [] if running_stream(settings) is not None else streamed_flows(settings)
