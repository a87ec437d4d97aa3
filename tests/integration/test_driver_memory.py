"""The driver JVM starts with the two bounds on its native memory that keep its RSS from growing with a backlog."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_driver_caps_cached_direct_buffers_and_malloc_arenas(spark):
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()
    # The session's JVM itself, not only its configuration: its system property and its environment.
    assert jvm.java.lang.System.getProperty("jdk.nio.maxCachedBufferSize") == "262144"
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
    # get_spark sets 2 unless the environment already says how many arenas; either way the JVM has it.
    assert environ.get("MALLOC_ARENA_MAX") == os.environ["MALLOC_ARENA_MAX"]
