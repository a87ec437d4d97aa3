"""What a flow's run reports of its own commits comes from the commit files of the table's log, read without a Spark job."""

from __future__ import annotations

import pytest
from delta.tables import DeltaTable

from lakehouse.streaming.delta_log import commits_after, last_commit, table_id, table_version
from lakehouse.streaming.runner import describe_commits, rows_written

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, amount_cents BIGINT"
USER_METADATA = '{"flow": "f", "held": true}'


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory) -> tuple[str, list[tuple[str, int, str]], dict[str, str]]:
    """A table of 10 commits: 6 streaming appends by two queries (n rows in the n-th), a MERGE updating 2 and
    inserting 3, a batch append of 4, a delete and a batch append with user metadata; and (operation, rows,
    query) per version as written here."""
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
    spark.createDataFrame([("z-1", 1)], SCHEMA).write.format("delta").mode("append") \
        .option("userMetadata", USER_METADATA).save(path)
    written.append(("WRITE", 1, ""))
    return path, written, query_ids


# What a flow writes: its streaming appends and its MERGEs (a batch WRITE or a DELETE is someone else's).
FLOW_WRITES = ("STREAMING UPDATE", "MERGE")


@pytest.mark.parametrize("after", [None, -1, 0, 2, 5, 7, 9])
def test_a_run_sees_exactly_the_commits_after_its_start(spark, table, after):
    path, written, query_ids = table
    commits = commits_after(spark, path, after)
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
    assert table_version(spark, str(tmp_path / "none")) is None
    assert last_commit(spark, str(tmp_path / "none")) is None
    assert table_id(spark, str(tmp_path / "none")) is None


def test_the_log_files_say_what_deltas_own_history_says(spark, table):
    """Delta's history() and detail() are the independent reading: same versions, operations, metrics, parameters,
    user metadata and table id."""
    path, written, _ = table
    history = sorted(DeltaTable.forPath(spark, path).history().collect(), key=lambda r: r["version"])
    commits = commits_after(spark, path, None)
    assert [c.version for c in commits] == [r["version"] for r in history] == list(range(len(written)))
    for c, r in zip(commits, history):
        assert (c.operation, c.metrics, c.parameters, c.user_metadata) == (
            r["operation"], dict(r["operationMetrics"] or {}), dict(r["operationParameters"] or {}), r["userMetadata"])
    assert table_version(spark, path) == history[-1]["version"]
    assert table_id(spark, path) == DeltaTable.forPath(spark, path).detail().first()["id"]
    assert last_commit(spark, path) == commits[-1]
    assert commits[-1].user_metadata == USER_METADATA
