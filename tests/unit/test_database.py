"""The operational database's declaration and the PostgreSQL programs' lookup: user mistakes are one sentence."""

from __future__ import annotations

import pytest

from lakehouse.infra.postgres import PostgresError, find_bin_dir
from lakehouse.infra.settings import Settings, SettingsError
from lakehouse.pipelines import shop
from lakehouse.schemas.database import DatabaseError, DbTable


def test_a_table_declares_its_key_among_its_columns():
    table = DbTable("customers", "customer_id", (("customer_id", "text"), ("tier", "text NOT NULL")))
    assert table.ddl() == "CREATE TABLE IF NOT EXISTS customers (customer_id text, tier text NOT NULL, " \
                          "PRIMARY KEY (customer_id))"
    with pytest.raises(DatabaseError, match="its key id is not one of its columns"):
        DbTable("customers", "id", (("customer_id", "text"),))
    with pytest.raises(DatabaseError, match="lower-case names"):
        DbTable("Customers; DROP TABLE x", "customer_id", (("customer_id", "text"),))


def test_the_shop_declares_customers_and_products_seeded_from_its_generator():
    database = shop.PIPELINE.database
    assert database.name == "shop" and [t.name for t in database.tables] == ["customers", "products"]
    rows = database.seed()
    assert len(rows["customers"]) == 200 and len(rows["products"]) == 50
    assert set(rows["customers"][0]) == {"customer_id", "tier", "country"}


def test_a_folder_without_postgres_programs_is_one_sentence(tmp_path):
    with pytest.raises(PostgresError) as info:
        find_bin_dir(str(tmp_path))
    assert str(info.value) == (f"LAKEHOUSE_POSTGRES_BIN={tmp_path} does not hold initdb, pg_ctl and postgres; point "
                               "it at PostgreSQL's bin folder.")


def test_the_port_setting_is_checked():
    assert Settings(home="/x").postgres_port == 5432
    with pytest.raises(SettingsError, match="LAKEHOUSE_POSTGRES_PORT"):
        Settings.from_env({"LAKEHOUSE_POSTGRES_PORT": "70000"})


def test_capture_and_mutations_without_the_database_are_one_sentence(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import free_port

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")},
           "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_POSTGRES_PORT": str(port)}
    lakehouse = str(Path(sys.executable).with_name("lakehouse"))
    sentence = (f"error: PostgreSQL is not running at 127.0.0.1:{port}; start it first with `lakehouse postgres "
                "start`.")
    for args in (("cdc", "start"), ("db", "mutate", "--count", "3")):
        done = subprocess.run([lakehouse, *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [sentence], (args, done.stderr)
    status = subprocess.run([lakehouse, "cdc", "status"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 1 and status.stdout.strip() == (
        f"Change data capture: connector shop-cdc not running; PostgreSQL is not running at 127.0.0.1:{port}.")


def test_a_captured_table_declared_as_a_source_implies_its_topic_tables_flows_and_suites():
    """changelog_source: a compacted one-partition topic with tombstones kept as declared, bronze, the current
    state and the history as flows of their own over bronze (each with its deleted keys), and their suites."""
    from lakehouse.quality.suites import build_suites
    from lakehouse.schemas.pipeline import Pipeline
    from lakehouse.schemas.sources import changelog_source
    from lakehouse.schemas.tables import all_tables
    from lakehouse.streaming.flows import build_flows

    database = shop.PIPELINE.database
    source = changelog_source(database, "customers", entity="db_customers", description="Customers.",
                              tombstones_ms=3_600_000, remember_deletes="2 days")
    assert source.topic == "shop.cdc.public.customers" and source.key == "customer_id"
    assert source.topic_spec.partitions == 1 and source.topic_spec.config() == {
        "cleanup.policy": "compact", "retention.ms": "-1", "message.timestamp.type": "LogAppendTime",
        "delete.retention.ms": "3600000"}
    pipeline = Pipeline(name="accounts", description="", sources=(source,), database=database)
    flows = {f.name: f for f in build_flows(pipeline=pipeline)}
    assert list(flows) == ["bronze_db_customers", "silver_db_customers", "dim_db_customers"]
    assert [s.name for s in flows["silver_db_customers"].sources] == ["bronze_db_customers"]
    assert [t.name for t in flows["silver_db_customers"].also_writes] == ["silver_db_customers_deletes", "quarantine"]
    assert [t.name for t in flows["dim_db_customers"].also_writes] == ["dim_db_customers_deletes"]
    assert flows["dim_db_customers"].target.keys == ("customer_id", "_order")
    assert flows["silver_db_customers"].doc.startswith("Current state of the database's customers table (SCD1)")
    names = [t.name for t in all_tables((source,), ())]
    assert {"bronze_db_customers", "silver_db_customers", "dim_db_customers", "silver_db_customers_deletes",
            "dim_db_customers_deletes"} <= set(names)
    suites = build_suites(pipeline=pipeline)
    assert {"silver_db_customers", "dim_db_customers"} <= set(suites)
    with pytest.raises(DatabaseError) as info:
        changelog_source(database, "orders", entity="db_orders", description="")
    assert str(info.value) == "database shop declares no table orders; its tables are customers, products."
