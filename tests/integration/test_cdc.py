"""`lakehouse cdc` as a user runs it: Debezium in a Kafka Connect worker captures the real PostgreSQL of
`lakehouse postgres` into compacted topics, a snapshot first and then every change `lakehouse db mutate` makes; the
changelog folded in plain Python equals the tables read back from the database, across a clean restart of the
capture (nothing sent twice, no second snapshot) and a kill -9 of it (nothing lost)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

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
    yield env, broker.kafka_bootstrap
    _lakehouse(env, "cdc", "stop")
    _lakehouse(env, "postgres", "stop")
    subprocess.run(["rm", "-rf", str(home)], check=False)


def _changelog(bootstrap: str, topic: str) -> list[tuple[int, dict | None, dict | None]]:
    """Every record of the topic's one partition, in order: (offset, key, value); a tombstone's value is None."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    try:
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
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(host="127.0.0.1", port=int(env["LAKEHOUSE_POSTGRES_PORT"]), user=ROLE, dbname="shop",
                         row_factory=dict_row) as conn:
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
