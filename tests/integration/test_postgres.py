"""`lakehouse postgres start|stop|status` as a user runs it: a real PostgreSQL in the lake's home on a loopback port,
wal_level=logical, the shop's operational tables holding what the demo's changelog topics first carry; kept across
a restart, stopped by PID, and one sentence when its port is taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lakehouse.infra.postgres import ROLE
from lakehouse.infra.processes import pid_alive
from lakehouse.pipelines.shop.generator import ShopGenerator
from tests.conftest import free_port

pytestmark = pytest.mark.integration

LAKEHOUSE = Path(sys.executable).with_name("lakehouse")


def _lakehouse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAKEHOUSE), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def database():
    """A home of its own that the system user `postgres` can reach (pytest's own folders are root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="lakehouse-pg-"))
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update({"LAKEHOUSE_HOME": str(home / "home"), "LAKEHOUSE_POSTGRES_PORT": str(free_port())})
    yield env
    _lakehouse(env, "postgres", "stop")
    subprocess.run(["rm", "-rf", str(home)], check=False)


def _first_dimension_records() -> dict[str, dict[str, dict]]:
    """What the generator's first records on the two changelog topics say of each customer and product."""
    seen: dict[str, dict[str, dict]] = {"customers": {}, "products": {}}
    for record in ShopGenerator():
        if record.topic == "shop.customers.v1":
            e = record.event
            seen["customers"][e["customer_id"]] = {"tier": e["tier"], "country": e["country"]}
        elif record.topic == "shop.products.v1":
            e = record.event
            seen["products"][e["product_id"]] = {k: e[k] for k in ("name", "category", "list_price_cents")}
        else:
            break       # the dimensions come first, one record per key
    return seen


def test_start_status_restart_and_stop(database):
    """The first start creates the database and its rows; a restart keeps a change; stop ends the server by PID."""
    import psycopg

    env = database
    port = int(env["LAKEHOUSE_POSTGRES_PORT"])
    started = _lakehouse(env, "postgres", "start")
    assert started.returncode == 0, started.stderr
    assert f"at 127.0.0.1:{port} (wal_level logical)" in started.stdout
    assert "customers 200 rows, products 50 rows (created now)." in started.stdout, started.stdout
    pid = int(started.stdout.split("pid ")[1].split(",")[0])
    assert pid_alive(pid)

    dsn = dict(host="127.0.0.1", port=port, user=ROLE, dbname="shop")
    expected = _first_dimension_records()
    with psycopg.connect(**dsn) as conn:
        customers = {r[0]: {"tier": r[1], "country": r[2]}
                     for r in conn.execute("SELECT customer_id, tier, country FROM customers")}
        products = {r[0]: {"name": r[1], "category": r[2], "list_price_cents": r[3]}
                    for r in conn.execute("SELECT product_id, name, category, list_price_cents FROM products")}
        assert customers == expected["customers"] and products == expected["products"]
        # Ready for Debezium: a logical slot with pgoutput over the project's publication, and whole old rows.
        conn.execute("SELECT pg_create_logical_replication_slot('probe', 'pgoutput')")
        conn.execute("SELECT pg_drop_replication_slot('probe')")
        assert {r[0] for r in conn.execute("SELECT tablename FROM pg_publication_tables "
                                           "WHERE pubname = 'lakehouse_cdc'")} == {"customers", "products"}
        assert {r[0] for r in conn.execute("SELECT relreplident FROM pg_class "
                                           "WHERE relname IN ('customers', 'products')")} == {"f"}
        conn.execute("UPDATE customers SET tier = 'gold' WHERE customer_id = 'c-00001'")

    # A second start while it runs names the same server; a stop and a start keep the change.
    again = _lakehouse(env, "postgres", "start")
    assert again.returncode == 0 and f"pid {pid}," in again.stdout and "created now" not in again.stdout
    stopped = _lakehouse(env, "postgres", "stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"PostgreSQL stopped (pid {pid})."
    assert not pid_alive(pid)       # gone, or a zombie its parent has not reaped
    status = _lakehouse(env, "postgres", "status")
    assert status.returncode == 1 and "PostgreSQL is not running" in status.stdout
    restarted = _lakehouse(env, "postgres", "start")
    assert restarted.returncode == 0 and "customers 200 rows, products 50 rows." in restarted.stdout, restarted.stdout
    with psycopg.connect(**dsn) as conn:
        assert conn.execute("SELECT tier FROM customers WHERE customer_id = 'c-00001'").fetchone()[0] == "gold"
    status = _lakehouse(env, "postgres", "status")
    assert status.returncode == 0 and "database shop: customers 200 rows, products 50 rows." in status.stdout


def test_a_taken_port_is_one_sentence(database):
    """Another program on the port: exit 2, one line naming the port and the setting, no trace."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {**database, "LAKEHOUSE_HOME": database["LAKEHOUSE_HOME"] + "-2", "LAKEHOUSE_POSTGRES_PORT": str(port)}
        taken = _lakehouse(env, "postgres", "start")
    assert taken.returncode == 2 and "Traceback" not in taken.stderr
    assert taken.stderr.strip().splitlines() == [
        f"error: Port {port} on 127.0.0.1 is taken by another process; set "
        "LAKEHOUSE_POSTGRES_PORT to a free port."]
