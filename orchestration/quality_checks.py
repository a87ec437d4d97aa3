"""Whole-table quality rules as Dagster asset checks: accounting identity, references between tables, freshness.

They read whole tables, so they are not run inside every batch: each runs after its table changes (the
sensor `table_checks_after_updates` evaluates their automation condition, at most every five minutes), the job
`quality_checks` runs them all (hourly by its schedule, or from the UI), and `lakehouse quality report` prints them.
"""

from __future__ import annotations

from typing import Callable

import dagster as dg

from lakehouse.orchestration.checks import AFTER_UPDATES
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session, served_check
from lakehouse.quality.table_checks import TableCheck, freshness, gold_accounting, references, silver_accounting
from lakehouse.schemas import tables
from lakehouse.schemas.pipeline import active_pipeline

JOB = "quality_checks"
AUTOMATION_SENSOR = "table_checks_after_updates"
SCHEDULE = "hourly_quality_checks"
FRESHNESS_S = 24 * 3600     # a table whose newest event is older than a day warns


def table_checks(spark, lake_root: str, declared: tuple | None = None) -> list[TableCheck]:
    """Every whole-table rule over the lake, in table order (those whose tables exist)."""
    pipeline = active_pipeline()
    declared = pipeline.sources if declared is None else declared
    found = [silver_accounting(spark, s, lake_root) for s in declared]
    found += [gold_accounting(spark, t, lake_root, counts) for t, counts in pipeline.gold_counts.items()]
    found += [references(spark, rule, lake_root) for rule in pipeline.references]
    specs = [s.silver_table for s in declared] + list(tables.GOLD)
    found += [freshness(spark, spec, lake_root, FRESHNESS_S) for spec in specs]
    return [c for c in found if c is not None]


Compute = Callable[[object, str], TableCheck | None]


def rules(declared: tuple | None = None) -> dict[tuple[str, str], tuple[str, Compute]]:
    """(asset, check name) -> (description, what computes it from a session and the lake root)."""
    pipeline = active_pipeline()
    declared = pipeline.sources if declared is None else declared
    found: dict[tuple[str, str], tuple[str, Compute]] = {}
    for s in declared:
        found[(s.silver_table.name, "accounting")] = (
            "Every bronze record is in silver, quarantine, late arrivals or a duplicate of a silver event "
            "(bronze = silver + quarantine + late arrivals + duplicates, record by record).",
            lambda spark, root, s=s: silver_accounting(spark, s, root))
    names = {s.silver_table.name for s in declared}
    for table, counts in pipeline.gold_counts.items():
        if counts[0] in names:
            found[(table, "accounting")] = (
                f"Every {counts[0]} event is counted in {table} or listed among its unreconciled late arrivals "
                "(silver = counted + late arrivals).",
                lambda spark, root, t=table, c=counts: gold_accounting(spark, t, root, c))
    for rule in pipeline.references:
        if {rule.child, rule.parent} <= names:
            found[(rule.child, "references")] = (
                rule.description, lambda spark, root, rule=rule: references(spark, rule, root))
    for spec in [s.silver_table for s in declared] + list(tables.GOLD):
        found[(spec.name, "freshness")] = ("The newest event in the table is at most a day old (warns).",
                                           lambda spark, root, spec=spec: freshness(spark, spec, root, FRESHNESS_S))
    return found


def rule_result(session, lake_root: str, compute: Compute) -> dg.AssetCheckResult:
    """One whole-table rule's check result, computed in `session`."""
    found = compute(session, lake_root)
    if found is None:
        return dg.AssetCheckResult(passed=True, description="the table does not exist yet: nothing to check")
    return dg.AssetCheckResult(
        passed=found.passed, description=found.description,
        severity=dg.AssetCheckSeverity.ERROR if found.severity == "fail" else dg.AssetCheckSeverity.WARN,
        metadata={k: v for k, v in found.figures.items() if isinstance(v, (int, float, str))})


def _check(asset: str, name: str, description: str, compute: Compute) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset, name=name, description=description, automation_condition=AFTER_UPDATES)
    def _run(context, spark: SparkResource, kafka: KafkaResource, lake: LakeResource) -> dg.AssetCheckResult:
        if (served := served_check(context, spark, lake, kafka, asset, name)) is not None:
            return served
        return rule_result(run_session(context, spark), lake.root, compute)

    return _run


def build_table_checks(declared: tuple | None = None) -> dict[str, list]:
    """The asset checks, their job, its hourly schedule, and the sensor that runs each check after its table changed."""
    checks = [_check(asset, name, description, compute)
              for (asset, name), (description, compute) in rules(declared).items()]
    job = dg.define_asset_job(JOB, selection=dg.AssetSelection.checks(*checks),
                              description="The whole-table quality rules: accounting identity, references, freshness.")
    schedule = dg.ScheduleDefinition(name=SCHEDULE, job=job, cron_schedule="15 * * * *", execution_timezone="UTC",
                                     default_status=dg.DefaultScheduleStatus.RUNNING,
                                     tags={"lakehouse/command": "hourly quality checks"},
                                     description="The whole-table quality rules every hour.")
    return {"asset_checks": checks, "jobs": [job], "schedules": [schedule]}


def after_updates_sensor(checks: list) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the checks' automation conditions (AFTER_UPDATES): a check runs after its table's materialization."""
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR, target=dg.AssetSelection.checks(*checks), default_status=dg.DefaultSensorStatus.RUNNING,
        # A stream reports its tables every few seconds, and a run of checks starts a JVM unless lakehouse serve is
        # up (10-40 s of a core): at most one every five minutes leaves a 2-core machine to the stream.
        minimum_interval_seconds=300,
        description="Runs each table check after its table changed (a materialization, a backfill, a stream's "
                    "report), at most every five minutes.")
