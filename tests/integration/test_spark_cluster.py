"""`lakehouse spark-cluster` starts a real standalone cluster, and a catch-up run on it balances and equals plain Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lakehouse.infra.kafka_broker import pid_alive, port_is_free
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark_cluster import executor_logs, master_state
from lakehouse.pipelines import shop
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.schemas import tables, topics
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from tests.conftest import free_port
from tests.integration.test_pipeline import minute

N = 600
MIX = Mix(out_of_order=0.05, late=0.02, duplicate=0.05, malformed=0.05)
ASSETS = ("bronze_orders", "silver_orders", "gold_revenue_per_minute")
LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))


def lakehouse(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(jars_dir, tmp_path_factory):
    """A one-worker cluster started by the command, on free ports in its own home; stopped by PID at the end."""
    home = tmp_path_factory.mktemp("cluster-home")
    port, ui_port = free_port(), free_port()
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_JARS_DIR": jars_dir}
    started = lakehouse(env, "spark-cluster", "start", "--port", str(port), "--ui-port", str(ui_port), timeout=180)
    assert started.returncode == 0, started.stderr[-3000:] + started.stdout
    settings = Settings(home=str(home), jars_dir=jars_dir)
    pids = [int((home / "spark-cluster" / d / "pid").read_text()) for d in ("master", "worker-1")]
    yield settings, env, port, ui_port, started.stdout
    stopped = lakehouse(env, "spark-cluster", "stop", timeout=120)
    assert stopped.returncode == 0 and "Stopped the Spark cluster" in stopped.stdout, stopped.stderr + stopped.stdout
    assert not any(pid_alive(pid) for pid in pids)
    assert port_is_free("127.0.0.1", port) and port_is_free("127.0.0.1", ui_port)


@pytest.fixture(scope="module")
def run(cluster, broker, tmp_path_factory):
    """Produce N events with known faults, then `lakehouse run` the orders path on the cluster."""
    settings, env, port, _, _ = cluster
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    # An hour ago: the records' timestamps stay within the topics' retention whatever the date.
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)
    records = generate(N, seed=23, start=start, events_per_second=5.0, mix=MIX)
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == N and report.failed == 0
    env = {**env, "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{port}", "LAKEHOUSE_KAFKA_BOOTSTRAP": broker.kafka_bootstrap,
           "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"}
    done = lakehouse(env, "run", *ASSETS)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return records, report, settings, done.stdout


_READ = r'''
import json, os, sys
from deltalake import DeltaTable

out = {}
for name, path, columns in json.loads(sys.argv[1]):
    table = DeltaTable(path).to_pyarrow_table(columns=columns)
    rows = zip(*(table.column(c).to_pylist() for c in columns))
    out[name] = [[v.isoformat() if hasattr(v, "isoformat") else v for v in row] for row in rows]
print(json.dumps(out), flush=True)
os._exit(0)   # delta-rs may abort in the interpreter's teardown, after the results (tests/integration/other_engines.py)
'''


def read_tables(lake_root: str, *wanted: tuple) -> dict[str, list[list]]:
    """Rows of some columns of each (table spec, columns), read by delta-rs in a child process (no Spark here)."""
    spec = [[spec.name, spec.path(lake_root), list(columns)] for spec, *columns in wanted]
    proc = subprocess.run([sys.executable, "-c", _READ, json.dumps(spec)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_start_waits_for_the_worker_and_says_what_to_set(cluster):
    """`start` returns with the worker ALIVE and prints the master URL to export; `status` lists the worker."""
    settings, env, port, ui_port, printed = cluster
    assert f"export LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:{port}" in printed
    state = master_state(ui_port)
    assert state["status"] == "ALIVE" and [w["state"] for w in state["workers"]] == ["ALIVE"]
    status = lakehouse(env, "spark-cluster", "status", timeout=60)
    assert status.returncode == 0, status.stderr
    assert state["workers"][0]["id"] in status.stdout and "Total: 1 worker alive" in status.stdout


def test_mistakes_are_one_sentence(cluster, tmp_path):
    """A second start and a start on a taken port each get one sentence and exit 2; status of nothing exits 1."""
    _, env, port, _, _ = cluster
    again = lakehouse(env, "spark-cluster", "start", "--port", str(free_port()), "--ui-port", str(free_port()))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already running" in again.stderr
    other = {**env, "LAKEHOUSE_HOME": str(tmp_path / "other")}
    taken = lakehouse(other, "spark-cluster", "start", "--port", str(port), "--ui-port", str(free_port()))
    assert taken.returncode == 2 and taken.stderr == (f"error: port {port} on 127.0.0.1 (the master) is taken by another "
                                                      "program; choose a free one with --port.\n")
    assert lakehouse(other, "spark-cluster", "status").returncode == 1


def test_the_run_balances_every_record_on_the_cluster(run):
    """bronze = silver + quarantine + late arrivals + duplicates for orders, each part equal to what was produced."""
    records, report, settings, _ = run
    orders = shop.ORDERS.topic_spec.name
    got = read_tables(settings.lake_root, (shop.ORDERS.bronze_table, "topic", "partition", "offset"),
                      (shop.ORDERS.silver_table, "event_id"), (tables.QUARANTINE, "topic", "partition", "offset"),
                      (tables.LATE_ARRIVALS, "flow"))
    bronze = {tuple(r) for r in got["bronze_orders"]}
    assert len(bronze) == len(got["bronze_orders"])
    assert bronze == {(d.topic, d.partition, d.offset) for d in report.deliveries.values() if d.topic == orders}
    silver = [r[0] for r in got["silver_orders"]]
    produced = [r for r in records if r.topic == orders]
    assert sorted(silver) == sorted(r.event["event_id"] for r in produced if r.kind == "valid")
    quarantined = [r for r in got["quarantine"] if r[0] == orders]
    late = [r for r in got["late_arrivals"] if r[0] == "silver_orders"]
    duplicates = sum(r.kind == "duplicate" for r in produced)
    assert len(quarantined) == sum(r.kind == "malformed" for r in produced) > 0 and duplicates > 0
    assert len(bronze) == len(silver) + len(quarantined) + len(late) + duplicates


def test_gold_equals_plain_python_over_the_produced_orders(run):
    """Revenue, orders and items per (minute, currency) equal a Python fold over the valid orders produced."""
    records, _, settings, _ = run
    expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in records:
        if r.kind == "valid" and r.topic == shop.ORDERS.topic_spec.name:
            acc = expected[(minute(r.event["occurred_at"]), r.event["currency"])]
            acc[0] += r.event["total_cents"]
            acc[1] += 1
            acc[2] += sum(line["quantity"] for line in r.event["lines"])
    rows = read_tables(settings.lake_root, (shop.GOLD_REVENUE_PER_MINUTE, "window_start", "currency", "revenue_cents",
                                            "orders", "items"))["gold_revenue_per_minute"]
    got = {(minute(r[0]), r[1]): r[2:] for r in rows}
    assert len(rows) == len(got)
    assert got == dict(expected)


def test_the_work_ran_on_the_clusters_executor(cluster, run):
    """The master lists the run's application, with cores, and its executor's log in the worker ran tasks."""
    settings, _, _, ui_port, _ = cluster
    apps = [a for a in master_state(ui_port)["completedapps"] if a["name"] == "lakehouse"]
    assert len(apps) == 1 and apps[0]["cores"] > 0
    logs = executor_logs(settings, apps[0]["id"])
    assert logs and "Running task" in "".join(p.read_text(errors="replace") for p in logs)
