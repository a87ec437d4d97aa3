"""The Dagster definitions load, and every asset materializes in process against the real broker."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import dagster as dg
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from lakehouse.orchestration import runs
from lakehouse.orchestration.assets import TOPIC_CHECK, build_assets, topic_key
from lakehouse.orchestration.definitions import build_definitions, defs
from lakehouse.orchestration.resources import build_resources
from lakehouse.schemas import topics
from lakehouse.streaming import flows
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.kafka_topics import admin_client
from lakehouse.streaming.producer import produce
from lakehouse.pipelines import shop



def test_definitions_load_with_the_expected_lineage():
    """`defs` validates, holds one asset per topic and per table asset, and each table depends on its source."""
    dg.Definitions.validate_loadable(defs)
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    shared = {dg.AssetKey("quarantine"), dg.AssetKey("late_arrivals")}
    maintenance = {dg.AssetKey("compaction"), dg.AssetKey("vacuum")}
    expected = {topic_key(t) for t in topics.ALL} | {dg.AssetKey(n) for n in flows.asset_names()} | shared | maintenance
    assert set(specs) == expected
    silver = {dg.AssetKey(f"silver_{entity}") for entity in ("page_views", "orders", "payments", "products", "customers")}
    # written by every silver flow, so downstream of each silver asset in the lineage (late arrivals: gold's too)
    assert {d.asset_key for d in specs[dg.AssetKey("quarantine")].deps} == silver
    assert silver <= {d.asset_key for d in specs[dg.AssetKey("late_arrivals")].deps}
    assert {d.asset_key for d in specs[dg.AssetKey("bronze_orders")].deps} == {topic_key(shop.ORDERS.topic_spec)}
    assert {d.asset_key for d in specs[dg.AssetKey("silver_orders")].deps} == {dg.AssetKey("bronze_orders")}
    assert {d.asset_key for d in specs[dg.AssetKey("gold_revenue_per_minute")].deps} == {dg.AssetKey("silver_orders")}
    assert all(s.description for s in specs.values())
    assert defs.resolve_job_def("catch_up") is not None
    # Maintenance: its own group, job and nightly schedule; VACUUM after compaction.
    assert {specs[k].group_name for k in maintenance} == {"maintenance"}
    assert {d.asset_key for d in specs[dg.AssetKey("vacuum")].deps} == {dg.AssetKey("compaction")}
    assert defs.resolve_schedule_def("nightly_maintenance").job_name == defs.resolve_job_def("maintenance").name


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    assert result.success, runs.failure_message(result)
    return runs.materialized_metadata(result)


def _catch_up(settings, instance: dg.DagsterInstance, assets: list[str] | None = None) -> dg.ExecuteInProcessResult:
    """The code location's catch_up job, in process (all assets, or the named ones)."""
    job = build_definitions(settings).resolve_job_def("catch_up")
    return job.execute_in_process(instance=instance, raise_on_error=False,
                                  run_config={"ops": {"bring_up_to_date": {"config": {"assets": assets or []}}}})


def test_every_asset_materializes_against_the_real_broker(spark, broker):
    """Topics, then all tables: metadata on rows, quarantine, duplicates and offsets matches the events produced."""
    instance = dg.DagsterInstance.ephemeral()
    topic_meta = _metadata(_catch_up(broker, instance, [topic_key(t).to_user_string() for t in topics.ALL]))
    assert {m["topic"] for m in topic_meta.values()} == {t.name for t in topics.ALL}

    records = generate(800, seed=3, start=datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc),
                       mix=Mix(duplicate=0.05, malformed=0.05))
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == 800

    result = _catch_up(broker, instance)  # every asset, topics included
    meta = _metadata(result)
    # Quarantine is materialized too: the silver runs added the malformed records to it.
    assert set(meta) - {"late_arrivals"} == {topic_key(t).to_user_string() for t in topics.ALL} | set(
        flows.asset_names()) | {"quarantine"}
    # The stream wrote one event date (08:00-08:40 UTC): each silver and gold table records that partition.
    for name in ("silver_orders", "gold_revenue_per_minute", "gold_sessions"):
        assert instance.get_materialized_partitions(dg.AssetKey(name)) == {"2026-11-22"}, name
    assert meta["silver_orders"]["partitions_touched"] == "2026-11-22"

    # Definitions loaded now: partitions start at the first day the lake holds (from the Delta logs Spark wrote), and
    # each table shows the columns it has, as its materializations do, with the declared descriptions.
    loaded = build_definitions(broker)
    assert loaded.resolve_job_def("backfill").partitions_def.get_first_partition_key() == "2026-11-22"
    specs = {s.key.to_user_string(): s for s in loaded.resolve_all_asset_specs()}
    for name in ("bronze_orders", "silver_orders", "gold_revenue_per_minute", "dim_products"):
        declared = specs[name].metadata["dagster/column_schema"].columns
        recorded = instance.get_latest_materialization_event(dg.AssetKey(name)).asset_materialization.metadata
        assert [(c.name, c.type) for c in declared] == [(c.name, c.type) for c in
                                                        recorded["dagster/column_schema"].value.columns], name
    assert all(c.description for c in specs["silver_orders"].metadata["dagster/column_schema"].columns)

    # A partition backfill from the UI: one run of job backfill over a range, each chosen table (a silver table and
    # two gold tables of other kinds that read it) recomputed by the batch lane; the stream was right, so nothing
    # changes, and every verify check passes. (test_batch_lane backfills every table.)
    chosen = [dg.AssetKey(name) for name in ("silver_orders", "gold_revenue_per_minute", "gold_order_velocity")]
    backfill = loaded.resolve_job_def("backfill").execute_in_process(
        instance=instance, raise_on_error=False, asset_selection=chosen,
        tags={"dagster/asset_partition_range_start": "2026-11-22", "dagster/asset_partition_range_end": "2026-11-23"})
    changed = _metadata(backfill)
    assert set(changed) == {key.to_user_string() for key in chosen}
    assert changed["silver_orders"]["days"] == "2026-11-22..2026-11-23"
    assert all((m["rows_added"], m["rows_changed"], m["rows_removed"]) == (0, 0, 0) for m in changed.values()), changed
    assert instance.get_materialized_partitions(dg.AssetKey("silver_orders")) == {"2026-11-22", "2026-11-23"}
    for check in result.get_asset_check_evaluations():
        assert check.passed, check
    # Each backfilled table's matches_batch comes from the backfill's own recomputation, made once.
    verified = {c.asset_key.to_user_string(): c for c in backfill.get_asset_check_evaluations()
                if c.check_name == "matches_batch"}
    assert set(verified) == set(changed), (set(verified) ^ set(changed))
    for check in verified.values():
        assert check.passed and check.metadata["verified_by"].value == "this run's backfill step", check
        assert check.metadata["verified_at_delta_version"].value == changed[check.asset_key.to_user_string()]["delta_version"]

    for topic, bronze, silver in (
        (shop.ORDERS.topic_spec, "bronze_orders", "silver_orders"),
        (shop.PAGE_VIEWS.topic_spec, "bronze_page_views", "silver_page_views"),
    ):
        mine = [r for r in records if r.topic == topic.name]
        kinds = Counter(r.kind for r in mine)
        assert meta[bronze]["rows_written"] == len(mine)
        assert meta[bronze]["records_consumed"] == len(mine)
        assert meta[topic_key(topic).to_user_string()]["retained_records"] == len(mine)
        assert meta[silver]["rows_written"] == kinds["valid"]
        assert meta[silver]["quarantined"] == kinds["malformed"]
        assert meta[silver]["duplicates_dropped"] == kinds["duplicate"]
        assert meta[silver]["late_arrivals"] == 0   # one catch-up batch: nothing is behind the dedup watermark
        assert meta[silver]["dagster/row_count"] == kinds["valid"]

    # Quarantine shows in the UI as materialized, broken down by schema and reason.
    expected = Counter(f"{r.topic}/{r.expected_reason}" for r in records if r.kind == "malformed")
    assert meta["quarantine"]["by_schema_reason"] == dict(expected)
    assert meta["quarantine"]["dagster/row_count"] == sum(expected.values())
    assert instance.get_latest_materialization_event(dg.AssetKey("quarantine")) is not None

    valid_orders = [r.event for r in records if r.kind == "valid" and r.topic == shop.ORDERS.topic_spec.name]
    windows = {(e["occurred_at"][:16], e["currency"]) for e in valid_orders}
    assert meta["gold_revenue_per_minute"]["dagster/row_count"] == len(windows)
    assert meta["gold_revenue_per_minute"]["delta_version"] >= 1


def test_topic_drift_is_reported_and_not_reverted(spark, broker):
    """A live topic whose retention differs from its spec fails the asset check and keeps its live value."""
    resources = build_resources(broker)
    spec = shop.PAGE_VIEWS.topic_spec
    _metadata(dg.materialize(build_assets(), resources=resources, selection=[topic_key(spec)]))
    admin = admin_client(broker.kafka_bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC, spec.name,
        incremental_configs=[ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()

    result = dg.materialize(build_assets(), resources=resources, selection=[topic_key(spec)])
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == TOPIC_CHECK and not check.passed
    assert check.metadata["drift"].value == {"retention.ms": {"spec": str(spec.retention_ms), "live": "3600000"}}
    live = admin.describe_configs([ConfigResource(ResourceType.TOPIC, spec.name)])
    [entries] = [f.result() for f in live.values()]
    assert entries["retention.ms"].value == "3600000"


def test_definitions_build_from_settings(broker):
    """Resources carry the settings they were built from: bootstrap, lake root, Spark master."""
    d = build_definitions(broker)
    resources = d.resources
    assert resources["kafka"].bootstrap_servers == broker.kafka_bootstrap
    assert resources["lake"].root == broker.lake_root
    assert resources["spark"].master == broker.spark_master
