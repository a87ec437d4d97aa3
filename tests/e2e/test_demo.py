"""The main job, as the README's first command runs it, on its own home folder and ports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.infra.kafka_broker import port_is_free
from tests.conftest import free_port



def test_demo_runs_end_to_end_and_accounts_for_every_record(jars_dir, tmp_path):
    """`lakehouse demo` exits 0, balances every layer against what it produced, and stops the broker it started."""
    port, controller = free_port(), free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "LAKEHOUSE_JARS_DIR": jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(port),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(controller),
        "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2",
    }
    lakehouse = Path(sys.executable).with_name("lakehouse")
    proc = subprocess.run(
        [str(lakehouse), "demo", "--events", "600", "--seed", "5"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:] + out[-3000:]

    injected = re.search(r"this run injected (\d+) duplicates and (\d+) malformed records", out)
    assert injected, out
    duplicates, malformed = map(int, injected.groups())
    number = r"\s+\|\s+(\d+)"
    entities = {"page_views", "orders", "payments", "products", "customers"}
    rows = re.findall(r"^\s+(" + "|".join(entities) + ")" + number * 5 + r"\s+\|\s+(\w+)", out, re.M)
    assert {r[0] for r in rows} == entities
    counts = [tuple(map(int, r[1:6])) for r in rows]
    assert sum(c[0] for c in counts) == 600                       # bronze holds every record produced
    assert all(b == s + q + late + d for b, s, q, late, d in counts)  # each layer balances
    assert sum(c[2] for c in counts) == malformed                 # quarantine holds every malformed record
    assert sum(c[3] for c in counts) == 0                         # one catch-up batch: nothing is behind a watermark
    assert sum(c[4] for c in counts) == duplicates                # and silver dropped exactly the duplicates
    totals = [sum(c[i] for c in counts) for i in range(5)]
    assert (f"balance: bronze {totals[0]} = silver {totals[1]} + quarantine {totals[2]} "
            f"+ late arrivals {totals[3]} + duplicates {totals[4]}") in out
    assert "revenue_cents" in out and "gold_revenue_per_minute" in out
    assert "stopped the Kafka broker it started" in out
    assert not (tmp_path / "home" / "kafka" / "kafka.pid").exists()
    assert port_is_free("127.0.0.1", port) and port_is_free("127.0.0.1", controller)
