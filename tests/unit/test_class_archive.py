"""Which class archive a new Spark driver is given: only one built for these jars, whole, and only when wanted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse.infra import class_archive
from lakehouse.infra import jars as jars_module
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import spark_conf


@pytest.fixture
def jars(tmp_path: Path) -> Path:
    folder = tmp_path / "jars"
    (folder / "spark").mkdir(parents=True)
    for name in ("delta-spark_2.13-4.4.1.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"):
        (folder / "spark" / name).write_bytes(b"PK" + name.encode())
    (folder / "spark" / jars_module._STAMP).write_text(jars_module._manifest_digest("spark"))   # as `lakehouse setup` leaves it
    return folder


def place(jars: Path, size: int = 4096, recorded: int | None = None) -> Path:
    """An archive file where `lakehouse setup` would put one, with the size its build recorded."""
    path = class_archive.archive_path(jars)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"\0" * size)
    path.with_suffix(".json").write_text(json.dumps({"bytes": size if recorded is None else recorded, "seconds": 1.0}))
    return path


def driver_options(jars: Path, tmp_path: Path, **given) -> str:
    return spark_conf(Settings(home=str(tmp_path), jars_dir=str(jars), **given))["spark.driver.extraJavaOptions"]


def test_no_archive_means_no_option(jars, tmp_path):
    assert class_archive.usable_archive(jars) is None
    assert "SharedArchiveFile" not in driver_options(jars, tmp_path)


def test_a_whole_archive_for_these_jars_is_given_to_the_driver(jars, tmp_path):
    path = place(jars)
    options = driver_options(jars, tmp_path)
    assert f"-XX:SharedArchiveFile={path}" in options.split()
    assert options.index("-XX:+UseParallelGC") < options.index("SharedArchiveFile")   # the user's options stay


def test_a_truncated_archive_is_never_given(jars, tmp_path):
    """The JVM dies of SIGBUS mapping a truncated archive (seen with JDK 17): the recorded size guards it."""
    place(jars, size=4096, recorded=8192)
    assert class_archive.usable_archive(jars) is None
    assert "SharedArchiveFile" not in driver_options(jars, tmp_path)


def test_an_archive_without_its_record_is_never_given(jars, tmp_path):
    place(jars).with_suffix(".json").unlink()
    assert class_archive.usable_archive(jars) is None


def test_other_jars_make_the_archive_stale(jars, tmp_path):
    old = place(jars)
    (jars / "spark" / "extra-1.0.jar").write_bytes(b"PK extra")
    assert class_archive.archive_path(jars) != old
    assert "SharedArchiveFile" not in driver_options(jars, tmp_path)


def test_fetched_again_the_jars_make_the_archive_stale(jars, tmp_path):
    """The JVM ignores an archive whose jars changed on disk; setup must then see that it has none and build one."""
    import os

    old = place(jars)
    jar = next((jars / "spark").glob("*.jar"))
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 10**9))
    assert class_archive.archive_path(jars) != old and class_archive.usable_archive(jars) is None


def test_the_setting_turns_it_off(jars, tmp_path):
    place(jars)
    assert "SharedArchiveFile" not in driver_options(jars, tmp_path, spark_class_archive=False)
    assert Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SPARK_CLASS_ARCHIVE": "false"}).spark_class_archive is False
