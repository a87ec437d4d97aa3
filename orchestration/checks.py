"""Asset checks: each table the batch lane can recompute is compared with that recomputation (`lakehouse verify`)."""

from __future__ import annotations

import dagster as dg

from lakehouse.batch.verify import Verdict, describe, verify_flow
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session, served_check
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.flows import Flow

VERIFY_CHECK = "matches_batch"
# Requested when the table has been updated since the check last ran and no run of the check is under way (the
# sensor in orchestration/quality_checks.py evaluates it). Days of a daily-partitioned table that hold no events are
# "missing" and must not keep the check from running.
AFTER_UPDATES = dg.AutomationCondition.eager().without(~dg.AutomationCondition.any_deps_missing())


def verdict_record(verdict: Verdict) -> dict[str, object]:
    """What the matches_batch check reports about a verdict, as plain values (a materialization can carry them)."""
    diff = verdict.diff
    return {
        "status": verdict.status,
        "differing_rows": diff.differences if diff else 0,
        "explained_by_late_arrivals": verdict.explained,
        "real_discrepancies": verdict.real,
        "late_arrivals_unreconciled": verdict.late_events,
        "stream_rows": diff.stream_rows if diff else 0,
        "batch_rows": diff.batch_rows if diff else 0,
        "details": "\n".join(describe(verdict)),
    }


def check_result(record: dict, **more: object) -> dg.AssetCheckResult:
    """The matches_batch result of a `verdict_record`, with `more` metadata."""
    if record["status"] == "not built":
        return dg.AssetCheckResult(passed=True, metadata={"status": "not built yet: nothing to compare", **more})
    details = str(record["details"])
    return dg.AssetCheckResult(
        passed=record["status"] == "clean",
        severity=dg.AssetCheckSeverity.ERROR if record["real_discrepancies"] else dg.AssetCheckSeverity.WARN,
        metadata={**record, **more, "details": dg.MetadataValue.md(f"```\n{details}\n```" if details else "none")},
        description=None if record["status"] == "clean" else
        f"{record['real_discrepancies']} real discrepancies, {record['explained_by_late_arrivals']} rows explained "
        "by late arrivals",
    )


def from_this_run(context, asset: str) -> dg.AssetCheckResult | None:
    """The verdict this run's backfill of `asset` computed after its write, if it did: no second recomputation."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey(asset))
    if event is None or event.run_id != context.run.run_id or event.asset_materialization is None:
        return None
    entry = event.asset_materialization.metadata.get(VERIFY_CHECK)
    if entry is None or not isinstance(entry.value, dict):
        return None
    record = dict(entry.value)
    version = record.pop("delta_version", None)
    context.log.info(f"{VERIFY_CHECK}: the verdict this run's backfill step computed after its write, from the same "
                     "recomputation of the flow (not made a second time)")
    return check_result(record, verified_at_delta_version=-1 if version is None else int(version),
                        verified_by="this run's backfill step")


def verify_check(flow: Flow) -> dg.AssetChecksDefinition:
    """The table equals a batch recomputation of its flow, but for rows its late arrivals explain (warned)."""

    @dg.asset_check(asset=flow.asset_name, name=VERIFY_CHECK, automation_condition=AFTER_UPDATES,
                    description="Compares the table row by row with the batch lane's recomputation of its flow over the "
                                "same log; differences explained by late arrivals warn until a backfill folds them in, "
                                "real discrepancies fail.")
    def _check(context, spark: SparkResource, kafka: KafkaResource, lake: LakeResource) -> dg.AssetCheckResult:
        if (reused := from_this_run(context, flow.asset_name)) is not None:
            return reused
        if (served := served_check(context, spark, lake, kafka, flow.asset_name, VERIFY_CHECK)) is not None:
            return served
        return verify_result(run_session(context, spark), flow, lake.flow_context(kafka))

    return _check


def verify_result(session, flow: Flow, ctx) -> dg.AssetCheckResult:
    """The matches_batch check of one table, computed in `session`."""
    return check_result(verdict_record(verify_flow(session, flow, ctx)))


def build_checks(declared: tuple | None = None) -> list[dg.AssetChecksDefinition]:
    """One verify check per table after bronze."""
    return [verify_check(f) for f in flow_registry.build_flows(declared) if not isinstance(f.source, TopicSpec)]
