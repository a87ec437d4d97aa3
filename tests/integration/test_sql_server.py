"""`lakehouse sql-server`: Spark's Thrift JDBC/ODBC server answers beeline and PyHive as `lakehouse sql` does, and only reads."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyhive import hive

from lakehouse.pipelines import shop
from lakehouse.schemas import tables
from lakehouse.serving.sql import run_sql
from tests.conftest import free_port
from tests.integration.test_sql_read_only import WRITES

pytestmark = pytest.mark.integration

LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
# (window_start, currency, revenue_cents, orders): two minutes, two currencies.
REVENUE = [
    (datetime(2026, 11, 29, 9, 0), "EUR", 1200, 2),
    (datetime(2026, 11, 29, 9, 0), "GBP", 500, 1),
    (datetime(2026, 11, 29, 9, 1), "EUR", 300, 1),
    (datetime(2026, 11, 29, 9, 1), "USD", 9900, 3),
]
GOLD_QUERY = ("SELECT currency, sum(revenue_cents) AS revenue_cents, sum(orders) AS orders "
              "FROM gold_revenue_per_minute GROUP BY currency ORDER BY currency")


# A JDBC client's SET only changes its own session (BI tools send them), so the server lets it through. Spark
# itself refuses INSERT OVERWRITE DIRECTORY in Hive's format without a Hive catalog; in a data source's, the guard does.
JDBC_WRITES = [statement.replace("DIRECTORY '{path}/../elsewhere'", "DIRECTORY '{path}/../elsewhere' USING parquet")
               for statement in WRITES if not statement.startswith("SET ")]
CONNECT_WRITES = [*JDBC_WRITES, "DataFrame write", "DataFrame stream", "Python UDF", "mapInPandas",
                  "the owner setting set by the client"]


def _expected() -> list[tuple[str, int, int]]:
    """The gold query's answer, computed in Python from the rows written."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for _, currency, cents, orders in REVENUE:
        totals[currency][0] += cents
        totals[currency][1] += orders
    return [(currency, cents, orders) for currency, (cents, orders) in sorted(totals.items())]


def _lakehouse(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAKEHOUSE), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def served(spark, jars_dir, tmp_path_factory):
    """A small lake (silver_orders, gold_revenue_per_minute) and a read-only SQL server over it; stopped after."""
    home = tmp_path_factory.mktemp("sql-server") / "home"
    root = str(home / "lake")
    silver = shop.ORDERS.silver_table.path(root)
    orders = spark.createDataFrame([("e-1", "EUR"), ("e-2", "GBP")], "event_id STRING, currency STRING")
    orders.write.format("delta").save(silver)
    orders.limit(1).write.format("delta").mode("append").save(silver)   # version 1: RESTORE has a version to go back to
    gold = tables.BY_NAME["gold_revenue_per_minute"].path(root)
    spark.createDataFrame(REVENUE, "window_start TIMESTAMP, currency STRING, revenue_cents LONG, orders LONG") \
        .write.format("delta").save(gold)
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir,
           "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"}
    port = free_port()
    started = _lakehouse(env, "sql-server", "start", "--port", str(port))
    assert started.returncode == 0, started.stdout + started.stderr
    status = _lakehouse(env, "sql-server", "status")
    assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout and "read-only" in status.stdout
    pid = int(status.stdout.split("(pid ")[1].split(",")[0])
    yield {"env": env, "root": root, "port": port, "silver": silver, "gold": gold}
    stopped = _lakehouse(env, "sql-server", "stop")
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    assert _lakehouse(env, "sql-server", "status").returncode == 1


# A Spark Connect client as a notebook runs one (README): rows of the gold query, then each write it tries.
CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
rows = [tuple(r) for r in spark.sql(sys.argv[2]).collect()]
attempts = {s: (lambda s=s: spark.sql(s).collect()) for s in json.loads(sys.argv[3])}
silver = spark.read.table("silver_orders")
attempts["DataFrame write"] = lambda: silver.write.format("delta").mode("append").save(sys.argv[4])
attempts["DataFrame stream"] = lambda: (spark.readStream.format("rate").load().writeStream.format("delta")
    .option("checkpointLocation", sys.argv[5]).start(sys.argv[4]).awaitTermination(30))
attempts["Python UDF"] = lambda: silver.select(udf(lambda c: c.lower())("currency")).collect()
attempts["mapInPandas"] = lambda: silver.mapInPandas(lambda frames: frames, silver.schema).collect()
def owner_then_delete():
    spark.conf.set("spark.lakehouse.readOnly.owner", "true")
    return spark.sql("DELETE FROM silver_orders").collect()
attempts["the owner setting set by the client"] = owner_then_delete
refused = {}
for name, attempt in attempts.items():
    try:
        attempt()
        refused[name] = None
    except Exception as exc:
        refused[name] = [exc.getCondition() if hasattr(exc, "getCondition") else None, str(exc).splitlines()[0]]
print(json.dumps({"rows": rows, "refused": refused}))
"""


@pytest.fixture(scope="module")
def connect(served):
    """`lakehouse serve` (Spark Connect) on the same lake, started as a user does; stopped by PID after."""
    env = {**served["env"], "LAKEHOUSE_SERVE_WARM_UP": "false"}
    port, home = free_port(), Path(served["env"]["LAKEHOUSE_HOME"])
    out = open(home.parent / "serve.out", "w")
    server = subprocess.Popen([str(LAKEHOUSE), "serve", "--port", str(port)], env=env, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    state = home / "serve.json"
    try:
        deadline = time.monotonic() + 240
        while not state.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state.exists(), (home.parent / "serve.out").read_text()[-3000:]
        assert json.loads(state.read_text())["connect_port"] == port
        client = subprocess.run([sys.executable, "-c", CONNECT_CLIENT, f"sc://127.0.0.1:{port}", GOLD_QUERY,
                                 json.dumps([w.format(path=served["silver"]) for w in JDBC_WRITES]), served["silver"],
                                 str(home.parent / "refused-stream-checkpoint")],
                                capture_output=True, text=True, timeout=600)
        assert client.returncode == 0, client.stderr[-3000:]
        yield {"env": env, "server": server, "home": home, **json.loads(client.stdout.strip().splitlines()[-1])}
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            code = server.wait(timeout=120)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
    assert code == 0 and not state.exists(), (home.parent / "serve.out").read_text()[-3000:]


def _cursor(served):
    return hive.connect(host="127.0.0.1", port=served["port"], username="test").cursor()


def test_beeline_pyhive_and_lakehouse_sql_return_the_same_gold_rows(served, spark):
    """The same gold query gives Python's totals through PyHive, beeline and `lakehouse sql`'s code; beeline's write is refused."""
    expected = _expected()
    cursor = _cursor(served)
    cursor.execute(GOLD_QUERY)
    assert cursor.fetchall() == expected
    assert [d[0] for d in cursor.description] == ["currency", "revenue_cents", "orders"]

    assert run_sql(spark, served["root"], GOLD_QUERY)[1] == expected

    beeline = _lakehouse(served["env"], "sql-server", "beeline", "--silent=true", "--outputformat=csv2",
                         "-e", GOLD_QUERY + ";", "-e", "DELETE FROM gold_revenue_per_minute;")
    rows = [row for row in csv.reader(io.StringIO(beeline.stdout)) if row]
    assert rows[0] == ["currency", "revenue_cents", "orders"], beeline.stdout + beeline.stderr
    assert [(c, int(r), int(o)) for c, r, o in rows[1:]] == expected
    assert "[LAKEHOUSE_READ_ONLY] This server is read-only" in beeline.stdout + beeline.stderr
    assert DeltaTable.forPath(spark, served["gold"]).history(1).collect()[0]["version"] == 0


def test_a_spark_connect_client_and_lakehouse_sql_over_it_return_the_same_gold_rows(served, connect):
    """A Spark Connect client of `lakehouse serve` gets Python's totals; `lakehouse sql` goes through it, no JVM of its own."""
    expected = _expected()
    assert [tuple(row) for row in connect["rows"]] == expected
    log = connect["home"] / "logs" / "lakehouse.log"
    before = log.read_text()
    query = _lakehouse(connect["env"], "sql", GOLD_QUERY)
    assert query.returncode == 0, query.stderr[-2000:]
    lines = query.stdout.splitlines()
    assert [tuple(cell.strip() for cell in line.split("|")) for line in lines[2:2 + len(expected)]] == \
        [(c, str(r), str(o)) for c, r, o in expected], query.stdout
    added = log.read_text()[len(before):]
    assert "answered sql over Spark Connect" in added and "starting a Spark session" not in added, added[-2000:]


@pytest.mark.parametrize("attempt", CONNECT_WRITES)
def test_a_write_is_refused_over_spark_connect(served, connect, spark, attempt):
    """SQL writes, DataFrame and stream writes, Python code and a client's try at the owner setting are all refused."""
    name = attempt.format(path=served["silver"]) if attempt in JDBC_WRITES else attempt
    condition, message = connect["refused"][name] or (None, "it ran")
    assert condition == "LAKEHOUSE_READ_ONLY", (attempt, message)
    assert "is read-only" in message or "does not run reflect" in message, message
    assert DeltaTable.forPath(spark, served["silver"]).history(1).collect()[0]["version"] == 1
    assert spark.read.format("delta").load(served["silver"]).count() == 3
    assert not (Path(served["silver"]).parent / "elsewhere").exists()


@pytest.mark.parametrize("statement", JDBC_WRITES)
def test_a_statement_that_writes_is_refused_over_jdbc(served, spark, statement):
    """Each kind of write is refused with the read-only condition; the table keeps its rows and its version."""
    cursor = _cursor(served)
    with pytest.raises(hive.OperationalError) as refused:
        cursor.execute(statement.format(path=served["silver"]))
    message = str(refused.value)
    assert "LAKEHOUSE_READ_ONLY" in message and ("is read-only" in message or "does not run reflect" in message), message
    assert DeltaTable.forPath(spark, served["silver"]).history(1).collect()[0]["version"] == 1
    assert spark.read.format("delta").load(served["silver"]).count() == 3
    assert not (Path(served["silver"]).parent / "elsewhere").exists()


def test_reads_and_session_settings_are_answered(served):
    """DESCRIBE, SHOW TABLES, a Delta table's history and a client's own SET run through the guard."""
    cursor = _cursor(served)
    cursor.execute("SET spark.sql.shuffle.partitions = 3")
    cursor.execute("SHOW TABLES")
    assert {"silver_orders", "gold_revenue_per_minute"} <= {row[1] for row in cursor.fetchall()}
    cursor.execute("DESCRIBE gold_revenue_per_minute")
    assert [row[0] for row in cursor.fetchall()][:4] == ["window_start", "currency", "revenue_cents", "orders"]
    cursor.execute("DESCRIBE HISTORY silver_orders")
    assert len(cursor.fetchall()) == 2


def test_a_table_created_after_the_start_is_served_within_seconds(served, spark):
    """A table that appears in the lake while the server runs is queried by name within a few seconds."""
    path = shop.ORDERS.bronze_table.path(served["root"])
    spark.range(7).write.format("delta").save(path)
    cursor = _cursor(served)
    deadline = time.monotonic() + 30
    while True:
        try:
            cursor.execute(f"SELECT count(*) FROM {shop.ORDERS.bronze_table.name}")
            break
        except hive.OperationalError:
            assert time.monotonic() < deadline, "the new table was not served within 30 s"
            time.sleep(1)
    assert cursor.fetchall() == [(7,)]
