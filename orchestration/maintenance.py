"""Dagster: table maintenance (compaction, VACUUM) on a nightly schedule, and the retention-policy checks.

Two assets in the group `maintenance`, each covering every table, rather than one per table or per layer:
maintenance is one pass over the lake, and a single asset with a per-table metadata table shows the whole
lake's files before and after in one place (its plots over runs are the lake's totals), while thirty more
nodes would bury the data lineage. `vacuum` follows `compaction`, so one run compacts, then deletes what
is past the window.

Checks: `covers_replay_window` on each topic asset (a topic's retention is a property of the topic, and
that is where its `matches_spec` check already is), and `tables_cover_replay_window` on `vacuum` (a table's
deleted-file retention is exactly what VACUUM obeys; one check reads every table's properties at once).
`lakehouse doctor` runs the same decisions from the command line.
"""


from typing import Sequence

import dagster as dg

from lakehouse.batch.maintenance import Compaction, Vacuum, compact_tables, table_findings, topic_findings, vacuum_tables
from lakehouse.infra.retention import Finding, duration_ms
from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import topic_key
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session
from lakehouse.schemas import sources, tables
from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec

GROUP = "maintenance"
JOB = "maintenance"
SCHEDULE = "nightly_maintenance"
TOPIC_RETENTION_CHECK = "covers_replay_window"
TABLE_RETENTION_CHECK = "tables_cover_replay_window"

# Runs that may be writing tables right now (a maintenance run itself writes none with a stream).
_IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _writers_in_dagster(context: dg.AssetExecutionContext):
    """A `busy` function: an in-progress Dagster run (not a maintenance run) that may rewrite a table, if any.

    Any such run counts for every table it might touch indirectly: a catch-up runs every flow, and a backfill
    also updates late_arrivals, which is not in its asset selection. Only rewritten tables ask (see
    batch.maintenance), so appended tables are compacted regardless.
    """
    runs = [r for r in context.instance.get_runs(filters=dg.RunsFilter(statuses=_IN_PROGRESS))
            if r.run_id != context.run_id and r.job_name != JOB]

    def busy(spec: TableSpec) -> str | None:
        if runs:
            return f"run {runs[0].run_id[:8]} of job {runs[0].job_name} is in progress and may be writing it"
        return None

    return busy


_COMPACTION_COLUMNS = (
    ("table", "string"), ("layer", "string"), ("status", "string"), ("files_before", "int"), ("files_after", "int"),
    ("bytes_before", "int"), ("bytes_after", "int"), ("files_removed", "int"), ("files_added", "int"),
    ("zorder_by", "string"), ("duration_s", "float"), ("reason", "string"),
)
_VACUUM_COLUMNS = (
    ("table", "string"), ("layer", "string"), ("status", "string"), ("retention", "string"),
    ("files_deleted", "int"), ("bytes_deleted", "int"), ("live_files", "int"), ("duration_s", "float"),
    ("reason", "string"),
)


def _table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table(
        records=[dg.TableRecord({name: row[name] for name, _ in columns}) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns]),
    )


def compaction_metadata(results: Sequence[Compaction]) -> dict[str, object]:
    done = [r for r in results if r.status == "compacted"]
    return {
        "tables": _table([r.row() for r in results], _COMPACTION_COLUMNS),
        "per_table": dg.MetadataValue.json({r.table: r.row() for r in results}),
        "files_before": sum(r.files_before for r in results),
        "files_after": sum(r.files_after for r in results),
        "bytes_before": sum(r.bytes_before for r in results),
        "bytes_after": sum(r.bytes_after for r in results),
        "files_removed": sum(r.files_removed for r in done),
        "files_added": sum(r.files_added for r in done),
        "tables_compacted": len(done),
        "tables_skipped": sum(1 for r in results if r.status == "skipped"),
        "tables_failed": sum(1 for r in results if r.status == "failed"),
        "duration_s": round(sum(r.duration_s for r in results), 2),
    }


def vacuum_metadata(results: Sequence[Vacuum], window: str) -> dict[str, object]:
    return {
        "tables": _table([r.row() for r in results], _VACUUM_COLUMNS),
        "per_table": dg.MetadataValue.json({r.table: r.row() for r in results}),
        "replay_window": window,
        "files_deleted": sum(r.files_deleted for r in results),
        "bytes_deleted": sum(r.bytes_deleted for r in results),
        "tables_vacuumed": sum(1 for r in results if r.status == "vacuumed"),
        "tables_skipped": sum(1 for r in results if r.status == "skipped"),
        "tables_failed": sum(1 for r in results if r.status == "failed"),
        "duration_s": round(sum(r.duration_s for r in results), 2),
    }


def _fail_if_any(kind: str, results: Sequence[Compaction | Vacuum], metadata: dict[str, object]) -> None:
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise dg.Failure(
            description=f"{kind} failed for {', '.join(r.table for r in failed)}: "
                        + "; ".join(f"{r.table}: {r.reason}" for r in failed),
            metadata=metadata,
        )


def _log_skips(context: dg.AssetExecutionContext, results: Sequence[Compaction | Vacuum]) -> None:
    for r in results:
        if r.status == "skipped":
            context.log.info(f"{r.table} skipped: {r.reason}")


def compaction_asset(specs: Sequence[TableSpec]) -> dg.AssetsDefinition:
    @dg.asset(
        name="compaction", group_name=GROUP, kinds={"delta", "spark"},
        description="OPTIMIZE every table: small files bin-packed into large ones, gold tables Z-ordered by the "
                    "columns their queries filter on. Safe while streams append (OPTIMIZE changes no data, so "
                    "stream readers skip it); a table rewritten in place by MERGE is left for the next run while "
                    "its writer runs. Metadata: files and bytes per table before and after.",
        metadata={"covers": ", ".join(s.name for s in specs)},
    )
    def compaction(context: dg.AssetExecutionContext, spark: SparkResource, lake: LakeResource) -> dg.MaterializeResult:
        results = compact_tables(run_session(context, spark), specs, lake.root, busy=_writers_in_dagster(context))
        _log_skips(context, results)
        metadata = compaction_metadata(results)
        _fail_if_any("OPTIMIZE", results, metadata)
        return dg.MaterializeResult(metadata=metadata)

    return compaction


def _findings_metadata(findings: Sequence[Finding]) -> dict[str, object]:
    return {
        "findings": dg.MetadataValue.json([
            {"name": f.name, "setting": f.setting, "live": f.live, "needed": f.needed, "status": f.status}
            for f in findings
        ]),
        "problems": dg.MetadataValue.md("\n".join(f"- {f.problem}" for f in findings if f.failed) or "none"),
    }


def vacuum_asset(specs: Sequence[TableSpec]) -> dg.AssetsDefinition:
    @dg.asset(
        name="vacuum", group_name=GROUP, kinds={"delta", "spark"}, deps=["compaction"],
        description="VACUUM every table: delete the files no version inside the replay window "
                    "(LAKEHOUSE_REPLAY_WINDOW) references, by the table's own delta.deletedFileRetentionDuration, "
                    "which every table is created with. A table whose retention is shorter than the window is "
                    "skipped and its check says how to fix it.",
        metadata={"covers": ", ".join(s.name for s in specs)},
    )
    def vacuum(context: dg.AssetExecutionContext, spark: SparkResource, lake: LakeResource) -> dg.MaterializeResult:
        results = vacuum_tables(run_session(context, spark), specs, lake.root, window_ms=duration_ms(lake.replay_window))
        _log_skips(context, results)
        metadata = vacuum_metadata(results, lake.replay_window)
        _fail_if_any("VACUUM", results, metadata)
        return dg.MaterializeResult(metadata=metadata)

    return vacuum


def table_retention_check(specs: Sequence[TableSpec]) -> dg.AssetChecksDefinition:
    """`tables_cover_replay_window` on `vacuum`: runs after it in the nightly job, or alone from the UI."""

    @dg.asset_check(
        asset="vacuum", name=TABLE_RETENTION_CHECK,
        description="Every table's delta.deletedFileRetentionDuration (what VACUUM keeps) and "
                    "delta.logRetentionDuration (time travel, where a stopped stream resumes) cover the replay "
                    "window (LAKEHOUSE_REPLAY_WINDOW); a table not created yet passes.",
    )
    def _check(spark: SparkResource, lake: LakeResource) -> dg.AssetCheckResult:
        findings = table_findings(spark.session(), specs, lake.root, lake.replay_window)
        failed = [f for f in findings if f.failed]
        return dg.AssetCheckResult(
            passed=not failed, severity=dg.AssetCheckSeverity.ERROR,
            metadata={**_findings_metadata(findings), "replay_window": lake.replay_window},
            description=" ".join(f.problem for f in failed) or None,
        )

    return _check


def topic_retention_checks(specs: Sequence[TopicSpec]) -> dg.AssetChecksDefinition:
    """`covers_replay_window` on every topic asset, evaluated with one describe of the live topics."""

    @dg.multi_asset_check(
        name="topics_cover_replay_window",
        specs=[dg.AssetCheckSpec(
            TOPIC_RETENTION_CHECK, asset=topic_key(s),
            description="The live topic keeps records at least the replay window (LAKEHOUSE_REPLAY_WINDOW): "
                        "retention.ms, and no retention.bytes limit; a compacted changelog passes.",
        ) for s in specs],
        can_subset=True,
    )
    def _checks(context: dg.AssetCheckExecutionContext, kafka: KafkaResource, lake: LakeResource):
        wanted = {key.asset_key for key in context.selected_asset_check_keys}
        chosen = [s for s in specs if topic_key(s) in wanted]
        findings = topic_findings(kafka.bootstrap_servers, chosen, lake.replay_window)
        for spec in chosen:
            mine = [f for f in findings if f.name == spec.name]
            failed = [f for f in mine if f.failed]
            absent = all(f.status == "absent" for f in mine)
            yield dg.AssetCheckResult(
                asset_key=topic_key(spec), check_name=TOPIC_RETENTION_CHECK, passed=not failed,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={**_findings_metadata(mine), "replay_window": lake.replay_window},
                description=" ".join(f.problem for f in failed) or ("the topic does not exist yet" if absent else None),
            )

    return _checks


def build_maintenance(settings: Settings, specs: Sequence[TableSpec] | None = None,
                      topic_specs: Sequence[TopicSpec] | None = None) -> dict[str, list]:
    """The maintenance assets, the topic checks, the maintenance job and its nightly schedule."""
    specs = tuple(specs if specs is not None else tables.all_tables(sources.SOURCES))
    topic_specs = tuple(topic_specs if topic_specs is not None else (s.topic_spec for s in sources.SOURCES))
    topic_checks = topic_retention_checks(topic_specs)
    job = dg.define_asset_job(
        JOB, selection=dg.AssetSelection.groups(GROUP) | dg.AssetSelection.checks(topic_checks),
        description="Compact every table, VACUUM what is past the replay window, and check that topics and "
                    "tables keep at least the replay window.",
    )
    schedule = dg.ScheduleDefinition(
        name=SCHEDULE, job=job, cron_schedule=settings.maintenance_cron, execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        tags={"lakehouse/command": "nightly maintenance"},
        description=f"Compaction, VACUUM and the retention checks at {settings.maintenance_cron!r} (UTC; "
                    "LAKEHOUSE_MAINTENANCE_CRON).",
    )
    return {
        "assets": [compaction_asset(specs), vacuum_asset(specs)],
        "asset_checks": [topic_checks, table_retention_check(specs)],
        "jobs": [job],
        "schedules": [schedule],
    }


# ---------------------------------------------------------------- lakehouse doctor

def _tables_present(lake_root: str, specs: Sequence[TableSpec]) -> bool:
    """Whether any table may exist (a local lake is looked at directly, so doctor starts no Spark for an empty one)."""
    if "://" in lake_root and not lake_root.startswith("file:"):
        return True
    from pathlib import Path

    root = lake_root.removeprefix("file://").removeprefix("file:")
    return any((Path(spec.path(root)) / "_delta_log").is_dir() for spec in specs)


def doctor_findings(settings: Settings) -> list[Finding]:
    """Every retention the replay window depends on, from the live broker and tables (what doctor prints)."""
    from lakehouse.batch.maintenance import retention_findings, topic_findings
    from lakehouse.infra.retention import check_session_defaults, check_table, table_defaults
    from lakehouse.infra.spark import get_spark
    from lakehouse.streaming.kafka_topics import KafkaUnreachable

    specs = tables.all_tables(sources.SOURCES)
    topic_specs = [s.topic_spec for s in sources.SOURCES]
    window = settings.replay_window
    try:
        topic_part = topic_findings(settings.kafka_bootstrap, topic_specs, window)
    except KafkaUnreachable as exc:
        topic_part = [Finding("topic", "(every topic)", "retention.ms", "broker unreachable", f">= {window}", "FAIL",
                              f"{exc} Topics cannot be checked until it answers.")]
    session_conf = {**table_defaults(window), **settings.spark_conf}   # what infra.spark gives new tables
    if not _tables_present(settings.lake_root, specs):
        return [*topic_part, *check_session_defaults(session_conf, window),
                *(f for s in specs for f in check_table(s.name, s.path(settings.lake_root), None, window))]
    spark = get_spark(settings, "lakehouse-doctor")
    return [*topic_part, *retention_findings(spark, bootstrap=settings.kafka_bootstrap, lake_root=settings.lake_root,
                                             window=window, topics=[], tables=specs, session_conf=session_conf)]
