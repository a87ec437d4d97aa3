"""Asset factories: one asset per Kafka topic spec and one per Delta table, built from the specs and flows."""

import warnings
from datetime import date, datetime, timezone
from typing import Iterator

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.batch.backfill import TableChange, backfill_flow
from lakehouse.batch.catalog import read_table
from lakehouse.infra.retention import duration_ms
from lakehouse.serving import remote_runs
from lakehouse.orchestration.checks import VERIFY_CHECK, verdict_record
from lakehouse.orchestration.partitions import daily, is_partitioned, key_range
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session, served
from lakehouse.quality.gate import QualityBreach
from lakehouse.quality.suites import suite_tables
from lakehouse.schemas import sources
from lakehouse.schemas.gold import IntervalJoin, Sessions, Windowed
from lakehouse.schemas.pipeline import active_pipeline
from lakehouse.schemas.sources import LINEAGE_DOCS, Source
from lakehouse.schemas.tables import LATE_ARRIVALS, QUARANTINE, TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.fingerprints import DefinitionChanged
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.kafka_topics import KafkaUnreachable, TopicStatus, TopicsMissing, ensure_topics
from lakehouse.streaming.runner import CheckpointUnusable, FlowRun, QualityStopped, first_line, run_flow, table_version
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.delta_files import table_columns, type_name
from lakehouse.streaming.table_stats import counts_by, file_stats, row_count, time_range as stats_time_range

TOPIC_CHECK = "matches_spec"
QUALITY_CHECK = "expectations"
# A fail rule's breach: raised as is by the batch lane, re-raised by run_flow from inside a streaming query.
QUALITY_STOPS = (QualityBreach, QualityStopped)
# Errors whose message is already the product's sentence for the user.
SENTENCES = (KafkaUnreachable, TopicsMissing, CheckpointUnusable)

# A range backfill must be one run (one bounded read per table, not one per day); Dagster still
# calls the parameter that says so beta and would warn once per asset on every load.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)


def topic_key(spec: TopicSpec) -> dg.AssetKey:
    return dg.AssetKey(["kafka", spec.asset_name])


def source_key(source: TopicSpec | TableSpec) -> dg.AssetKey:
    return topic_key(source) if isinstance(source, TopicSpec) else dg.AssetKey(source.name)


def _topic_metadata(status: TopicStatus) -> dict[str, object]:
    return {
        "topic": status.name,
        "created_now": status.created,
        "partitions": status.partitions,
        "retained_records": status.messages,
        "end_offsets": dg.MetadataValue.json({str(p): o for p, o in status.end_offsets.items()}),
        "config": dg.MetadataValue.json(status.config),
    }


def topic_asset(spec: TopicSpec) -> dg.AssetsDefinition:
    key = topic_key(spec)

    @dg.asset(
        key=key,
        group_name="kafka",
        kinds={"kafka"},
        description=f"Kafka topic {spec.name}: {spec.description}",
        metadata={
            "spec_partitions": spec.partitions,
            "key": spec.key_field,
            "schema": spec.schema.name,
            "spec_config": dg.MetadataValue.json(spec.config()),
        },
        check_specs=[dg.AssetCheckSpec(TOPIC_CHECK, asset=key, description="Live topic config equals its spec.")],
    )
    def _topic(context: dg.AssetExecutionContext, kafka: KafkaResource, lake: LakeResource) -> dg.MaterializeResult:
        """Create the topic from its spec if missing; report drift of an existing topic instead of altering it."""
        status = ensure_topics(kafka.bootstrap_servers, [spec], replication_factor=kafka.replication_factor,
                               replay_window_ms=duration_ms(lake.replay_window))[0]
        if status.drift:
            context.log.warning(f"{spec.name} differs from its spec: {status.drift}")
        return dg.MaterializeResult(
            metadata=_topic_metadata(status),
            check_results=[
                dg.AssetCheckResult(
                    check_name=TOPIC_CHECK,
                    passed=not status.drift,
                    severity=dg.AssetCheckSeverity.WARN,
                    metadata={"drift": dg.MetadataValue.json(status.drift)},
                )
            ],
        )

    return _topic


def _column_schema(df: DataFrame, docs: dict[str, str]) -> dg.TableSchema:
    return dg.TableSchema(columns=[
        dg.TableColumn(f.name, f.dataType.simpleString(), description=docs.get(f.name)) for f in df.schema.fields
    ])


def _table_metadata(main: FlowRun, table_df: DataFrame, path: str, docs: dict[str, str],
                    time_range: tuple[str, str] | None = None) -> dict[str, object]:
    """The run's figures and the table's rows and columns; `time_range`: also the event time it covers."""
    rows, first, last = _rows_and_range(table_df, path, time_range)
    metadata: dict[str, object] = {
        "rows_written": main.rows_written,
        "input_rows": main.input_rows,
        "micro_batches": main.batches,
        "delta_version": main.delta_version if main.delta_version is not None else -1,
        "duration_s": main.duration_s,
        "path": dg.MetadataValue.path(path),
        "dagster/row_count": rows,
        "dagster/column_schema": _column_schema(table_df, docs),
    }
    if first is not None:
        metadata.update({"event_time_from": _shown(first), "event_time_to": _shown(last)})
    if main.kafka_offsets:
        metadata["kafka_offsets"] = dg.MetadataValue.json(main.kafka_offsets)
        metadata["records_consumed"] = sum(r["count"] for r in main.kafka_offsets.values())
    if (split := main.silver) is not None:
        # Every bronze record read lands in exactly one of these: the identity the demo prints.
        metadata["quarantined"] = split.quarantined
        metadata["late_arrivals"] = split.late
        metadata["duplicates_dropped"] = split.duplicates
        metadata["quarantine_reasons"] = dg.MetadataValue.json(dict(sorted(split.reasons.items())))
        if split.watermark:
            metadata["dedup_watermark"] = split.watermark
    if (gold := main.gold) is not None:
        metadata["late_arrivals"] = gold.late
        metadata["watermark"] = gold.watermark or "none yet (no event read)"
        if gold.state_rows is not None:
            metadata["state_rows"] = gold.state_rows
    if main.commits:
        metadata["delta_commits_this_run"] = dg.MetadataValue.json(main.commits)
    return metadata


def _rows_and_range(table_df: DataFrame, path: str, time_range: tuple[str, str] | None) -> tuple[int, object, object]:
    """The table's rows and the least and greatest of its time columns: from its files' statistics when its checksum
    lists them, else from one aggregation (a query each would plan and run its own Spark jobs)."""
    spark = table_df.sparkSession
    stats = file_stats(spark, path)
    span = (None, None) if time_range is None or stats is None else stats_time_range(stats, *time_range)
    if stats is not None and span is not None:
        return row_count(stats), span[0], span[1]
    figures = [F.count(F.lit(1)).alias("rows")]
    if time_range is not None:
        figures += [F.min(time_range[0]).alias("first"), F.max(time_range[1]).alias("last")]
    totals = table_df.agg(*figures).first()
    return totals["rows"], totals["first"] if time_range else None, totals["last"] if time_range else None


def _shown(when: object) -> str:
    """An event time as metadata shows it: UTC to the millisecond (Delta's statistics keep no finer)."""
    if isinstance(when, datetime):
        return when.astimezone(timezone.utc).isoformat(sep=" ", timespec="milliseconds")
    return str(when)


def _counts_by(spark, path: str, by: tuple[str, ...], where: tuple[str, str] | None = None) -> dict[tuple, int]:
    """The table's rows by the values of `by` (only those whose `where` column holds the given value): from its
    files' statistics when they say, else from a Spark job."""
    columns = by + ((where[0],) if where else ())
    stats = file_stats(spark, path)
    counts = counts_by(stats, columns) if stats is not None else None
    if counts is not None:
        return {key[:len(by)]: rows for key, rows in counts.items() if where is None or key[-1] == where[1]}
    df = spark.read.format("delta").load(path)
    if where is not None:
        df = df.where(F.col(where[0]) == where[1])
    return {tuple(row[:-1]): row[-1] for row in df.groupBy(*by).count().collect()}


def _late_total(spark, flow: Flow, lake_root: str) -> dict[str, object]:
    """Rows this flow has ever sent to late_arrivals (the run's own count is `late_arrivals`)."""
    path = LATE_ARRIVALS.path(lake_root)
    if not has_delta_log(spark, path):
        return {"late_arrivals_total": 0}
    return {"late_arrivals_total": sum(_counts_by(spark, path, (), ("flow", flow.name)).values())}


def caught_up_metadata(context_log, session, main: Flow, run: FlowRun, ctx, docs: dict[str, str]) -> dict[str, object]:
    """What a catch-up run of a flow did, as asset metadata; observations of the side tables it wrote are logged."""
    if not has_delta_log(session, main.target.path(ctx.lake_root)):
        waiting = ", ".join(run.waiting_for) or main.target.name
        context_log.info(f"{main.target.name} is not created yet: {waiting} has no rows so far")
        return {"rows_written": 0, "dagster/row_count": 0,
                "waiting_for": f"{waiting} has no rows yet; the table is created by the first batch that has some"}
    table_df = read_table(session, main.target, ctx.lake_root)
    metadata = _table_metadata(run, table_df, main.target.path(ctx.lake_root), docs,
                               main.target.time_range if run.gold is not None else None)
    if run.gold is not None:
        metadata.update(_late_total(session, main, ctx.lake_root))
    return metadata


def side_events(session, flows: list[Flow], ctx, runs: list[FlowRun]) -> list[dg.AssetMaterialization | dg.AssetObservation]:
    """The breakdown of each shared table (quarantine, late arrivals) the flows also write: a materialization when
    `runs` added rows to it, else an observation of it as it stands."""
    sides = {side.name: side for flow in flows for side in flow.also_writes}
    written = written_sides(runs)
    return [(dg.AssetMaterialization if side.name in written else dg.AssetObservation)(side.name, metadata=observed)
            for side in sides.values() if (observed := _side_table_metadata(session, side, ctx.lake_root)) is not None]


def written_sides(runs: list[FlowRun]) -> set[str]:
    """The shared tables these flow runs appended rows to."""
    written = set()
    for run in runs:
        if run.silver is not None and run.silver.quarantined:
            written.add(QUARANTINE.name)
        if any(part is not None and part.late for part in (run.silver, run.gold)):
            written.add(LATE_ARRIVALS.name)
    return written


def _description(main: Flow) -> str:
    # A gold flow's doc is its declaration's description, the table's own: said once, not twice.
    how = f" ({main.doc})" if main.doc != main.target.description else ""
    return (f"{main.target.description}{how}"
            + (f" Answers: {main.target.question}" if main.target.question else ""))


def validations_of(ctx, table: str) -> list:
    """The validations of `table` the context's gate made (one gate per run, one flow per table)."""
    return [v for v in (ctx.quality.history if ctx.quality else []) if v.table == table]


def quality_check_result(main: Flow, validations: list, stopped: str | None = None) -> dg.AssetCheckResult:
    """The suite's verdict over the batches this materialization validated: failed if a fail rule stopped it."""
    rows: dict[str, list] = {}
    for v in validations:
        for o in v.outcomes:
            row = rows.setdefault(o.expectation.name, [o.expectation.severity, 0, 0, 0])
            row[1] += 0 if o.passed else 1
            row[2] += o.unexpected_count
            row[3] += o.dropped
    table = "\n".join(["| expectation | severity | batches failed | unexpected rows | dropped to quarantine |",
                       "|---|---|---|---|---|"] + [f"| {name} | {sev} | {f} | {u} | {d} |"
                                                  for name, (sev, f, u, d) in rows.items()])
    warned = sorted(name for name, (sev, failed, _, _) in rows.items() if failed and sev == "warn")
    metadata = {
        "batches_validated": len(validations),
        "rows_dropped_to_quarantine": sum(r[3] for r in rows.values()),
        "warnings": ", ".join(warned) or "none",
        "results": dg.MetadataValue.md(table if rows else "no batch to validate in this run"),
        "trends": dg.MetadataValue.md(f"`lakehouse sql \"SELECT * FROM quality_results WHERE table = "
                                      f"'{main.target.name}' ORDER BY validated_at DESC\"`"),
    }
    if stopped:
        metadata["stopped"] = stopped
    return dg.AssetCheckResult(
        check_name=QUALITY_CHECK, passed=stopped is None, metadata=metadata,
        severity=dg.AssetCheckSeverity.ERROR if stopped else dg.AssetCheckSeverity.WARN,
        description=stopped or (f"warnings: {', '.join(warned)}" if warned else None),
    )


def _stopped_result(context, session, main: Flow, ctx, stopped: Exception, checked: bool) -> dg.MaterializeResult:
    """A run a fail rule stopped: the batches before the breach are in the table; the failed blocking check keeps
    downstream away."""
    context.log.error(str(stopped))
    version = table_version(session, main.target.path(ctx.lake_root))
    return dg.MaterializeResult(
        metadata={"stopped_by_quality": str(stopped), "delta_version": -1 if version is None else version},
        check_results=[quality_check_result(main, validations_of(ctx, main.target.name), str(stopped))]
        if checked else None)


def step_failure(flow: Flow, exc: BaseException) -> dg.Failure:
    """A flow's error as the run's one sentence (a product error's own, else `lakehouse stream`'s wording), the raw
    error in its metadata."""
    said = str(exc) if isinstance(exc, SENTENCES) else f"flow {flow.name} failed: {first_line(exc)}"
    return dg.Failure(description=said, metadata={"error": dg.MetadataValue.text(str(exc)[:20_000]),
                                                  "error_type": type(exc).__name__, "flow": flow.name})


def definition_failure(changed: list[DefinitionChanged]) -> dg.Failure:
    """A run that met tables defined otherwise than their streams: their sentences as its description, what to do
    in its metadata."""
    raw = {c.table: c.raw for c in changed if getattr(c, "raw", None)}
    return dg.Failure(description=" ".join(str(c) for c in changed), metadata={
        **({"error": dg.MetadataValue.text("\n".join(raw.values())[:20_000])} if raw else {}),
        "changed_tables": ", ".join(c.table for c in changed),
        "how": "; ".join(f"{c.table}: {', '.join(c.changes)}" for c in changed),
        "what_to_do": " and ".join(f"lakehouse refresh {c.table}" for c in changed)
                      + " (or the refresh job with the table in its config)",
        "sentences": dg.MetadataValue.json({c.table: str(c) for c in changed}),
    })


def definition_observations(failure: dg.Failure) -> Iterator[dg.AssetObservation]:
    """For each table a `definition_failure` names: an observation holding its sentence and the command to run."""
    sentences = failure.metadata.get("sentences")
    for table, sentence in (sentences.value.items() if sentences is not None else ()):
        yield dg.AssetObservation(asset_key=table, metadata={"definition_changed": sentence,
                                                             "what_to_do": f"lakehouse refresh {table}"})


def catch_up_table(context, session, main: Flow, ctx, docs: dict[str, str], checked: bool) -> dg.MaterializeResult:
    """Run a table's flow until it has caught up; its metadata, side-table observations and quality check."""
    context.log.info(f"running flow {main.name} -> {main.target.name}")
    try:
        run = run_flow(session, main, ctx)
        metadata = caught_up_metadata(context.log, session, main, run, ctx, docs)
        for event in side_events(session, [main], ctx, [run]):
            context.log_event(event)
    except QUALITY_STOPS as stopped:
        return _stopped_result(context, session, main, ctx, stopped, checked)
    except DefinitionChanged as changed:
        context.log.error(str(changed))
        raise definition_failure([changed]) from None
    except Exception as exc:  # noqa: BLE001 - the run's error is a sentence; Spark's own goes to its metadata
        raise step_failure(main, exc) from None
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[quality_check_result(main, validations_of(ctx, main.target.name))] if checked else None)


def backfill_table(context, session, main: Flow, ctx, days: tuple[date, date], run_id: str,
                   checked: bool, verify: bool = False) -> dg.MaterializeResult:
    """Recompute a partitioned table's days with the batch lane; what changed and its quality check.

    `verify`: the run also checks matches_batch, so the backfill compares the whole table with its
    recomputation after the write and records the verdict for that check.
    """
    context.log.info(f"backfill {main.target.name} for {days[0]}..{days[1]} with flow {main.name}")
    try:
        change = backfill_flow(session, main, ctx, days, run_id=run_id, verify=verify)
    except QUALITY_STOPS as stopped:
        return _stopped_result(context, session, main, ctx, stopped, checked)
    except Exception as exc:  # noqa: BLE001 - the run's error is a sentence; Spark's own goes to its metadata
        raise step_failure(main, exc) from None
    return dg.MaterializeResult(
        metadata=backfill_metadata(change),
        check_results=[quality_check_result(main, validations_of(ctx, main.target.name))] if checked else None)


def table_asset(main: Flow, docs: dict[str, str], partitions: dg.PartitionsDefinition | None = None,
                checked: bool = False, columns: dg.TableSchema | None = None) -> dg.AssetsDefinition:
    """A table's asset: partitioned by event date (silver, gold) it is backfilled; otherwise it catches up."""
    writes = ", ".join(t.name for t in (main.target, *main.also_writes))
    partitioned = partitions is not None and is_partitioned(main.target)
    checks = [dg.AssetCheckSpec(
        QUALITY_CHECK, asset=main.asset_name, blocking=True,
        description=f"Each batch written to {main.target.name} meets the table's expectation suite "
                    "(quality/suites.py): fail rules stop the query and block downstream assets, drop rules send rows "
                    "to quarantine, warn rules are recorded.")] if checked else []

    @dg.asset(
        name=main.asset_name,
        group_name=main.target.layer,
        deps=[source_key(s) for s in (*main.sources, *main.lookups)],
        kinds={"delta", "spark"},
        description=_description(main),
        metadata={"keys": ", ".join(main.target.keys), "flows": main.name, "writes": writes,
                  **({"dagster/column_schema": columns} if columns is not None else {})},
        partitions_def=partitions if partitioned else None,
        backfill_policy=dg.BackfillPolicy.single_run() if partitioned else None,
        check_specs=checks,
    )
    def _table(
        context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource, lake: LakeResource
    ) -> dg.MaterializeResult:
        """Partitioned: recompute the run's days with the batch lane. Otherwise: catch up with the source."""
        days = key_range(context) if partitioned else None
        verify = days is not None and runs_check(context, dg.AssetCheckKey(context.asset_key, VERIFY_CHECK))
        if days is None:
            parts = served(context, spark, lake, kafka, remote_runs.TABLE, asset=main.asset_name,
                                            docs=docs, checked=bool(checks))
        else:
            parts = served(context, spark, lake, kafka, remote_runs.BACKFILL, asset=main.asset_name,
                                            days=[d.isoformat() for d in days], run_id=context.run_id,
                                            checked=bool(checks), verify=verify)
        if parts is not None:
            return remote_runs.result_from(parts)
        if days is None:
            return catch_up_table(context, run_session(context, spark), main, lake.flow_context(kafka), docs, bool(checks))
        return backfill_table(context, run_session(context, spark), main, lake.flow_context(kafka), days, context.run_id,
                              bool(checks), verify)

    return _table


def runs_check(context, key: dg.AssetCheckKey) -> bool:
    """Whether this run also evaluates `key`, a check defined on its own (not among the asset's check specs)."""
    selected = context.run.asset_check_selection     # None: every check of the run's job
    return key in context.job_def.asset_layer.asset_graph.asset_check_keys and (selected is None or key in selected)


def backfill_metadata(change: TableChange) -> dict[str, object]:
    """What a backfill changed in one table: rows added, changed, removed; late arrivals absorbed."""
    return {
        "days": change.days, "rows_added": change.added, "rows_changed": change.changed,
        "rows_removed": change.removed, "late_arrivals_absorbed": change.late_absorbed,
        "rows_in_range_before": change.rows_before, "rows_in_range_after": change.rows_after,
        "rewritten": change.rewritten, "delta_version": change.version if change.version is not None else -1,
        "duration_s": change.duration_s,
        # The matches_batch check of this run reads it instead of recomputing the flow (orchestration/checks.py).
        **({VERIFY_CHECK: dg.MetadataValue.json({**verdict_record(change.verdict), "delta_version": change.version})}
           if change.verdict is not None else {}),
    }


# What a person wants to see first about the tables every silver flow appends to.
_BREAKDOWN = {QUARANTINE.name: ("schema", "reason"), LATE_ARRIVALS.name: ("flow",)}


def _side_table_metadata(spark, table: TableSpec, lake_root: str) -> dict[str, object] | None:
    """Rows of a shared table (quarantine, late arrivals) in total and by reason or flow, as silver left it."""
    path = table.path(lake_root)
    if not has_delta_log(spark, path):
        return None
    by = _BREAKDOWN.get(table.name, ())
    counts = {"/".join(str(v) for v in key): rows
              for key, rows in sorted(_counts_by(spark, path, by).items(), key=lambda kv: _order(kv[0]))}
    return {
        "dagster/row_count": sum(counts.values()),
        f"by_{'_'.join(by)}": dg.MetadataValue.json(counts),
        "delta_version": table_version(spark, path),
        "path": dg.MetadataValue.path(path),
    }


def _order(key: tuple) -> tuple:
    # Spark's orderBy puts nulls first.
    return tuple((v is not None, v) for v in key)


def side_table_spec(table: TableSpec, writers: list[str], columns: dg.TableSchema | None = None) -> dg.AssetSpec:
    """A table several flows append to; a run that adds rows to it records a materialization, others an observation."""
    return dg.AssetSpec(
        table.name,
        deps=writers,
        group_name="silver",
        kinds={"delta"},
        metadata={"dagster/column_schema": columns} if columns is not None else None,
        description=f"{table.description} Written by {', '.join(writers)}; each of their runs that adds rows to it "
                    "records a materialization with the table's rows by "
                    + " and ".join(_BREAKDOWN.get(table.name, ("total",))) + ".",
    )


def column_docs(declared: tuple[Source, ...], flows: list[Flow]) -> dict[str, dict[str, str]]:
    """Table -> its columns' descriptions, from the source declarations: silver and dimension columns as declared,
    bronze's lineage columns, and a gold table's columns that come from the tables it reads."""
    docs = {s.silver_table.name: s.column_docs() for s in declared}
    docs.update({s.dimension_table.name: s.dimension_column_docs() for s in declared if s.dimension is not None})
    docs.update({s.bronze_table.name: dict(LINEAGE_DOCS) for s in declared})
    kinds = {g.name: g.kind for g in active_pipeline().gold}
    for flow in flows:
        if flow.target.layer == "gold":
            inherited = [docs.get(t.name, {}) for t in (*flow.sources, *flow.lookups)]
            docs[flow.target.name] = {**{k: v for d in inherited for k, v in d.items() if v},
                                      **kind_docs(kinds.get(flow.target.name))}
    return docs


def kind_docs(kind: object) -> dict[str, str]:
    """The columns a gold kind declares, described by their declaration (a window's aggregates, a session's counts,
    a join's columns)."""
    docs: dict[str, str] = {}
    if isinstance(kind, Windowed):
        docs = {"window_start": "Start of the event-time window (UTC, inclusive).",
                "window_end": "End of the event-time window (UTC, exclusive)."}
        docs.update({column: f"{agg} over the window's rows" for column, agg in kind.aggregates.items()})
    elif isinstance(kind, Sessions):
        docs = {"session_start": "Event time of the session's first row (UTC).",
                "session_end": "Event time of the session's last row (UTC).",
                "closed": "Whether the watermark has passed the session's end by the gap: it can no longer grow."}
        docs.update({column: f"rows of the session where {condition}" for column, condition in kind.counts.items()})
        docs.update({column: f"{expression} over the session" for column, expression in kind.then.items()})
    elif isinstance(kind, IntervalJoin):
        docs = {column: f"{expression} (l: the left row, r: the right row)" for column, expression in kind.columns.items()}
    return docs


def declared_schema(table: TableSpec, lake_root: str | None, docs: dict[str, str]) -> dg.TableSchema | None:
    """The table's columns as its Delta log holds them, described from the declarations (None: no table yet).

    Read at definitions load without Spark; a lake that cannot be read leaves the schema to the materializations.
    """
    if lake_root is None:
        return None
    try:
        fields = table_columns(table.path(lake_root))
    except Exception:  # noqa: BLE001 - an unreadable lake must not keep the code location from loading
        return None
    if not fields:
        return None
    return dg.TableSchema(columns=[
        dg.TableColumn(f["name"], type_name(f["type"]),
                       description=docs.get(f["name"]) or (f.get("metadata") or {}).get("comment") or None)
        for f in fields])


def build_assets(declared: tuple[Source, ...] | None = None, partitions: dg.PartitionsDefinition | None = None,
                 lake_root: str | None = None) -> list[dg.AssetsDefinition | dg.AssetSpec]:
    """Topic assets, then table assets in dependency order, all following from the source declarations.

    `lake_root`: each table that exists there shows its columns on its definition (the asset's overview).
    """
    partitions = partitions or daily()
    declared = sources.SOURCES if declared is None else declared
    flows = flow_registry.build_flows(declared)
    docs = column_docs(declared, flows)
    sides: dict[str, TableSpec] = {}
    writers: dict[str, list[str]] = {}
    for flow in flows:
        for side in flow.also_writes:
            sides[side.name] = side
            writers.setdefault(side.name, []).append(flow.asset_name)
    checked = suite_tables(declared)
    return [topic_asset(s.topic_spec) for s in declared] + [
        table_asset(flow, docs.get(flow.asset_name, {}), partitions, checked=flow.target.name in checked,
                    columns=declared_schema(flow.target, lake_root, docs.get(flow.target.name, {})))
        for flow in flows
    ] + [side_table_spec(sides[name], names, declared_schema(sides[name], lake_root, dict(LINEAGE_DOCS)))
         for name, names in writers.items()]
