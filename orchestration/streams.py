"""Dagster observes the continuous streams: reports from `lakehouse stream`, freshness and lag checks, topic observations.

Dagster's guidance for long-running streaming work is to observe it, not to own it: the stream
process reports what it wrote to the instance (`report_runless_asset_event`), and a sensor, which
launches no run, observes the topics and evaluates freshness and lag checks from the checkpoints and
the broker. The same functions serve the sensor, the checks run by hand from the UI, and
`lakehouse status`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Iterable

import dagster as dg

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import topic_key
from lakehouse.schemas import sources
from lakehouse.schemas.tables import LATE_ARRIVALS, QUARANTINE
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.context import FlowContext, duration_micros
from lakehouse.streaming.continuous import TableReport
from lakehouse.streaming.health import FlowHealth, end_offsets, flow_health
from lakehouse.streaming.stream_pid import died_stream_flows, running_stream, streamed_flows

FRESHNESS_CHECK = "stream_freshness"
LAG_CHECK = "consumer_lag"
STREAM_TAG = "lakehouse stream"
SENSOR = "stream_health"


def report_metadata(rep: TableReport) -> dict[str, object]:
    """What a person wants to see of a streamed table's update; numbers plot as series in the UI."""
    meta: dict[str, object] = {
        "source": STREAM_TAG,
        "flow": rep.flow,
        "micro_batches": rep.batches,
        "rows_written": rep.rows_written,
        "rows_read": rep.input_rows,
        "rows_since_start": rep.total_rows,
        "rows_per_second": round(rep.rows_per_s, 1),
    }
    if rep.quarantined:
        meta["quarantined"] = rep.quarantined
    if rep.late:
        meta["late_arrivals"] = rep.late
    if rep.last_batch_id is not None:
        meta["last_batch_id"] = rep.last_batch_id
    if rep.last_batch_ms is not None:
        meta["batch_duration_ms"] = rep.last_batch_ms
    if rep.delta_version is not None:
        meta["delta_version"] = rep.delta_version
    if rep.lag_records is not None:
        meta["lag_records"] = rep.lag_records
    if rep.kafka_end_offsets:
        meta["kafka_end_offsets"] = dg.MetadataValue.json(rep.kafka_end_offsets)
    if rep.watermark:
        meta["watermark"] = rep.watermark
    return meta


class DagsterReporter:
    """Sends the stream's table reports to the project's Dagster instance.

    A table that wrote rows gets a materialization; an idle one (caught up, nothing new) an observation,
    so its freshness shows that the stream is alive even when no events arrive.
    """

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance

    def __call__(self, reports: list[TableReport]) -> None:
        for rep in reports:
            key = dg.AssetKey(rep.table)
            meta = report_metadata(rep)
            event = (dg.AssetMaterialization(asset_key=key, metadata=meta, description="lakehouse stream wrote rows")
                     if rep.rows_written or rep.quarantined or rep.late else
                     dg.AssetObservation(asset_key=key, metadata=meta, description="lakehouse stream is caught up"))
            self.instance.report_runless_asset_event(event)
        for event in side_table_events(reports):
            self.instance.report_runless_asset_event(event)


def side_table_events(reports: list[TableReport]) -> list[dg.AssetMaterialization]:
    """A materialization of quarantine and of late_arrivals for the rows the reported flows added to them."""
    events = []
    for table, rows_of in ((QUARANTINE.name, lambda r: r.quarantined), (LATE_ARRIVALS.name, lambda r: r.late)):
        by_flow = {r.flow: rows_of(r) for r in reports if rows_of(r)}
        if by_flow:
            events.append(dg.AssetMaterialization(
                asset_key=dg.AssetKey(table), description="lakehouse stream added rows",
                metadata={"source": STREAM_TAG, "rows_written": sum(by_flow.values()),
                          "by_flow": dg.MetadataValue.json(by_flow)}))
    return events


def last_stream_report(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    """Epoch seconds of the stream's newest report (materialization or observation) for an asset."""
    newest = None
    for fetch in (instance.fetch_materializations, instance.fetch_observations):
        for record in fetch(key, limit=20).records:
            entry = record.event_log_entry
            event = entry.asset_materialization or entry.asset_observation
            source = event.metadata.get("source") if event is not None else None
            if source is not None and getattr(source, "value", source) == STREAM_TAG:
                newest = max(newest or 0.0, entry.timestamp)
                break
    return newest


def freshness_evaluation(instance: dg.DagsterInstance, table: str, limit_s: float, now: float | None = None, *,
                         streamed: bool = True, behind: str | None = None, died: bool = False) -> dg.AssetCheckEvaluation:
    """Judged against what the stream was asked to keep fresh.

    `streamed` (a live `lakehouse stream` runs the table's flows): fresh when it reported the table within
    `limit_s`, else it stalled (ERROR). Otherwise the table is fresh when it is caught up with its input
    (`behind` None); behind it warns, and is an ERROR only when the stream that kept it fresh `died`.
    """
    now = now or time.time()
    last = last_stream_report(instance, dg.AssetKey(table))
    age = None if last is None else now - last
    if streamed:
        passed, severity, said = _streamed_verdict(table, age, limit_s)
    else:
        passed, severity, said = _unstreamed_verdict(table, behind, died)
    meta: dict[str, object] = {"limit_s": limit_s, "status": said, "kept_fresh_by_stream": streamed,
                               "behind_input": behind or "nothing"}
    if age is not None:
        meta["seconds_since_report"] = round(age, 1)
        meta["last_report_at"] = datetime.fromtimestamp(last, tz=timezone.utc).isoformat()
    return dg.AssetCheckEvaluation(asset_key=dg.AssetKey(table), check_name=FRESHNESS_CHECK, passed=passed,
                                   severity=severity, metadata=meta, description=said)


def _streamed_verdict(table: str, age: float | None, limit_s: float) -> tuple[bool, dg.AssetCheckSeverity, str]:
    """A table a running stream keeps fresh: has it reported the table within the limit?"""
    passed = age is not None and age <= limit_s
    if age is None:
        said = f"lakehouse stream runs {table} but has not reported it yet"
    else:
        said = (f"lakehouse stream reported {table} {age:.0f} s ago"
                + ("" if passed else f", more than the {limit_s:.0f} s allowed: the stream has stalled"))
    return passed, dg.AssetCheckSeverity.ERROR, said


def _unstreamed_verdict(table: str, behind: str | None, died: bool) -> tuple[bool, dg.AssetCheckSeverity, str]:
    """A table no running stream keeps fresh: fresh when caught up with its input; behind warns, unless a stream died."""
    if behind is None:
        return True, dg.AssetCheckSeverity.WARN, (f"no running lakehouse stream keeps {table} fresh, and it is caught "
                                                  "up with its input")
    why = "the stream that kept it fresh ended without a clean stop" if died else "no running lakehouse stream keeps it fresh"
    return False, dg.AssetCheckSeverity.ERROR if died else dg.AssetCheckSeverity.WARN, (
        f"{table} is {behind} behind its input and {why}: `lakehouse run {table}` or `lakehouse stream` catches it up")


def table_lag(flows: list, health: dict[str, FlowHealth], ends: dict) -> str | None:
    """How far a table's flows are behind their inputs, in words; None when every one is caught up."""
    parts = []
    for flow in flows:
        unread = [s.name for s in flow.sources if isinstance(s, TopicSpec) and s.name not in ends]
        if unread:
            parts.append(f"an unknown number of records (the broker did not answer for {', '.join(unread)})")
        elif not health[flow.name].caught_up:
            parts.append(health[flow.name].lag_text())
    return "; ".join(parts) or None


def freshness_evaluations(settings: Settings, instance: dg.DagsterInstance, tables: Iterable[str],
                          declared: tuple | None = None, now: float | None = None, ends: dict | None = None,
                          ) -> list[dg.AssetCheckEvaluation]:
    """The freshness check of each table, from the stream's PID file, its reports, and each flow's lag."""
    from lakehouse.orchestration.resources import build_resources

    flows = flow_registry.build_flows(declared)
    resources = build_resources(settings)
    ctx = resources["lake"].flow_context(resources["kafka"])
    if ends is None:
        ends = _ends(ctx.kafka_bootstrap, [s.topic_spec for s in (sources.SOURCES if declared is None else declared)])
    health = {f.name: flow_health(f, ctx, ends) for f in flows}
    running = set(streamed_flows(settings)) if running_stream(settings) is not None else set()
    died = set(died_stream_flows(settings))
    limit_s = duration_micros(settings.stream_freshness) / 1e6
    found = []
    for table in tables:
        feeding = [f for f in flows if f.target.name == table]
        names = {f.name for f in feeding}
        streamed = bool(names & running)
        found.append(freshness_evaluation(instance, table, limit_s, now, streamed=streamed,
                                          behind=None if streamed else table_lag(feeding, health, ends),
                                          died=bool(names & died)))
    return found


def _ends(bootstrap: str, topics: list[TopicSpec]) -> dict:
    """The topics' end offsets, or none when the broker does not answer (the lag is then unknown)."""
    try:
        return end_offsets(bootstrap, topics, timeout_s=5.0)
    except Exception:  # noqa: BLE001 - the broker is down: topics cannot be observed, freshness still can
        return {}


def lag_evaluation(topic: TopicSpec, health: Iterable[FlowHealth], limit: int) -> dg.AssetCheckEvaluation:
    """Passed when every flow that reads the topic is at most `limit` records behind its end offsets."""
    readers = [h for h in health if h.kafka_lag and any(k.startswith(f"{topic.name}/") for k in h.kafka_lag)]
    lags = {h.flow: sum(v for k, v in h.kafka_lag.items() if k.startswith(f"{topic.name}/")) for h in readers}
    worst = max(lags.values(), default=0)
    passed = worst <= limit
    said = (f"every consumer of {topic.name} is within {limit:,} records of its end" if passed else
            f"{', '.join(f'{f} is {n:,} records behind' for f, n in lags.items() if n > limit)} "
            f"{topic.name} (limit {limit:,})")
    return dg.AssetCheckEvaluation(
        asset_key=topic_key(topic), check_name=LAG_CHECK, passed=passed, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"lag_by_flow": dg.MetadataValue.json(lags), "max_lag_records": worst, "limit_records": limit},
        description=said)


def topic_event(instance: dg.DagsterInstance, topic: TopicSpec, ends: dict[int, tuple[int, int]],
                health: Iterable[FlowHealth]) -> dg.AssetMaterialization | dg.AssetObservation:
    """The topic as the sensor sees it: a materialization when records were appended (or removed) since its last
    one, so the topic's overview shows the figures observed now; otherwise an observation."""
    observed = topic_observation(topic, ends, health)
    newest = instance.get_latest_materialization_event(topic_key(topic))
    recorded = newest.asset_materialization.metadata.get("end_offsets") if newest and newest.asset_materialization \
        else None
    if recorded is not None and recorded.value == observed.metadata["end_offsets"].value:
        return observed
    return dg.AssetMaterialization(asset_key=observed.asset_key, metadata=observed.metadata,
                                   description="the topic's end offsets moved since its last materialization")


def topic_observation(topic: TopicSpec, ends: dict[int, tuple[int, int]], health: Iterable[FlowHealth]) -> dg.AssetObservation:
    """A topic as it is now: end offsets, retained records, and how far each flow reading it is behind."""
    lags = {h.flow: {k.split("/", 1)[1]: v for k, v in h.kafka_lag.items() if k.startswith(f"{topic.name}/")}
            for h in health if any(k.startswith(f"{topic.name}/") for k in h.kafka_lag)}
    return dg.AssetObservation(asset_key=topic_key(topic), metadata={
        "topic": topic.name,
        "partitions": len(ends),
        "end_offsets": dg.MetadataValue.json({str(p): high for p, (low, high) in ends.items()}),
        "retained_records": sum(high - low for low, high in ends.values()),
        "consumer_lag": dg.MetadataValue.json(lags),
        "lag_records": sum(sum(v.values()) for v in lags.values()),
        "observed_by": SENSOR,
    })


def streamed_tables(declared: tuple | None = None) -> list[str]:
    return list(dict.fromkeys(f.target.name for f in flow_registry.build_flows(declared)))


def observe(settings: Settings, instance: dg.DagsterInstance, declared: tuple | None = None,
            now: float | None = None) -> list[object]:
    """Topic observations, lag checks and freshness checks, as of now."""
    from lakehouse.orchestration.resources import build_resources

    resources = build_resources(settings)
    ctx: FlowContext = resources["lake"].flow_context(resources["kafka"])
    ctx = FlowContext(lake_root=ctx.lake_root, kafka_bootstrap=ctx.kafka_bootstrap)   # no quality gate needed here
    declared = sources.SOURCES if declared is None else declared
    flows = flow_registry.build_flows(declared)
    topics = [s.topic_spec for s in declared]
    events: list[object] = []
    ends = _ends(ctx.kafka_bootstrap, topics)
    if ends:
        health = [flow_health(f, ctx, ends) for f in flows if isinstance(f.source, TopicSpec)]
        for topic in topics:
            if topic.name in ends:
                events.append(topic_event(instance, topic, ends[topic.name], health))
                events.append(lag_evaluation(topic, health, settings.stream_lag_limit))
    events.extend(freshness_evaluations(settings, instance, streamed_tables(declared), declared, now, ends))
    return events


def build_stream_checks(declared: tuple | None = None) -> list[dg.AssetChecksDefinition]:
    """The freshness check of every streamed table and the lag check of every topic, runnable from the UI too."""
    declared = sources.SOURCES if declared is None else declared
    tables = streamed_tables(declared)
    topics = [s.topic_spec for s in declared]

    @dg.multi_asset_check(
        name="stream_freshness_checks",
        specs=[dg.AssetCheckSpec(FRESHNESS_CHECK, asset=t,
                                 description="A table a running lakehouse stream keeps fresh fails when the stream "
                                             "has not reported it for LAKEHOUSE_STREAM_FRESHNESS; any other table "
                                             "is fresh when it is caught up with its input and warns when behind.") for t in tables],
        can_subset=True,
    )
    def freshness_checks(context):
        """Is each table as fresh as the stream was asked to keep it?"""
        tables = [key.asset_key.to_user_string() for key in context.selected_asset_check_keys]
        for e in freshness_evaluations(Settings.from_env(), context.instance, tables, declared):
            yield dg.AssetCheckResult(asset_key=e.asset_key, check_name=e.check_name, passed=e.passed,
                                      severity=e.severity, metadata=e.metadata, description=e.description)

    @dg.multi_asset_check(
        name="consumer_lag_checks",
        specs=[dg.AssetCheckSpec(LAG_CHECK, asset=topic_key(t),
                                 description="Fails when a flow reading the topic is more than "
                                             "LAKEHOUSE_STREAM_LAG_LIMIT records behind its end.") for t in topics],
        can_subset=True,
    )
    def lag_checks(context):
        """Is every flow within LAKEHOUSE_STREAM_LAG_LIMIT records of its topic's end?"""
        settings = Settings.from_env()
        wanted = {k.asset_key for k in context.selected_asset_check_keys}
        for event in observe(settings, context.instance, declared):
            if isinstance(event, dg.AssetCheckEvaluation) and event.check_name == LAG_CHECK \
                    and event.asset_key in wanted:
                yield dg.AssetCheckResult(asset_key=event.asset_key, check_name=LAG_CHECK, passed=event.passed,
                                          severity=event.severity, metadata=event.metadata,
                                          description=event.description)

    return [freshness_checks, lag_checks]


def build_stream_sensor(declared: tuple | None = None) -> dg.SensorDefinition:
    """Every 30 s: observe the topics and evaluate the freshness and lag checks, without launching a run."""

    @dg.sensor(name=SENSOR, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
               description="Observes each topic (end offsets, retained records, each flow's lag) and evaluates the "
                           "streams' freshness and lag checks; launches no run.")
    def stream_health(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """Observe the topics and the streams' health."""
        events = observe(Settings.from_env(), context.instance, declared)
        checks = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
        failing = [f"{e.asset_key.to_user_string()} {e.check_name}" for e in checks if not e.passed]
        said = (f"observed {len(events) - len(checks)} topics; {len(failing)} of {len(checks)} checks failing"
                + (f": {', '.join(failing[:5])}{' ...' if len(failing) > 5 else ''}" if failing else "")
                + " (this sensor launches no run)")
        return dg.SensorResult(asset_events=events, skip_reason=dg.SkipReason(said))

    return stream_health
