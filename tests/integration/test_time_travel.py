"""`lakehouse sql` reads a table as of a version or a time, and `lakehouse history` lists its versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from lakehouse.batch.catalog import table_history
from lakehouse.serving.sql import SqlError, history, run_sql
from lakehouse.schemas import tables
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, currency STRING, amount_cents BIGINT"
# What each version holds, as (event_id, currency, amount_cents) rows.
V0 = {("e-1", "EUR", 100), ("e-2", "GBP", 200)}
V1 = V0 | {("e-3", "EUR", 300)}
V2 = {("e-1", "EUR", 150), ("e-3", "EUR", 300), ("e-4", "USD", 400)}  # e-1 updated, e-2 deleted, e-4 inserted


def _write_three_versions(spark, path: str) -> None:
    spark.createDataFrame(sorted(V0), SCHEMA).write.format("delta").save(path)
    time.sleep(0.05)  # distinct commit times, so each version has its own instant
    (spark.createDataFrame([("e-3", "EUR", 300)], SCHEMA).write.format("delta").mode("append")
     .option("userMetadata", "late orders folded in").save(path))
    time.sleep(0.05)
    changes = spark.createDataFrame([("e-1", "EUR", 150, "upsert"), ("e-2", "GBP", 0, "delete"),
                                     ("e-4", "USD", 400, "upsert")], SCHEMA + ", change STRING")
    (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("c"), "t.event_id = c.event_id")
     .whenMatchedDelete(condition="c.change = 'delete'")
     .whenMatchedUpdate(set={"amount_cents": "c.amount_cents"})
     .whenNotMatchedInsert(values={"event_id": "c.event_id", "currency": "c.currency",
                                   "amount_cents": "c.amount_cents"})
     .execute())


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> tuple[str, str]:
    """silver_orders written three times: v0 two rows, v1 one appended (with user metadata), v2 a MERGE."""
    root = str(tmp_path_factory.mktemp("time-travel") / "lake")
    path = shop.ORDERS.silver_table.path(root)
    _write_three_versions(spark, path)
    return root, path


def _rows(spark, root: str, query: str) -> set[tuple]:
    _, rows, _ = run_sql(spark, root, query)
    return set(rows)


def test_version_as_of_reads_what_each_version_held(spark, lake):
    """VERSION AS OF 0, 1 and 2 return exactly the rows each write left; no version is the latest."""
    root, path = lake
    select = "SELECT event_id, currency, amount_cents FROM silver_orders"
    for version, expected in enumerate((V0, V1, V2)):
        assert _rows(spark, root, f"{select} VERSION AS OF {version}") == expected, version
    assert _rows(spark, root, select) == V2
    assert _rows(spark, root, f"{select} FOR VERSION AS OF 1 WHERE currency = 'EUR'") == {r for r in V1 if r[1] == "EUR"}
    # Versions compared in one query: what the MERGE changed.
    changed = _rows(spark, root, f"SELECT event_id FROM ({select} VERSION AS OF 2 EXCEPT {select} VERSION AS OF 1)")
    assert changed == {("e-1",), ("e-4",)}
    # Registering the table by name and reading old versions commit nothing.
    assert DeltaTable.forPath(spark, path).history(1).collect()[0]["version"] == 2


def test_timestamp_as_of_reads_the_version_in_force_at_that_time(spark, lake):
    """TIMESTAMP AS OF a version's commit time, or any time before the next commit, reads that version."""
    root, path = lake
    commits = {c.version: c.committed_at for c in table_history(spark, path)}
    assert commits[0] < commits[1] < commits[2]
    select = "SELECT event_id, currency, amount_cents FROM silver_orders"
    for version, expected in enumerate((V0, V1, V2)):
        at = commits[version].strftime("%Y-%m-%d %H:%M:%S.%f")
        assert _rows(spark, root, f"{select} TIMESTAMP AS OF '{at}'") == expected, version
    between = commits[1] + (commits[2] - commits[1]) / 2
    assert _rows(spark, root, f"{select} TIMESTAMP AS OF '{between.isoformat()}'") == V1


@pytest.mark.parametrize("clause, wanted", [
    ("VERSION AS OF 7", "has no version 7;"),
    ("TIMESTAMP AS OF '2000-01-01 00:00:00'", "has no version as of 2000-01-01 00:00:00 (before its first commit);"),
    ("TIMESTAMP AS OF '2999-01-01'", "has no version as of 2999-01-01 00:00:00 (after its latest commit);"),
])
def test_a_version_or_time_the_table_lacks_is_one_sentence_with_its_range(spark, lake, clause, wanted):
    """A version or a time the table does not have: one sentence naming the table and its versions 0 to 2."""
    root, path = lake
    commits = {c.version: c.committed_at for c in table_history(spark, path)}
    with pytest.raises(SqlError) as caught:
        run_sql(spark, root, f"SELECT count(*) FROM silver_orders {clause}")
    sentence = str(caught.value)
    assert "\n" not in sentence and sentence.endswith(".") and "SQLSTATE" not in sentence
    assert sentence.startswith(f"silver_orders {wanted}"), sentence
    first, last = (commits[v].strftime("%Y-%m-%d %H:%M:%S.%f")[:23] for v in (0, 2))
    assert sentence.endswith(f"its versions go from 0 ({first}) to 2 ({last}, UTC)."), sentence


def test_the_missing_version_is_told_of_the_right_table_when_a_query_travels_in_two(spark, tmp_path):
    """With two tables read as of version 1, the sentence names the one that has only version 0."""
    root = str(tmp_path / "lake")
    spark.createDataFrame([("e-1", "EUR", 1)], SCHEMA).write.format("delta").save(shop.ORDERS.silver_table.path(root))
    payments = spark.createDataFrame([("p-1",)], "event_id STRING")
    payments.write.format("delta").save(tables.BY_NAME["silver_payments"].path(root))
    payments.write.format("delta").mode("append").save(tables.BY_NAME["silver_payments"].path(root))
    assert len(run_sql(spark, root, "SELECT * FROM silver_payments VERSION AS OF 1")[1]) == 2
    with pytest.raises(SqlError) as caught:
        run_sql(spark, root, "SELECT * FROM silver_payments VERSION AS OF 1, silver_orders VERSION AS OF 1")
    assert str(caught.value).startswith("silver_orders has no version 1; its versions go from 0 ("), caught.value
    assert ") to 0 (" in str(caught.value)


def test_history_lists_versions_newest_first_with_what_each_wrote(spark, lake):
    """version, commit time, operation, rows written (MERGE: inserted/updated/deleted) and user metadata."""
    root, path = lake
    columns, rows = history(spark, root, "silver_orders")
    assert columns == ["version", "committed_at", "operation", "wrote", "user_metadata"]
    assert [r[0] for r in rows] == [2, 1, 0]
    assert [r[2] for r in rows] == ["MERGE", "WRITE", "WRITE"]
    assert [r[3] for r in rows] == ["1 inserted, 1 updated, 1 deleted", "1 row written", "2 rows written"]
    assert [r[4] for r in rows] == [None, "late orders folded in", None]
    commits = table_history(spark, path)
    assert [r[1] for r in rows] == [c.committed_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:23] for c in commits]
    assert history(spark, root, "silver_orders", limit=1) == (columns[:4], [rows[0][:4]])  # no metadata: no column


def test_history_shortens_long_user_metadata(spark, tmp_path):
    """A stream's positions JSON in user metadata is cut to 80 characters; DESCRIBE HISTORY has it whole."""
    root = str(tmp_path / "lake")
    positions = json.dumps({"flow": "silver_orders", "batch": 7, "sources": {"bronze_orders": {"version": 12}},
                            "query": "0f0e4c61-8f7a-4c8e-9d4b-5b0d2f0a7e11", "final": True})
    (spark.createDataFrame([("e-1", "EUR", 1)], SCHEMA).write.format("delta").option("userMetadata", positions)
     .save(shop.ORDERS.silver_table.path(root)))
    [(*_, shown)] = history(spark, root, "silver_orders")[1]
    assert len(positions) > 80 and shown == positions[:77] + "..."
    columns, [row], _ = run_sql(spark, root, "DESCRIBE HISTORY silver_orders")
    assert row[columns.index("userMetadata")] == positions


def test_history_of_an_unknown_table_names_the_tables_there_are(spark, lake):
    """An unknown table (or one not written yet) is one sentence listing the tables that exist."""
    root, _ = lake
    for name in ("silver_ordrs", "gold_revenue_per_minute"):
        with pytest.raises(SqlError) as caught:
            history(spark, root, name)
        assert str(caught.value) == f"There is no table named {name}; tables you can query: silver_orders."


def test_names_follow_the_lake_root_and_unregistering_keeps_the_files(spark, lake, tmp_path):
    """A second lake's silver_orders replaces the first under the name; the first keeps its files and versions."""
    root, path = lake
    other_root = str(tmp_path / "lake")
    spark.createDataFrame([("x-1", "CHF", 5)], SCHEMA).write.format("delta").save(shop.ORDERS.silver_table.path(other_root))
    assert _rows(spark, other_root, "SELECT event_id FROM silver_orders") == {("x-1",)}
    with pytest.raises(SqlError, match="silver_orders has no version 1;"):
        run_sql(spark, other_root, "SELECT * FROM silver_orders VERSION AS OF 1")
    assert spark.read.format("delta").load(path).count() == len(V2)
    assert _rows(spark, root, "SELECT event_id FROM silver_orders VERSION AS OF 0") == {("e-1",), ("e-2",)}


def test_the_cli_prints_history(lake, jars_dir, tmp_path):
    """`lakehouse history silver_orders --limit 2` prints the two newest versions as a table."""
    root, _ = lake
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_JARS_DIR": jars_dir,
           "LAKEHOUSE_LAKE_ROOT": root, "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"}
    lakehouse = Path(sys.executable).with_name("lakehouse")
    proc = subprocess.run([str(lakehouse), "history", "silver_orders", "--limit", "2"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["version", "committed_at", "operation", "wrote", "user_metadata"]
    assert [line.split("|")[0].strip() for line in lines[2:]] == ["2", "1"]
    assert "1 inserted, 1 updated, 1 deleted" in lines[2] and "late orders folded in" in lines[3]
