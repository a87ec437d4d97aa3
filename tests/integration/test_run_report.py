"""What a flow's run reports of its own commits comes from one read of the table's newest history entries."""

from __future__ import annotations

import pytest
from delta.tables import DeltaTable

from streaming.runner import commits_after, describe_commits, rows_written

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, amount_cents BIGINT"


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory) -> tuple[str, list[tuple[str, int, str]], dict[str, str]]:
    """A table of 9 commits: 6 streaming appends by two queries (n rows in the n-th), a MERGE updating 2 and
    inserting 3, a batch append of 4 and a delete; and (operation, rows, query) per version as written here."""
    root = tmp_path_factory.mktemp("run-report")
    path = str(root / "t")
    written: list[tuple[str, int, str]] = []
    query_ids: dict[str, str] = {}
    for n in range(1, 7):
        name = "a" if n % 2 else "b"     # two queries append to the table, as several silver flows to quarantine
        source = str(root / f"source-{name}")
        spark.createDataFrame([(f"{name}-{n}-{i}", n * 10 + i) for i in range(n)], SCHEMA) \
            .write.format("delta").mode("append").save(source)
        query = (spark.readStream.format("delta").load(source).writeStream.format("delta")
                 .option("checkpointLocation", str(root / f"checkpoint-{name}")).trigger(availableNow=True)
                 .start(path))
        query.awaitTermination()
        query_ids[name] = str(query.id)
        written.append(("STREAMING UPDATE", n, name))
    changes = spark.createDataFrame([("a-1-0", 1), ("b-2-1", 2), ("x-1", 3), ("x-2", 4), ("x-3", 5)], SCHEMA)
    (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("c"), "t.event_id = c.event_id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    written.append(("MERGE", 2 + 3, ""))
    spark.createDataFrame([(f"y-{i}", i) for i in range(4)], SCHEMA).write.format("delta").mode("append").save(path)
    written.append(("WRITE", 4, ""))
    DeltaTable.forPath(spark, path).delete("event_id = 'x-1'")
    written.append(("DELETE", 0, ""))
    return path, written, query_ids


# What a flow writes: its streaming appends and its MERGEs (a batch WRITE or a DELETE is someone else's).
FLOW_WRITES = ("STREAMING UPDATE", "MERGE")


@pytest.mark.parametrize("after, expect", [(None, 1), (None, 50), (-1, 3), (2, 1), (2, 6), (5, 3), (8, 2), (7, 1)])
def test_a_run_sees_exactly_the_commits_after_its_start_whatever_it_expected(spark, table, after, expect):
    path, written, query_ids = table
    commits = commits_after(spark, path, after, expect=expect)
    first = 0 if after is None else after + 1
    mine = written[first:]
    assert [c.version for c in commits] == list(range(first, len(written)))
    assert [c.operation for c in commits] == [op for op, _, _ in mine]
    assert rows_written(commits) == sum(rows for op, rows, _ in mine if op in FLOW_WRITES)
    for name, query_id in query_ids.items():
        assert rows_written(commits, query_id=query_id) == sum(
            rows for op, rows, by in mine if op == "MERGE" or op == "STREAMING UPDATE" and by == name)
    said = describe_commits(commits)
    assert list(said) == [str(v) for v in range(first, len(written))]
    for version, (op, rows, _) in enumerate(written):
        if str(version) in said and op in FLOW_WRITES:
            assert said[str(version)].endswith(f", {rows} rows"), said[str(version)]


def test_no_table_and_no_new_commit_report_nothing(spark, table, tmp_path):
    path, written, _ = table
    assert commits_after(spark, str(tmp_path / "none"), None) == []
    assert commits_after(spark, path, len(written) - 1) == []
