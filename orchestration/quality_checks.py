"""Whole-table quality rules as Dagster asset checks: accounting identity, payment references, freshness.

They read whole tables, so they are not run inside every batch: the job `quality_checks` runs them
(hourly by its schedule, or from the UI), and `lakehouse quality report` prints them.
"""

from __future__ import annotations

from typing import Callable

import dagster as dg

from lakehouse.orchestration import served_runs
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.quality.table_checks import GOLD_COUNTS, TableCheck, freshness, gold_accounting, payment_references, silver_accounting
from lakehouse.schemas import sources, tables

JOB = "quality_checks"
SCHEDULE = "hourly_quality_checks"
FRESHNESS_S = 24 * 3600     # a table whose newest event is older than a day warns


def table_checks(spark, lake_root: str, declared: tuple = sources.SOURCES) -> list[TableCheck]:
    """Every whole-table rule over the lake, in table order (those whose tables exist)."""
    found = [silver_accounting(spark, s, lake_root) for s in declared]
    found += [gold_accounting(spark, t, lake_root) for t in GOLD_COUNTS]
    found.append(payment_references(spark, lake_root))
    specs = [s.silver_table for s in declared] + list(tables.GOLD)
    found += [freshness(spark, spec, lake_root, FRESHNESS_S) for spec in specs]
    return [c for c in found if c is not None]


Compute = Callable[[object, str], TableCheck | None]


def rules(declared: tuple = sources.SOURCES) -> dict[tuple[str, str], tuple[str, Compute]]:
    """(asset, check name) -> (description, what computes it from a session and the lake root)."""
    found: dict[tuple[str, str], tuple[str, Compute]] = {}
    for s in declared:
        found[(s.silver_table.name, "accounting")] = (
            "Every bronze record is in silver, quarantine, late arrivals or a duplicate of a silver event "
            "(bronze = silver + quarantine + late arrivals + duplicates, record by record).",
            lambda spark, root, s=s: silver_accounting(spark, s, root))
    names = {s.silver_table.name for s in declared}
    for table, (silver, _, _) in GOLD_COUNTS.items():
        if silver in names:
            found[(table, "accounting")] = (
                f"Every {silver} event is counted in {table} or listed among its unreconciled late arrivals "
                "(silver = counted + late arrivals).",
                lambda spark, root, t=table: gold_accounting(spark, t, root))
    if {"silver_payments", "silver_orders"} <= names:
        found[("silver_payments", "references")] = (
            "Every payment refers to an order silver_orders holds (warns: a payment may arrive before its order).",
            payment_references)
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
    @dg.asset_check(asset=asset, name=name, description=description)
    def _run(context, spark: SparkResource, kafka: KafkaResource, lake: LakeResource) -> dg.AssetCheckResult:
        if (served := served_runs.served_check(context, spark, lake, kafka, asset, name)) is not None:
            return served
        return rule_result(spark.session(), lake.root, compute)

    return _run


def build_table_checks(declared: tuple = sources.SOURCES) -> dict[str, list]:
    """The asset checks, their job and its hourly schedule."""
    checks = [_check(asset, name, description, compute)
              for (asset, name), (description, compute) in rules(declared).items()]
    job = dg.define_asset_job(JOB, selection=dg.AssetSelection.checks(*checks),
                              description="The whole-table quality rules: accounting identity, references, freshness.")
    schedule = dg.ScheduleDefinition(name=SCHEDULE, job=job, cron_schedule="15 * * * *", execution_timezone="UTC",
                                     default_status=dg.DefaultScheduleStatus.RUNNING,
                                     tags={"lakehouse/command": "hourly quality checks"},
                                     description="The whole-table quality rules every hour.")
    return {"asset_checks": checks, "jobs": [job], "schedules": [schedule]}
