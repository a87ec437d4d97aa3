"""What a Dagster code location holds for a pipeline: assets, checks, jobs, schedules, sensors and resources."""

from __future__ import annotations

import os

import dagster as dg

from datetime import datetime, timedelta, timezone

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import build_assets
from lakehouse.orchestration.catch_up import catch_up_job
from lakehouse.orchestration.checks import build_checks
from lakehouse.orchestration.maintenance import build_maintenance
from lakehouse.orchestration.quality_checks import after_updates_sensor, build_table_checks
from lakehouse.orchestration.partitions import daily, first_lake_day, is_partitioned
from lakehouse.orchestration.refresh import refresh_job
from lakehouse.orchestration.resources import build_resources
from lakehouse.orchestration.streams import build_stream_checks, build_stream_sensor
from lakehouse.streaming import flows as flow_registry

BACKFILL_JOB = "backfill"
RECONCILE_SCHEDULE = "nightly_reconciliation"
RECONCILE_DAYS = 3             # partitions the nightly reconciliation backfills, today's included
RECONCILE_CRON = "30 2 * * *"  # 02:30 UTC
# The jobs a materialization launched from an asset's page runs as. The UI takes the first job, in sorted order, that
# holds every selected asset; a capital letter sorts before Dagster's implicit `__ASSET_JOB`.
MATERIALIZE_JOB = "Materialize"
MATERIALIZE_DAYS_JOB = "Materialize_days"


def partitioned() -> dg.AssetSelection:
    """The silver and gold tables with an event date, which carry the daily partitions (dimensions have none)."""
    return dg.AssetSelection.assets(*[f.asset_name for f in flow_registry.FLOWS if is_partitioned(f.target)])


def materialize_jobs(partitions: dg.PartitionsDefinition) -> list[dg.UnresolvedAssetJobDefinition]:
    """The code location's jobs for materializations launched from an asset page: one for the assets without
    partitions (topics, bronze, dimensions, maintenance), one for the daily-partitioned silver and gold tables."""
    tables = dg.AssetSelection.groups("kafka", "bronze", "silver", "gold", "maintenance")
    return [
        dg.define_asset_job(MATERIALIZE_JOB, selection=tables - partitioned(),
                            description="Materialize topics, bronze and dimension tables (each table's flows catch "
                                        "up) and the maintenance assets; what the Materialize button of their asset "
                                        "pages runs."),
        dg.define_asset_job(MATERIALIZE_DAYS_JOB, selection=partitioned(), partitions_def=partitions,
                            description="Recompute chosen days of silver and gold tables with the batch lane; what the "
                                        "Materialize button of their asset pages runs."),
    ]


def reconcile_range(now: datetime, days: int, first_day: str = "") -> tuple[str, str]:
    """The last `days` daily partitions up to and including today's (UTC), none before `first_day`."""
    today = now.astimezone(timezone.utc).date()
    return max((today - timedelta(days=days - 1)).isoformat(), first_day), today.isoformat()


def build_definitions(settings: Settings, first_day: str | None = None) -> dg.Definitions:
    """Assets topics -> bronze -> silver -> gold, verify checks, the catch-up and backfill jobs, nightly reconciliation.

    Daily partitions start at the lake's first day, or at `first_day` when that is earlier.
    """
    lake_day = first_lake_day(settings.lake_root)
    first_day = min(first_day, lake_day) if first_day else lake_day
    partitions = daily(first_day)
    assets = build_assets(partitions=partitions, lake_root=settings.lake_root)
    backfill_job = dg.define_asset_job(
        BACKFILL_JOB, selection=partitioned(), partitions_def=partitions,
        description="Recompute the chosen days of the silver and gold tables with the batch lane (the streams' own "
                    "transforms over the bounded log) and replace the partitions that differ; one run per range.",
    )
    @dg.schedule(job=backfill_job, cron_schedule=RECONCILE_CRON,
                 execution_timezone="UTC", name=RECONCILE_SCHEDULE,
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description=f"Backfill the last {RECONCILE_DAYS} days' partitions every night, so that late arrivals "
                             "are folded in; the run's metadata says what changed in each table.")
    def nightly_reconciliation(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        start, end = reconcile_range(context.scheduled_execution_time, RECONCILE_DAYS, first_day)
        return dg.RunRequest(
            run_key=f"reconcile-{end}",
            tags={"dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end,
                  "lakehouse/command": "nightly reconciliation"},
        )

    maintenance = build_maintenance(settings)  # compaction and VACUUM, retention checks, their nightly schedule
    quality = build_table_checks()             # accounting identity, references, freshness, their hourly job
    verify_checks = build_checks()             # matches_batch
    return dg.Definitions(
        assets=[*assets, *maintenance["assets"]],
        asset_checks=[*verify_checks, *maintenance["asset_checks"], *quality["asset_checks"],
                      *build_stream_checks()],
        resources=build_resources(settings),
        jobs=[catch_up_job, backfill_job, refresh_job, *maintenance["jobs"], *quality["jobs"], *materialize_jobs(partitions)],
        schedules=[nightly_reconciliation, *maintenance["schedules"], *quality["schedules"]],
        # lakehouse stream reports its tables; this sensor observes topics and the streams' freshness and lag.
        sensors=[build_stream_sensor(), after_updates_sensor([*verify_checks, *quality["asset_checks"]])],
        # One Spark session per run: steps share it instead of each starting a JVM.
        executor=dg.in_process_executor,
    )


def lakehouse_definitions(pipeline: str | None = None, settings: Settings | None = None) -> dg.Definitions:
    """The lakehouse's assets, checks, jobs, schedules, sensors and resources for `pipeline` (a module path, as
    LAKEHOUSE_PIPELINE takes it), to merge into a Dagster code location of your own:
    `defs = dg.Definitions.merge(my_defs, lakehouse_definitions("my_company.pipelines.sensors"))`.

    One pipeline per code location process: the engine reads it from LAKEHOUSE_PIPELINE, which this sets.
    """
    from lakehouse.schemas.pipeline import VARIABLE, load_pipeline

    if pipeline:
        load_pipeline(pipeline)       # a pipeline that cannot load says so here, in one sentence
        os.environ[VARIABLE] = pipeline
    return build_definitions(settings or Settings.from_env())
