"""Asset checks: each table the batch lane can recompute is compared with that recomputation (`lakehouse verify`)."""

from __future__ import annotations

import dagster as dg

from batch.verify import Verdict, describe, verify_flow
from orchestration import served_runs
from orchestration.resources import KafkaResource, LakeResource, SparkResource
from schemas import sources
from schemas.topics import TopicSpec
from streaming import flows as flow_registry
from streaming.flows import Flow

VERIFY_CHECK = "matches_batch"


def _metadata(verdict: Verdict) -> dict[str, object]:
    diff = verdict.diff
    return {
        "status": verdict.status,
        "differing_rows": diff.differences if diff else 0,
        "explained_by_late_arrivals": verdict.explained,
        "real_discrepancies": verdict.real,
        "late_arrivals_unreconciled": verdict.late_events,
        "stream_rows": diff.stream_rows if diff else 0,
        "batch_rows": diff.batch_rows if diff else 0,
        "details": dg.MetadataValue.md("\n".join(["```", *lines, "```"]) if (lines := describe(verdict)) else "none"),
    }


def verify_check(flow: Flow) -> dg.AssetChecksDefinition:
    """The table equals a batch recomputation of its flow, but for rows its late arrivals explain (warned)."""

    @dg.asset_check(asset=flow.asset_name, name=VERIFY_CHECK,
                    description="Compares the table row by row with the batch lane's recomputation of its flow over the "
                                "same log; differences explained by late arrivals warn until a backfill folds them in, "
                                "real discrepancies fail.")
    def _check(context, spark: SparkResource, kafka: KafkaResource, lake: LakeResource) -> dg.AssetCheckResult:
        if (served := served_runs.served_check(context, spark, lake, kafka, flow.asset_name, VERIFY_CHECK)) is not None:
            return served
        return verify_result(spark.session(), flow, lake.flow_context(kafka))

    return _check


def verify_result(session, flow: Flow, ctx) -> dg.AssetCheckResult:
    """The matches_batch check of one table, computed in `session`."""
    verdict = verify_flow(session, flow, ctx)
    if verdict.status == "not built":
        return dg.AssetCheckResult(passed=True, metadata={"status": "not built yet: nothing to compare"})
    return dg.AssetCheckResult(
        passed=verdict.status == "clean",
        severity=dg.AssetCheckSeverity.ERROR if verdict.real else dg.AssetCheckSeverity.WARN,
        metadata=_metadata(verdict),
        description=None if verdict.status == "clean" else
        f"{verdict.real} real discrepancies, {verdict.explained} rows explained by late arrivals",
    )


def build_checks(declared: tuple = sources.SOURCES) -> list[dg.AssetChecksDefinition]:
    """One verify check per table after bronze."""
    return [verify_check(f) for f in flow_registry.build_flows(declared) if not isinstance(f.source, TopicSpec)]
