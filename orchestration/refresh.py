"""The `refresh` job: `lakehouse refresh` from the Dagster UI (the launchpad asks for the table)."""

import dagster as dg
from pydantic import Field

from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session

REFRESH_JOB = "refresh"


class RefreshConfig(dg.Config):
    """Which table to rebuild, and whether the tables that read it are rebuilt with it."""

    table: str = Field(description="The table whose definition changed, e.g. gold_<mart>.")
    downstream: bool = Field(default=False, description="Also rebuild every table that reads it (needed when one "
                                                        "exists: a rewritten table stops the streams that read it).")


@dg.op(name="refresh_table", description="Bring the table's inputs up to date, rebuild it from the whole of them "
                                         "into a shadow, swap it in with one commit, record its new definition and "
                                         "restart its stream from where the rebuild ended.")
def refresh_table(context: dg.OpExecutionContext, config: RefreshConfig, spark: SparkResource, kafka: KafkaResource,
                  lake: LakeResource) -> None:
    """Rebuild a table whose definition changed from the retained log, and record a materialization of each rebuilt."""
    from lakehouse.batch.refresh import refresh

    done = refresh(run_session(context, spark), lake.flow_context(kafka), config.table, downstream=config.downstream)
    for r in done.replayed:
        how = done.changes.get(r.table) or ["its definition is unchanged"]
        context.log.info(f"{r.table}: {'; '.join(how)}; rebuilt with {r.rows} rows, swapped in at version "
                         f"{r.swapped_version}")
        context.log_event(dg.AssetMaterialization(asset_key=r.table, description="Refreshed: " + "; ".join(how), metadata={
            "refreshed_because": dg.MetadataValue.text("; ".join(how)),
            "rows": dg.MetadataValue.int(r.rows),
            "delta_version": dg.MetadataValue.int(r.swapped_version or 0),
            "version_before": dg.MetadataValue.int(done.versions_before.get(r.table) or 0),
            "stream_resumes_from": dg.MetadataValue.json(r.positions),
        }))


@dg.job(name=REFRESH_JOB, description="Rebuild a table whose definition changed (a source added, a column, a "
                                      "transform, a window size) from the retained log, as `lakehouse refresh` does.")
def refresh_job() -> None:
    refresh_table()
