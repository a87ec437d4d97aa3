"""`lakehouse cdc` as a user runs it: Debezium in a Kafka Connect worker captures the real PostgreSQL of
`lakehouse postgres` into compacted topics, a snapshot first and then every change `lakehouse db mutate` makes; the
changelog folded in plain Python equals the tables read back from the database, across a clean restart of the
capture (nothing sent twice, no second snapshot) and a kill -9 of it (nothing lost)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import functions as F

from lakehouse.infra.postgres import ROLE
from lakehouse.infra.processes import pid_alive
from tests.conftest import free_port

pytestmark = pytest.mark.integration

LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
TOPICS = {"customers": "shop.cdc.public.customers", "products": "shop.cdc.public.products"}
KEYS = {"customers": "customer_id", "products": "product_id"}
COMPARED = {"customers": ("tier", "country"), "products": ("name", "category", "list_price_cents")}


def _lakehouse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAKEHOUSE), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def capture(broker):
    """The module's broker, and PostgreSQL with the capture in a home the system user `postgres` can reach."""
    home = Path(tempfile.mkdtemp(prefix="lakehouse-cdc-"))
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update({"LAKEHOUSE_HOME": str(home / "home"), "LAKEHOUSE_JARS_DIR": broker.jars_dir,
                "LAKEHOUSE_KAFKA_PORT": str(broker.kafka_port),
                "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(broker.kafka_controller_port),
                "LAKEHOUSE_POSTGRES_PORT": str(free_port()), "LAKEHOUSE_CDC_PORT": str(free_port())})
    started = _lakehouse(env, "postgres", "start")
    assert started.returncode == 0, started.stderr
    # The database's own record of its changes, independent of Debezium: a logical slot with PostgreSQL's
    # test_decoding plugin, made before any change, and the rows as they were then.
    with _connect(env) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('audit', 'test_decoding')")
        AUDIT["start"] = {t: _database(env, t) for t in TOPICS}
    yield env, broker.kafka_bootstrap
    _lakehouse(env, "cdc", "stop")
    _lakehouse(env, "postgres", "stop")
    subprocess.run(["rm", "-rf", str(home)], check=False)


AUDIT: dict[str, dict] = {}


def _connect(env):
    import psycopg

    return psycopg.connect(host="127.0.0.1", port=int(env["LAKEHOUSE_POSTGRES_PORT"]), user=ROLE, dbname="shop",
                           autocommit=True)


def _changelog(bootstrap: str, topic: str) -> list[tuple[int, dict | None, dict | None]]:
    """Every record of the topic's one partition, in order: (offset, key, value); a tombstone's value is None."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return []           # the capture has not made it yet
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        while len(records) < end:
            message = consumer.poll(5)
            assert message is not None, f"{topic}: {len(records)} of {end} records read"
            assert message.error() is None, message.error()
            value = json.loads(message.value()) if message.value() is not None else None
            records.append((message.offset(), json.loads(message.key()), value))
        return records
    finally:
        consumer.close()


def _fold(records) -> dict[str, dict]:
    """The table the changelog describes: a read, create or update sets the key's row, a delete removes it."""
    rows: dict[str, dict] = {}
    for _, key, value in records:
        if value is None:
            continue
        (ident,) = key.values()
        if value["op"] == "d":
            rows.pop(ident, None)
        else:
            rows[ident] = value["after"]
    return rows


def _database(env: dict[str, str], table: str) -> dict[str, dict]:
    from psycopg.rows import dict_row

    with _connect(env) as conn:
        conn.row_factory = dict_row
        return {r[KEYS[table]]: r for r in conn.execute(f"SELECT * FROM {table}")}


def _same(env, bootstrap) -> bool:
    for table, topic in TOPICS.items():
        folded, held = _fold(_changelog(bootstrap, topic)), _database(env, table)
        if {k: tuple(r[c] for c in COMPARED[table]) for k, r in folded.items()} != \
                {k: tuple(r[c] for c in COMPARED[table]) for k, r in held.items()}:
            return False
    return True


def _wait_same(env, bootstrap, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not _same(env, bootstrap):
        assert time.monotonic() < deadline, "the changelog did not come to equal the database"
        time.sleep(1)


def _mutate(env, count: int, seed: int) -> None:
    done = _lakehouse(env, "db", "mutate", "--count", str(count), "--seed", str(seed))
    assert done.returncode == 0 and done.stdout.startswith(f"Made {count} changes in "), done.stderr


def test_snapshot_and_changes_equal_the_database_across_restarts_of_the_capture(capture):
    env, bootstrap = capture
    started = _lakehouse(env, "cdc", "start")
    assert started.returncode == 0, started.stderr
    assert "-> shop.cdc.public.customers, shop.cdc.public.products" in started.stdout
    pid = int(started.stdout.split("Kafka Connect pid ")[1].split(" ")[0])
    _mutate(env, 40, seed=1)
    _wait_same(env, bootstrap)

    # Deletes are a delete event and then a tombstone of the same key; the snapshot read each first row once.
    for topic in TOPICS.values():
        records = _changelog(bootstrap, topic)
        for i, (_, key, value) in enumerate(records):
            if value is not None and value["op"] == "d":
                assert records[i + 1][1:] == (key, None), records[i + 1]
    reads = Counter(v["op"] for t in TOPICS.values() for _, _, v in _changelog(bootstrap, t) if v)
    assert reads["r"] == 250 and reads["u"] + reads["c"] + reads["d"] == 40, reads

    status = _lakehouse(env, "cdc", "status")
    assert status.returncode == 0 and "connector shop-cdc RUNNING" in status.stdout, status.stdout
    assert "replication slot lakehouse_shop active, confirmed up to " in status.stdout

    # A clean stop and changes while it is away: the restart resumes from its recorded log position.
    stopped = _lakehouse(env, "cdc", "stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"Change data capture stopped (Kafka Connect pid {pid})."
    assert not pid_alive(pid)
    _mutate(env, 20, seed=2)
    assert _lakehouse(env, "cdc", "start").returncode == 0
    _wait_same(env, bootstrap)
    changes = [(t, v["source"]["lsn"], json.dumps(k), v["op"]) for t in TOPICS.values()
               for _, k, v in _changelog(bootstrap, t) if v and v["op"] != "r"]
    assert len(changes) == 60 and len(set(changes)) == 60, Counter(changes).most_common(3)
    assert sum(1 for t in TOPICS.values() for _, _, v in _changelog(bootstrap, t) if v and v["op"] == "r") == 250

    # kill -9 while changes stream: the restarted capture may send the last ones again, never loses one.
    status = _lakehouse(env, "cdc", "status")
    pid = int(status.stdout.split("Kafka Connect pid ")[1].split(",")[0])
    mutating = subprocess.Popen([str(LAKEHOUSE), "db", "mutate", "--count", "60", "--rate", "20", "--seed", "3"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    os.kill(pid, signal.SIGKILL)
    assert mutating.wait(timeout=60) == 0, mutating.stderr
    assert _lakehouse(env, "cdc", "start").returncode == 0
    _wait_same(env, bootstrap)
    changes = {(t, v["source"]["lsn"], json.dumps(k), v["op"]) for t in TOPICS.values()
               for _, k, v in _changelog(bootstrap, t) if v and v["op"] != "r"}
    assert len(changes) == 120, len(changes)


FIELD = re.compile(r"(\w+)\[[^\]]+\]:('(?:[^']|'')*'|\S+)")


def _history_from_the_database(env) -> dict[str, dict[str, list]]:
    """Per table and key, the versions the database's own log describes, in its order: the attributes compared
    of each, and how the last one ended (None: current, "d": deleted, "u" never: an update starts the next)."""
    with _connect(env) as conn:
        lines = [r[0] for r in conn.execute("SELECT data FROM pg_logical_slot_peek_changes('audit', NULL, NULL)")]
    history: dict[str, dict[str, list]] = {t: {k: [tuple(r[c] for c in COMPARED[t])] for k, r in rows.items()}
                                           for t, rows in AUDIT["start"].items()}
    ended: dict[str, dict[str, str | None]] = {t: {k: None for k in rows} for t, rows in history.items()}
    for line in lines:
        m = re.match(r"table public\.(\w+): (INSERT|UPDATE|DELETE): (.*)", line)
        if not m:
            continue            # BEGIN and COMMIT
        table, kind = m.group(1), m.group(2)
        values = {name: (raw[1:-1].replace("''", "'") if raw.startswith("'") else raw)
                  for name, raw in FIELD.findall(m.group(3))}
        key = values[KEYS[table]]
        if kind == "DELETE":
            ended[table][key] = "d"
            continue
        row = tuple(int(values[c]) if c == "list_price_cents" else values[c] for c in COMPARED[table])
        history[table].setdefault(key, []).append(row)
        ended[table][key] = None
    return {t: {k: {"versions": v, "ended": ended[t][k]} for k, v in keys.items()} for t, keys in history.items()}


def test_scd1_and_scd2_equal_the_database_with_batches_out_of_order_and_twice(capture, spark, tmp_path):
    """The changelog writer over the captured customers topic, in three batches applied 0, 2, 1 and then 2 again,
    plus bad envelopes: SCD1 equals the table in PostgreSQL, SCD2 equals the history its own log (test_decoding)
    describes, and every bad envelope is quarantined with its reason. (One table: the writer knows no table but
    by its declaration.)"""
    from lakehouse.pipelines.shop.database import CUSTOMERS, PRODUCTS
    from lakehouse.schemas.tables import QUARANTINE, TableSpec
    from lakehouse.streaming.changelog_batches import ChangelogWriter
    from lakehouse.streaming.transforms.bronze import to_bronze

    env, bootstrap = capture
    lake = str(tmp_path / "lake")
    declared = {"customers": CUSTOMERS, "products": PRODUCTS}
    for table, topic in [("customers", TOPICS["customers"])]:
        records = to_bronze(spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                            .option("subscribe", topic).option("includeHeaders", "true").load()).cache()
        end = records.agg(F.max("offset")).first()[0] + 1
        chunks = [records.where((F.col("offset") >= end * i // 3) & (F.col("offset") < end * (i + 1) // 3))
                  for i in range(3)]
        key = KEYS[table]
        bad = spark.createDataFrame([
            (json.dumps({key: "x-1"}), "{not json", 10**9),
            (json.dumps({key: "x-2"}), json.dumps({"after": {key: "x-2"}, "source": {"lsn": 1, "ts_ms": 1},
                                                   "op": "t"}), 10**9 + 1),
            (json.dumps({key: "x-3"}), json.dumps({"after": {key: "x-3"}, "source": {"ts_ms": 1}, "op": "c"}),
             10**9 + 2),
            (json.dumps({key: "x-4"}), json.dumps({"after": {key: "x-5"}, "source": {"lsn": 2, "ts_ms": 1},
                                                   "op": "c"}), 10**9 + 3),
            (json.dumps({key: "x-6"}), json.dumps({"source": {"lsn": 3, "ts_ms": 1}, "op": "d"}), 10**9 + 4),
        ], "k STRING, v STRING, offset LONG").select(
            F.col("k").cast("binary").alias("key"), F.col("v").cast("binary").alias("value"),
            F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"), F.lit(topic).alias("topic"),
            F.lit(0).alias("partition"), "offset", F.current_timestamp().alias("appended_at"),
            F.lit(0).alias("timestamp_type"), F.current_timestamp().alias("ingested_at"))
        chunks[0] = chunks[0].unionByName(bad)
        specs = [TableSpec(f"cdc_{table}{suffix}", "silver", "", (key,)) for suffix in ("", "_history", "_deletes")]
        writer = ChangelogWriter(topic=topic, key=key, columns=declared[table].spark_columns(), current=specs[0],
                                 history=specs[1], deletes=specs[2], lake_root=lake, app_id=f"cdc-{table}-v1")
        for batch_id, chunk in enumerate([0, 2, 1, 2]):
            writer(chunks[chunk], batch_id)
        assert writer.stats.quarantined == 5      # chunk 0 once; the txn id skips nothing else: it has no repeat

        current = {r[key]: tuple(r[c] for c in COMPARED[table])
                   for r in spark.read.format("delta").load(specs[0].path(lake)).collect()}
        held = _database(env, table)
        want = {k: tuple(r[c] for c in COMPARED[table]) for k, r in held.items()}
        if current != want:
            wrong = {k for k in set(current) | set(want) if current.get(k) != want.get(k)}
            seen = [(o, v and v["op"], v and v["source"]["lsn"], v and (v["after"] or v["before"])) for o, k, v in
                    _changelog(bootstrap, topic) if list(k.values())[0] in wrong]
            dump = spark.read.format("delta").load(specs[0].path(lake)).where(F.col(key).isin(*wrong)).collect()
            dels = spark.read.format("delta").load(specs[2].path(lake)).where(F.col(key).isin(*wrong)).collect()
            raise AssertionError(f"{wrong}: log {seen}; current {dump}; deletes {dels}")

        rows = spark.read.format("delta").load(specs[1].path(lake)).orderBy(key, "_order").collect()
        got: dict[str, dict] = {}
        for r in rows:
            entry = got.setdefault(r[key], {"versions": [], "ended": None})
            entry["versions"].append(tuple(r[c] for c in COMPARED[table]))
            entry["ended"] = None if r["is_current"] else ("d" if r["_closed_by_delete"] else "u")
            if r["valid_to"] is not None:
                assert r["valid_to"] >= r["valid_from"]
        assert got == _history_from_the_database(env)[table]
        assert sum(1 for r in rows if r["is_current"]) == len(held)

        reasons = {r["offset"]: r["reason"] for r in spark.read.format("delta").load(QUARANTINE.path(lake))
                   .where(F.col("topic") == topic).collect()}
        assert reasons == {10**9: "malformed_json", 10**9 + 1: "contract_violation", 10**9 + 2: "missing_field",
                           10**9 + 3: "contract_violation", 10**9 + 4: "missing_field"}



NOW_MS = int(time.time() * 1000) - 3_600_000     # within the hour: deletes are remembered for 7 days


def _record(key: str, op: str, lsn: int, tier: str | None, offset: int, ts: int = 0) -> tuple:
    image = None if tier is None else {"customer_id": key, "tier": tier, "country": "DE"}
    value = {"before": image if op == "d" else None, "after": None if op == "d" else image,
             "source": {"lsn": lsn, "ts_ms": NOW_MS + (ts or lsn) * 1000}, "op": op}
    return json.dumps({"customer_id": key}), json.dumps(value), offset


def test_log_order_decides_whatever_the_arrival_order(spark, tmp_path):
    """Made-up changelogs: a snapshot read and the first change share an LSN (Debezium's snapshot position); a
    delete that arrives before the older insert and update it follows; one change twice in a batch; several
    changes to a key in one batch. Each batch order gives the state and history of the log order."""
    from lakehouse.pipelines.shop.database import CUSTOMERS
    from lakehouse.schemas.tables import TableSpec
    from lakehouse.streaming.changelog_batches import ChangelogWriter

    log = [_record("a", "r", 100, "standard", 0), _record("a", "u", 100, "gold", 1),       # tie: the read first
           _record("b", "c", 110, "silver", 2), _record("b", "u", 120, "gold", 3), _record("b", "d", 130, "gold", 4),
           _record("c", "r", 100, "silver", 5), _record("c", "u", 140, "standard", 6), _record("c", "u", 150, "gold", 7)]
    # Later batch first (with b's delete), then the older one; a change twice in a batch and again across them.
    batches = {"in order": [log], "reversed and twice": [log[4:] + log[6:7], log[:4] + log[2:3] + log[7:]]}
    results = {}
    for name, parts in batches.items():
        lake = str(tmp_path / name.replace(" ", "-"))
        specs = [TableSpec(f"cdc_customers{s}", "silver", "", ("customer_id",)) for s in ("", "_history", "_deletes")]
        writer = ChangelogWriter(topic="t", key="customer_id", columns=CUSTOMERS.spark_columns(), current=specs[0],
                                 history=specs[1], deletes=specs[2], lake_root=lake, app_id="t-v1")
        for batch_id, part in enumerate(parts):
            rows = spark.createDataFrame(part, "k STRING, v STRING, offset LONG").select(
                F.col("k").cast("binary").alias("key"), F.col("v").cast("binary").alias("value"),
                F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"), F.lit("t").alias("topic"),
                F.lit(0).alias("partition"), "offset", F.current_timestamp().alias("appended_at"),
                F.lit(0).alias("timestamp_type"), F.current_timestamp().alias("ingested_at"))
            writer(rows, batch_id)
        current = {r["customer_id"]: r["tier"] for r in spark.read.format("delta").load(specs[0].path(lake)).collect()}
        history = sorted((r["customer_id"], r["tier"], r["is_current"], r["_closed_by_delete"])
                         for r in spark.read.format("delta").load(specs[1].path(lake)).collect())
        results[name] = (current, history)
    assert results["in order"] == (
        {"a": "gold", "c": "gold"},
        [("a", "gold", True, False), ("a", "standard", False, False), ("b", "gold", False, True),
         ("b", "silver", False, False), ("c", "gold", True, False), ("c", "silver", False, False),
         ("c", "standard", False, False)])
    assert results["reversed and twice"] == results["in order"]
