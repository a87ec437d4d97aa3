"""The Dagster code location: `dagster dev -m orchestration.definitions` (or `lakehouse ui`) loads `defs`."""

from __future__ import annotations

import dagster as dg

from infra.settings import Settings
from orchestration.assets import build_assets
from orchestration.resources import build_resources

CATCH_UP_JOB = "catch_up"


def build_definitions(settings: Settings) -> dg.Definitions:
    """Assets topics -> bronze -> silver -> gold, with resources from one settings object."""
    assets = build_assets()
    return dg.Definitions(
        assets=assets,
        resources=build_resources(settings),
        jobs=[
            dg.define_asset_job(
                CATCH_UP_JOB, selection=dg.AssetSelection.all(),
                description="Create topics and bring every table up to date with its source.",
            )
        ],
        # One Spark session per run: steps share it instead of each starting a JVM.
        executor=dg.in_process_executor,
    )


defs = build_definitions(Settings.from_env())
