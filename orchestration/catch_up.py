"""The `catch_up` job: the streams brought up to date, recorded as materializations of what they touched.

The silver and gold assets are partitioned by event date, and materializing a partition recomputes it
with the batch lane. A stream does not work by partition: one catch-up (availableNow) reads whatever
arrived, whatever its event date. So the catch-up is a job of its own that runs the flows in order
and then records, for each table, a materialization of every daily partition its commits touched
(from the Delta log), with the run's metadata; bronze and dimension tables, which are not
partitioned, get one materialization each. The UI shows the truth: which days the stream wrote, and
which days a backfill recomputed.
"""

from dataclasses import dataclass, field
from typing import Iterator

import dagster as dg

from lakehouse.infra.retention import duration_ms
from lakehouse.orchestration.assets import (
    QUALITY_STOPS, TOPIC_CHECK, _topic_metadata, caught_up_metadata, column_docs, definition_failure,
    definition_observations,
    quality_check_result, side_events, step_failure, topic_key, validations_of,
)
from lakehouse.serving import remote_runs
from lakehouse.orchestration.partitions import is_partitioned, touched_days, within_partitions
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sessions import run_session
from lakehouse.quality.suites import suite_tables
from lakehouse.schemas import sources
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.fingerprints import DefinitionChanged
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.progress import ProgressRecorder
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.runner import FlowRun, in_flow_pool, run_flow

CATCH_UP_JOB = "catch_up"


class CatchUpConfig(dg.Config):
    """Which tables (and topics, as kafka/<name>) to bring up to date; empty: every one."""

    assets: list[str] = []


def _topics(context: dg.OpExecutionContext, kafka: KafkaResource, lake: LakeResource, chosen: list[TopicSpec]) -> None:
    for status in ensure_topics(kafka.bootstrap_servers, chosen, replication_factor=kafka.replication_factor,
                                replay_window_ms=duration_ms(lake.replay_window)):
        spec = next(t for t in chosen if t.name == status.name)
        if status.drift:
            context.log.warning(f"{spec.name} differs from its spec: {status.drift}")
        context.log_event(dg.AssetMaterialization(asset_key=topic_key(spec), metadata=_topic_metadata(status)))
        context.log_event(dg.AssetCheckEvaluation(
            asset_key=topic_key(spec), check_name=TOPIC_CHECK, passed=not status.drift,
            severity=dg.AssetCheckSeverity.WARN, metadata={"drift": dg.MetadataValue.json(status.drift)},
        ))


def build_catch_up_job(declared: tuple | None = None) -> dg.JobDefinition:
    """The catch_up job over the flows the source declarations imply."""

    @dg.op(name="bring_up_to_date", out={}, description="Create missing topics, run every flow (or the chosen "
                                                        "tables') until it has caught up, and record materializations "
                                                        "of the partitions each run touched.")
    def bring_up_to_date(context: dg.OpExecutionContext, config: CatchUpConfig, spark: SparkResource,
                         kafka: KafkaResource, lake: LakeResource) -> Iterator[dg.AssetObservation]:
        """Bring tables up to date with their sources (availableNow) and record what changed, per daily partition."""
        try:
            if declared is None and (endpoint := remote_runs.endpoint_for(spark, lake)) is not None:
                remote_runs.run_served(endpoint, remote_runs.request(remote_runs.CATCH_UP, lake, kafka,
                                                                     assets=list(config.assets)), context)
            else:
                catch_up(context, config, spark, kafka, lake, declared)
        except dg.Failure as failure:
            # Dagster hands over an op's logged events when it yields: the tables that did catch up keep their
            # materializations, and each changed table gets an observation saying what to do.
            yield from definition_observations(failure)
            raise

    @dg.job(name=CATCH_UP_JOB, description="Create topics and bring every table up to date with its source; each "
                                           "table records a materialization of the daily partitions the run touched.")
    def catch_up_job() -> None:
        bring_up_to_date()

    return catch_up_job


def catch_up(context: dg.OpExecutionContext, config: CatchUpConfig, spark: SparkResource, kafka: KafkaResource,
             lake: LakeResource, declared: tuple | None = None) -> None:
    """Run the chosen flows in order and log a materialization per table (per touched day when partitioned)."""
    declared = sources.SOURCES if declared is None else declared
    flows = flow_registry.build_flows(declared)
    wanted = set(config.assets)
    topics = [s.topic_spec for s in declared if not wanted or topic_key(s.topic_spec).to_user_string() in wanted]
    chosen = [f for f in flows if not wanted or f.asset_name in wanted]
    known = {topic_key(s.topic_spec).to_user_string() for s in declared} | {f.asset_name for f in flows}
    if unknown := sorted(wanted - known):
        raise dg.Failure(f"There is no asset named {', '.join(unknown)}; assets: {', '.join(sorted(known))}.")
    if topics:
        _topics(context, kafka, lake, topics)
    if not chosen:
        return  # topics only: no Spark session needed
    session = run_session(context, spark)
    ctx = lake.flow_context(kafka)
    docs = column_docs(declared, flows)
    blocked: dict[str, str] = {}    # table -> the breach that stopped it (or an upstream table)
    progress = ProgressRecorder(ctx.lake_root, mode="catch-up")
    try:
        # The flows' validation results are written once, when the last flow has ended.
        with ctx.holding_results(session):
            _run_flows(context, session, ctx, chosen, docs, blocked, progress, lake.catch_up_parallel,
                       suite_tables(declared), one_query_per_topic=lake.one_query_per_topic)
    finally:
        progress.flush(session)     # every micro-batch's progress, also of a run that failed part way
    if blocked:
        first = next(iter(blocked.values()))
        raise dg.Failure(description=first, metadata={"blocked_tables": ", ".join(blocked)})


@dataclass
class _Caught:
    """A flow's run and what the catch-up records about it, read in the flow's own worker thread."""

    run: FlowRun
    metadata: dict[str, object]
    days: list[str] | None            # a partitioned table: the daily partitions its commits touched
    notes: list[str] = field(default_factory=list)   # lines for the run's log, written by the op's thread

    def info(self, text: str) -> None:
        self.notes.append(text)


def _caught_up(session, flow, ctx, docs: dict[str, str]) -> _Caught:
    """Run one flow, then read what its materializations say (row count, columns, touched days).

    Those reads are Spark jobs of their own; made here, in the flow's worker thread and fair-scheduler
    pool, they overlap the other flows' runs instead of holding up the op's thread, which starts the next
    flows only when it has logged this one's events.
    """
    run = run_flow(session, flow, ctx)

    def describe() -> _Caught:
        caught = _Caught(run, {}, None)
        caught.metadata = caught_up_metadata(caught, session, flow, run, ctx, docs.get(flow.asset_name, {}))
        if is_partitioned(flow.target):
            path = flow.target.path(ctx.lake_root)
            caught.days = within_partitions(touched_days(session, flow.target, path, run.version_before))
        return caught

    return in_flow_pool(session, flow, describe)


def _run_flows(context, session, ctx, chosen, docs, blocked, progress, parallel: int = 1,
               checked: set[str] = frozenset(), one_query_per_topic: bool = False) -> None:
    """Run the flows, up to `parallel` at once, logging each one's materializations as it ends.

    A flow starts when the flows whose tables it reads have ended (streaming/parallel_runs.py); a
    breach of a blocking check blocks every flow that reads the table. The shared tables the flows
    append to (quarantine, late arrivals) are observed once, after the last flow.
    """
    def skip(flow) -> str | None:
        upstream = [s.name for s in (*flow.sources, *flow.lookups) if s.name in blocked]
        if upstream:
            blocked[flow.target.name] = blocked[upstream[0]]
            return f"skipping flow {flow.name}: its input {upstream[0]} failed a blocking quality check"
        context.log.info(f"running flow {flow.name} -> {flow.target.name}")
        return None

    def run(spark, flow, flow_ctx) -> _Caught:
        return _caught_up(spark, flow, flow_ctx, docs)

    ran, changed, runs = [], [], []
    for outcome in run_flows(session, chosen, ctx, parallel=parallel, skip=skip, run=run,
                             one_query_per_topic=one_query_per_topic):
        flow = outcome.flow
        if outcome.skipped:
            context.log.warning(outcome.skipped)
            continue
        if isinstance(outcome.error, QUALITY_STOPS):
            # Blocking: the table's failed check keeps every flow downstream of it from running on bad data.
            blocked[flow.target.name] = str(outcome.error)
            context.log.error(str(outcome.error))
            _log_check(context, flow, validations_of(ctx, flow.target.name), str(outcome.error))
            continue
        if isinstance(outcome.error, DefinitionChanged):
            # Only that table waits for `lakehouse refresh`; every other flow runs on, as in `lakehouse run`.
            changed.append(outcome.error)
            context.log.error(str(outcome.error))
            continue
        if outcome.error is not None:
            _observe_side_tables(context, session, ran, ctx, runs, failing=True)
            raise step_failure(flow, outcome.error) from None
        caught: _Caught = outcome.run
        ran.append(flow)
        runs.append(caught.run)
        progress.extend(caught.run.progress)
        for line in caught.notes:
            context.log.info(line)
        metadata = caught.metadata
        if caught.days is not None:
            metadata["partitions_touched"] = ", ".join(caught.days) or "none"
            for day in caught.days:
                context.log_event(dg.AssetMaterialization(asset_key=flow.asset_name, partition=day, metadata=metadata))
            if not caught.days:
                context.log_event(dg.AssetObservation(asset_key=flow.asset_name, metadata=metadata))
        else:
            context.log_event(dg.AssetMaterialization(asset_key=flow.asset_name, metadata=metadata))
        if flow.target.name in checked:
            # After the materializations: Dagster pins a check's result to the newest materialization of its asset.
            _log_check(context, flow, validations_of(ctx, flow.target.name))
    _observe_side_tables(context, session, ran, ctx, runs)
    if changed:
        raise definition_failure(changed)


def _observe_side_tables(context, session, flows: list, ctx, runs: list, failing: bool = False) -> None:
    """What the shared tables the flows write (quarantine, late arrivals) hold now: materialized if the runs added
    rows to them."""
    try:
        for event in side_events(session, flows, ctx, runs):
            context.log_event(event)
    except Exception as exc:  # noqa: BLE001 - the run's own error is the one to show
        if not failing:
            raise
        context.log.warning(f"could not observe quarantine and late arrivals: {exc}")


def _log_check(context: dg.OpExecutionContext, flow, validations: list, stopped: str | None = None) -> None:
    """The table's `expectations` check over the batches this run validated (a run with none to validate passes)."""
    result = quality_check_result(flow, validations, stopped)
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(flow.asset_name), check_name=result.check_name, passed=result.passed,
        severity=result.severity, metadata=result.metadata, description=result.description))


catch_up_job = build_catch_up_job()
