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
PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
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
                "LAKEHOUSE_POSTGRES_PORT": str(free_port()), "LAKEHOUSE_CDC_PORT": str(free_port()),
                # The pipeline of changelog sources: `cdc start` creates their topics as declared.
                "LAKEHOUSE_PIPELINE": "shop_accounts",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(PIPELINES), os.environ.get("PYTHONPATH")]))})
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
        records: list = []
        while (records[-1][0] if records else -1) < end - 1:     # offsets have gaps once the topic is compacted
            message = consumer.poll(5)
            assert message is not None, f"{topic}: {len(records)} records read, up to offset {end - 1}"
            assert message.error() is None, message.error()
            try:
                value = json.loads(message.value()) if message.value() is not None else None
            except ValueError:
                value = {"op": None}          # a bad envelope a test produced
            records.append((message.offset(), json.loads(message.key()), value))
        return records
    finally:
        consumer.close()


def _fold(records) -> dict[str, dict]:
    """The table the changelog describes: a read, create or update sets the key's row, a delete removes it."""
    rows: dict[str, dict] = {}
    for _, key, value in records:
        if value is None or value.get("op") not in ("r", "c", "u", "d") or not (value.get("source") or {}).get("lsn"):
            continue
        ((name, ident),) = key.items()
        if value["op"] == "d":
            rows.pop(ident, None)
        elif (value.get("after") or {}).get(name) == ident:      # not a bad envelope naming another row
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
    # The topics are the declared sources' (compacted, tombstones kept a day, stamped by the broker).
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for resource, future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in TOPICS.values()]).items():
        config = {k: v.value for k, v in future.result().items()}
        assert (config["cleanup.policy"], config["delete.retention.ms"], config["message.timestamp.type"]) == \
            ("compact", "86400000", "LogAppendTime"), resource.name
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


def _bad_envelopes(topic: str, key: str) -> list[tuple[bytes, bytes]]:
    """Five records no table can apply, each with the reason it must be quarantined for."""
    return [(json.dumps({key: k}).encode(), v.encode()) for k, v in [
        ("x-1", "{not json"),                                                                     # malformed_json
        ("x-2", json.dumps({"after": {key: "x-2"}, "source": {"lsn": 1, "ts_ms": 1}, "op": "t"})),  # contract: op
        ("x-3", json.dumps({"after": {key: "x-3"}, "source": {"ts_ms": 1}, "op": "c"})),          # missing: lsn
        ("x-4", json.dumps({"after": {key: "x-5"}, "source": {"lsn": 2, "ts_ms": 1}, "op": "c"})),  # contract: key
        ("x-6", json.dumps({"source": {"lsn": 3, "ts_ms": 1}, "op": "d"})),                       # missing: before
    ]]


def test_declared_changelog_sources_equal_the_database_in_both_lanes(capture, spark, tmp_path):
    """The pipeline of changelog sources (tests/pipelines/shop_accounts) run by the engine's own flows: bronze, the
    current state (SCD1) and the history (SCD2) of each table, caught up in small batches before and after changes
    made in PostgreSQL, with bad envelopes among them. The current state equals the tables read back from the
    database, the history equals the one its own log (test_decoding) describes, every bad envelope is quarantined
    once with its reason, and the batch lane's recomputation of each table (one batch over all of bronze) equals
    the stream's."""
    from confluent_kafka import Producer

    from lakehouse.batch.verify import verify_flow
    from lakehouse.schemas import tables
    from lakehouse.streaming import flows
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.parallel_runs import run_flows

    env, bootstrap = capture
    if "RUNNING" not in _lakehouse(env, "cdc", "status").stdout:      # the module's first test left it running
        assert _lakehouse(env, "cdc", "start").returncode == 0
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=bootstrap, max_offsets_per_trigger=200,
                      max_files_per_trigger=2)
    def catch_up() -> None:
        for outcome in run_flows(spark, list(flows.FLOWS), ctx, parallel=2):
            assert outcome.error is None, (outcome.flow.name, str(outcome.error)[:3000])

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PIPELINES))
        mp.setenv("LAKEHOUSE_PIPELINE", "shop_accounts")
        assert [f.name for f in flows.FLOWS] == [
            "bronze_db_customers", "bronze_db_products", "silver_db_customers", "silver_db_products",
            "dim_db_customers", "dim_db_products"]
        catch_up()
        _mutate(env, 30, seed=4)
        _wait_same(env, bootstrap)
        producer = Producer({"bootstrap.servers": bootstrap})
        for key, value in _bad_envelopes(TOPICS["customers"], KEYS["customers"]):
            producer.produce(TOPICS["customers"], value=value, key=key)
        assert producer.flush(10) == 0
        catch_up()

        def read(name: str):
            return spark.read.format("delta").load(tables.BY_NAME[name].path(ctx.lake_root))

        history = _history_from_the_database(env)
        for table in TOPICS:
            key, compared = KEYS[table], COMPARED[table]
            current = {r[key]: tuple(r[c] for c in compared) for r in read(f"silver_db_{table}").collect()}
            held = _database(env, table)
            assert current == {k: tuple(r[c] for c in compared) for k, r in held.items()}, table
            rows = read(f"dim_db_{table}").orderBy(key, "_order").collect()
            got: dict[str, dict] = {}
            for r in rows:
                entry = got.setdefault(r[key], {"versions": [], "ended": None})
                entry["versions"].append(tuple(r[c] for c in compared))
                entry["ended"] = None if r["is_current"] else ("d" if r["_closed_by_delete"] else "u")
                assert r["valid_to"] is None or r["valid_to"] >= r["valid_from"]
            assert got == history[table], table
            assert sum(1 for r in rows if r["is_current"]) == len(held)

        reasons = sorted((json.loads(r["key"])["customer_id"], r["reason"]) for r in read("quarantine").collect())
        assert reasons == [("x-1", "malformed_json"), ("x-2", "contract_violation"), ("x-3", "missing_field"),
                           ("x-4", "contract_violation"), ("x-6", "missing_field")]
        for flow in flows.FLOWS[2:]:
            verdict = verify_flow(spark, flow, ctx)
            assert verdict.status == "clean", (flow.name, verdict.diff)

        # Rebuilt from the compacted topic alone: once the broker has compacted it (each key's newest record left,
        # the older ones gone), a lake of its own built from the topic holds the database's current state.
        topic = TOPICS["customers"]
        _compact_now(bootstrap, topic)
        deadline = time.monotonic() + 120
        while (kept := _records_kept(bootstrap, topic))[0] == kept[1]:
            assert time.monotonic() < deadline, f"{topic} was not compacted"
            with _connect(env) as conn:       # a change rolls the segment, so that the cleaner can take it
                conn.execute("UPDATE customers SET updated_at = now() WHERE customer_id = "
                             "(SELECT min(customer_id) FROM customers)")
            time.sleep(3)
        _wait_same(env, bootstrap)
        rebuilt = FlowContext(lake_root=str(tmp_path / "rebuilt"), kafka_bootstrap=bootstrap)
        chosen = [flows.BY_NAME["bronze_db_customers"], flows.BY_NAME["silver_db_customers"]]
        assert all(o.error is None for o in run_flows(spark, chosen, rebuilt))
        state = {r["customer_id"]: (r["tier"], r["country"])
                 for r in spark.read.format("delta").load(tables.BY_NAME["silver_db_customers"].path(rebuilt.lake_root))
                 .collect()}
        assert state == {k: (r["tier"], r["country"]) for k, r in _database(env, "customers").items()}
        read = spark.read.format("delta").load(tables.BY_NAME["bronze_db_customers"].path(rebuilt.lake_root)).count()
        assert read == _records_kept(bootstrap, topic)[0] < _records_kept(bootstrap, topic)[1]


def _compact_now(bootstrap: str, topic: str) -> None:
    """Have the broker compact the topic as soon as it can: short segments, any share of old records."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in
               (("segment.ms", "1000"), ("min.cleanable.dirty.ratio", "0.01"), ("min.compaction.lag.ms", "0"))]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result()


def _records_kept(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records the topic's one partition still holds, its end offset): fewer than the end once compacted."""
    records = _changelog(bootstrap, topic)          # read up to the last offset, which compaction keeps
    return len(records), records[-1][0] + 1


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
        current, history = (TableSpec(f"cdc_customers{s}", "silver", "", ("customer_id",)) for s in ("", "_history"))
        writers = [ChangelogWriter(topic="t", key="customer_id", columns=CUSTOMERS.spark_columns(), table=table,
                                   kind=kind, deletes=TableSpec(f"{table.name}_deletes", "silver", "", ()),
                                   lake_root=lake, app_id=f"t-{kind}-v1")
                   for table, kind in ((current, "current"), (history, "history"))]
        for batch_id, part in enumerate(parts):
            rows = spark.createDataFrame(part, "k STRING, v STRING, offset LONG").select(
                F.col("k").cast("binary").alias("key"), F.col("v").cast("binary").alias("value"),
                F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"), F.lit("t").alias("topic"),
                F.lit(0).alias("partition"), "offset", F.current_timestamp().alias("appended_at"),
                F.lit(0).alias("timestamp_type"), F.current_timestamp().alias("ingested_at"))
            for writer in writers:
                writer(rows, batch_id)
        state = {r["customer_id"]: r["tier"] for r in spark.read.format("delta").load(current.path(lake)).collect()}
        versions = sorted((r["customer_id"], r["tier"], r["is_current"], r["_closed_by_delete"])
                          for r in spark.read.format("delta").load(history.path(lake)).collect())
        results[name] = (state, versions)
    assert results["in order"] == (
        {"a": "gold", "c": "gold"},
        [("a", "gold", True, False), ("a", "standard", False, False), ("b", "gold", False, True),
         ("b", "silver", False, False), ("c", "gold", True, False), ("c", "silver", False, False),
         ("c", "standard", False, False)])
    assert results["reversed and twice"] == results["in order"]
