"""`lakehouse sql` only reads: every statement that would change or drop something is refused before it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from lakehouse.serving.sql import SqlError, run_sql
from lakehouse.schemas import tables
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

WRITES = [
    "DELETE FROM silver_orders WHERE currency = 'GBP'",
    "UPDATE silver_orders SET currency = 'XXX'",
    "DROP TABLE silver_orders",
    "INSERT INTO silver_orders SELECT * FROM silver_orders",
    "WITH again AS (SELECT * FROM silver_orders) INSERT INTO silver_orders SELECT * FROM again",
    "MERGE INTO silver_orders t USING silver_orders s ON t.event_id = s.event_id WHEN MATCHED THEN DELETE",
    "TRUNCATE TABLE silver_orders",
    "CREATE TABLE copy AS SELECT * FROM silver_orders",
    "ALTER TABLE silver_orders SET TBLPROPERTIES ('a' = 'b')",
    "OPTIMIZE delta.`{path}`",
    "VACUUM delta.`{path}` RETAIN 0 HOURS",
    "DELETE FROM delta.`{path}`",
    "RESTORE TABLE delta.`{path}` TO VERSION AS OF 0",
    "RESTORE TABLE silver_orders TO VERSION AS OF 0",
    "CREATE OR REPLACE TABLE silver_orders USING delta LOCATION '{path}/../elsewhere'",
    "INSERT OVERWRITE DIRECTORY '{path}/../elsewhere' SELECT 1",
    "SET spark.sql.shuffle.partitions = 1",
    "CREATE TEMP VIEW v AS SELECT 1",
    "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> tuple[str, str]:
    """A lake with a small silver_orders table written twice (versions 0 and 1), shared by the module: every test
    leaves it as it found it, which each asserts (its rows and its version)."""
    root = str(tmp_path_factory.mktemp("lake"))
    path = shop.ORDERS.silver_table.path(root)
    rows = spark.createDataFrame([("e-1", "EUR"), ("e-2", "GBP")], "event_id STRING, currency STRING")
    rows.write.format("delta").save(path)
    rows.limit(1).write.format("delta").mode("append").save(path)
    return root, path


@pytest.mark.parametrize("statement", WRITES)
def test_a_statement_that_writes_is_refused_and_changes_nothing(spark, lake, statement):
    """Each kind of write is refused in one sentence; the table keeps its rows and its Delta version."""
    root, path = lake
    with pytest.raises(SqlError) as refused:
        run_sql(spark, root, statement.format(path=path))
    sentence = str(refused.value)
    assert "\n" not in sentence and sentence.endswith(".")
    assert "read-only" in sentence or "only read" in sentence
    assert DeltaTable.forPath(spark, path).history(1).collect()[0]["version"] == 1
    assert spark.read.format("delta").load(path).count() == 3
    assert not (Path(path).parent / "elsewhere").exists()


def test_reads_still_work(spark, lake):
    """Queries (as of a version too), DESCRIBE, EXPLAIN and a Delta table's history are reads and run."""
    root, path = lake
    columns, rows, _ = run_sql(spark, root, "SELECT currency, count(*) AS n FROM silver_orders GROUP BY 1 ORDER BY 1")
    assert columns == ["currency", "n"] and rows == [("EUR", 2), ("GBP", 1)]
    assert run_sql(spark, root, "DESCRIBE silver_orders")[1][0][0] == "event_id"
    assert run_sql(spark, root, "EXPLAIN DELETE FROM silver_orders")[1]
    assert len(run_sql(spark, root, f"DESCRIBE HISTORY delta.`{path}`")[1]) == 2
    assert len(run_sql(spark, root, "DESCRIBE HISTORY silver_orders")[1]) == 2
    assert run_sql(spark, root, "SELECT count(*) FROM silver_orders VERSION AS OF 0")[1] == [(2,)]
    assert spark.read.format("delta").load(path).count() == 3


def test_the_cli_refuses_a_delete_with_exit_2(lake, jars_dir, tmp_path):
    """`lakehouse sql "DELETE ..."` exits 2 with one line on stderr, and the table is untouched."""
    root, path = lake
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_JARS_DIR": jars_dir,
           "LAKEHOUSE_LAKE_ROOT": root, "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"}
    lakehouse = Path(sys.executable).with_name("lakehouse")
    proc = subprocess.run([str(lakehouse), "sql", "DELETE FROM silver_orders WHERE currency = 'GBP'"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "read-only" in lines[0], proc.stderr
