"""A run step's log says it starts a Spark session only when it does, with the start's real duration."""

from __future__ import annotations

import re
import time

from pyspark.sql import SparkSession

from lakehouse.orchestration import sessions
from lakehouse.orchestration.resources import build_resources
from lakehouse.infra.settings import Settings


class _Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, text: str) -> None:
        self.lines.append(text)


class _Context:
    def __init__(self):
        self.log = _Log()


class _SlowSpark:
    """A Spark resource whose session takes `seconds` to start."""

    def __init__(self, seconds: float, warm: bool = False):
        self.seconds, self.warm = seconds, warm

    def session(self):
        time.sleep(self.seconds)
        return "session"


def test_only_a_step_that_starts_a_session_says_so_with_how_long_it_took(monkeypatch):
    context = _Context()
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    started = time.monotonic()
    assert sessions.run_session(context, _SlowSpark(0.4)) == "session"
    took = time.monotonic() - started
    [line] = context.log.lines
    said = float(re.match(r"started a Spark session for this run in (\d+\.\d) s", line).group(1))
    assert 0.4 <= said + 0.05 and said <= took + 0.05
    # A later step of the run (a session is active) and a step on lakehouse serve say nothing of a JVM.
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: "active"))
    sessions.run_session(context, _SlowSpark(0))
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    sessions.run_session(context, _SlowSpark(0, warm=True))
    assert context.log.lines == [line]


def test_without_lakehouse_serve_a_step_is_not_told_it_starts_a_jvm(tmp_path):
    """No endpoint for the lake: `served` answers None and logs nothing (the step may reuse the run's session)."""
    resources = build_resources(Settings(home=str(tmp_path)))
    context = _Context()
    assert sessions.served(context, resources["spark"], resources["lake"], resources["kafka"], "table") is None
    assert sessions.served_check(context, resources["spark"], resources["lake"], resources["kafka"], "a", "b") is None
    assert context.log.lines == []
