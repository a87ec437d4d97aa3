"""A table's rows, time range and rows by value read from its checksum file equal what Spark counts over its rows,
and nothing is answered from statistics that cannot say exactly."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from delta.tables import DeltaTable

from lakehouse.streaming.delta_log import checksum, table_version
from lakehouse.streaming.table_stats import counts_by, file_stats, row_count, time_range

pytestmark = pytest.mark.integration

SCHEMA = "flow STRING, reason STRING, event_time TIMESTAMP, amount BIGINT"
START = datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc)
LONG = "a reason longer than the thirty-two characters Delta keeps"


def _rows(batch: int) -> list[tuple]:
    flow = f"flow_{batch % 3}"
    reason = None if batch == 4 else (LONG if batch == 5 else f"reason {batch % 2}")
    return [(flow, reason, START + timedelta(minutes=batch * 7, milliseconds=i * 1001), batch * 100 + i)
            for i in range(batch + 1)]


@pytest.fixture(scope="module")
def appended(spark, tmp_path_factory) -> tuple[str, list[tuple]]:
    """A table of six appends, each one flow's batch, as the shared tables are written; and the rows written."""
    path = str(tmp_path_factory.mktemp("table-stats") / "t")
    rows = []
    for batch in range(6):
        rows += _rows(batch)
        spark.createDataFrame(_rows(batch), SCHEMA).coalesce(1).write.format("delta").mode("append").save(path)
    return path, rows


def _stats(spark, path):
    return file_stats(spark, path, table_version(spark, path))


def test_rows_and_time_range_equal_what_python_counts(spark, appended):
    path, rows = appended
    stats = _stats(spark, path)
    assert stats is not None and len(stats) == 6
    assert row_count(stats) == len(rows) == spark.read.format("delta").load(path).count()
    first, last = time_range(stats, "event_time", "event_time")
    assert (first, last) == (min(r[2] for r in rows), max(r[2] for r in rows))


def test_rows_by_value_equal_what_python_counts_when_each_file_holds_one(spark, appended):
    path, rows = appended
    stats = _stats(spark, path)
    assert counts_by(stats, ("flow",)) == Counter((r[0],) for r in rows)
    # A value longer than the statistics keep, or a file of several values, cannot be counted from them.
    assert counts_by(stats, ("reason",)) is None
    short = [s for s in stats if (s["minValues"].get("reason") or "") != LONG[:32]]
    assert counts_by(short, ("flow", "reason")) == Counter((r[0], r[1]) for r in rows if r[1] != LONG)


def test_a_compacted_table_still_counts_its_rows_but_not_by_value(spark, appended, tmp_path):
    _, rows = appended
    path = str(tmp_path / "t")
    spark.read.format("delta").load(appended[0]).write.format("delta").save(path)
    DeltaTable.forPath(spark, path).optimize().executeCompaction()
    stats = _stats(spark, path)
    assert stats is not None and row_count(stats) == len(rows)
    assert counts_by(stats, ("flow",)) is None


def test_deleted_rows_are_not_answered_from_loose_statistics(spark, appended, tmp_path):
    """A DELETE with deletion vectors leaves files whose row counts include the deleted rows."""
    path = str(tmp_path / "t")
    (spark.read.format("delta").load(appended[0]).coalesce(1).write.format("delta")
     .option("delta.enableDeletionVectors", "true").save(path))
    DeltaTable.forPath(spark, path).delete("flow = 'flow_0'")
    version = table_version(spark, path)
    assert any(f.get("deletionVector") for f in checksum(spark, path, version)["allFiles"])
    assert file_stats(spark, path, version) is None


def test_a_table_with_more_files_than_the_checksum_lists_gives_no_answer(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(100).repartition(100).write.format("delta").save(path)
    assert _stats(spark, path) is None
    assert file_stats(spark, path, 99) is None          # no such version
