"""A materialization launched from an asset's page runs as one of the code location's jobs, not `__ASSET_JOB`."""

from __future__ import annotations

import dagster as dg
from dagster._core.remote_representation.external_data import RepositorySnap

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.location import MATERIALIZE_DAYS_JOB, MATERIALIZE_JOB, build_definitions


def test_every_executable_assets_first_job_is_one_of_the_locations(tmp_path):
    """The UI launches the first of an asset's job names (the snapshot lists them sorted) that every selected asset
    shares: for each executable asset that is Materialize or Materialize_days, and the partitioned ones share the
    second (so a multi-select of silver and gold tables launches it too)."""
    defs = build_definitions(Settings(home=str(tmp_path)))
    dg.Definitions.validate_loadable(defs)
    nodes = [n for n in RepositorySnap.from_def(defs.get_repository_def()).asset_nodes if n.is_executable]
    first = {n.asset_key.to_user_string(): n.job_names[0] for n in nodes}
    assert set(first.values()) == {MATERIALIZE_JOB, MATERIALIZE_DAYS_JOB}, first
    assert first["bronze_orders"] == MATERIALIZE_JOB and first["kafka/shop_orders_v1"] == MATERIALIZE_JOB
    assert first["silver_orders"] == first["gold_revenue_per_minute"] == MATERIALIZE_DAYS_JOB
    days = defs.resolve_job_def(MATERIALIZE_DAYS_JOB)
    assert days.partitions_def == defs.resolve_job_def("backfill").partitions_def
