"""A Spark driver the project starts maps Spark's, Delta's and Kafka's classes from the class archive `lakehouse
setup` builds, instead of loading each from its jar (about 4 s of each JVM start on 2 cores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.infra.class_archive import build, usable_archive

pytestmark = pytest.mark.integration

START = "from infra.settings import Settings; from infra.spark import get_spark; print(get_spark(Settings.from_env()).range(7).count())"


def start_driver(jars_dir: str, home: Path, java_options: str, **settings: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir,
           "LAKEHOUSE_SPARK_JAVA_OPTIONS": java_options, **settings}
    return subprocess.run([sys.executable, "-c", START], env=env, capture_output=True, text=True, timeout=300)


def test_a_new_driver_maps_its_classes_from_the_archive(jars_dir, tmp_path):
    built = build(jars_dir, "-XX:+UseParallelGC")       # `lakehouse setup` made it before the tests; made here if not
    assert usable_archive(jars_dir) == built.path and built.path.stat().st_size == built.bytes > 0
    loaded = tmp_path / "classes.log"
    # -Xshare:on: a JVM that cannot use the archive refuses to start rather than load every class from its jar.
    proc = start_driver(jars_dir, tmp_path / "home", f"-XX:+UseParallelGC -Xshare:on -Xlog:class+load=info:file={loaded}")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("7"), proc.stderr[-2000:]
    sources = dict(re.findall(r"\] (\S+) source: (.+)$", loaded.read_text(), flags=re.MULTILINE))
    archived = "shared objects file (top)"      # the top layer: the dynamic archive over the JDK's own
    assert sources["org.apache.spark.SparkContext"] == archived                        # pyspark's jars
    assert sources["io.delta.sql.DeltaSparkSessionExtension"] == archived              # the project's jars (spark.jars)
    assert sum(source == archived for source in sources.values()) > len(sources) / 2


def test_without_the_archive_the_same_driver_loads_from_jars(jars_dir, tmp_path):
    """The control: LAKEHOUSE_SPARK_CLASS_ARCHIVE=false gives the JVM no archive, and Spark's classes come from jars."""
    loaded = tmp_path / "classes.log"
    proc = start_driver(jars_dir, tmp_path / "home", f"-XX:+UseParallelGC -Xlog:class+load=info:file={loaded}",
                        LAKEHOUSE_SPARK_CLASS_ARCHIVE="false")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("7"), proc.stderr[-2000:]
    sources = dict(re.findall(r"\] (\S+) source: (.+)$", loaded.read_text(), flags=re.MULTILINE))
    assert sources["org.apache.spark.SparkContext"].endswith(".jar")
    assert "shared objects file (top)" not in sources.values()
