"""Dagster runs whose flows run in `lakehouse serve`'s warm Spark session instead of a JVM of their own.

A run's step that needs Spark (the catch_up op; a table asset that catches up, or backfills the days of
its partitions; an asset check that reads tables) first asks whether an endpoint is up for its lake. If
so it sends the step there: the endpoint runs the very same code in its session and streams back, as
they happen, the step's log lines and the events it logs (materializations, observations, check
evaluations), one JSON line each; the step replays them into its own context, so the run looks the same
in the UI and in `lakehouse run` either way. Without an endpoint the step starts Spark itself, as
before, and says so in its log: that costs a JVM and 10-40 s on a small machine.

A run the UI cancels stops waiting, but its flows finish on the endpoint: a catch-up ends on a commit.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from typing import Any, Callable

import dagster as dg
from dagster._serdes import deserialize_value, serialize_value

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.orchestration.sql_endpoint import HOST, STREAMED, Endpoint, EndpointError, running_endpoint

log = logging.getLogger("lakehouse")

# The catch_up op's work (topics, then the chosen flows); one table asset's catch-up, or its backfill of a
# partition range (each answered with its MaterializeResult's parts); one asset check that reads tables.
CATCH_UP, TABLE, BACKFILL, CHECK = STREAMED

# One run step at a time on the endpoint: two runs of one flow would race for its checkpoint. Queries do not wait.
RUN_LOCK = threading.Lock()


def endpoint_for(spark: SparkResource, lake: LakeResource) -> Endpoint | None:
    """The endpoint serving the run's lake, if one is up."""
    return running_endpoint(Settings(home=spark.home, lake_root=lake.root))


def _fields(resource: dg.ConfigurableResource) -> dict[str, Any]:
    return {name: getattr(resource, name) for name in type(resource).model_fields}


def request(kind: str, lake: LakeResource, kafka: KafkaResource, **more: Any) -> dict[str, Any]:
    """What a step sends: its kind, the resources it would have used, and what it needs (assets, a table)."""
    return {"kind": kind, "lake": _fields(lake), "kafka": _fields(kafka), **more}


def note_local_spark(context) -> None:
    """The line a step logs before it starts a JVM of its own."""
    context.log.info("no lakehouse serve is up for this lake: this run starts its own Spark session (a new JVM, "
                     "10-40 s); `lakehouse serve` keeps one warm that runs reuse")


def run_served(endpoint: Endpoint, body: dict[str, Any], context) -> Any:
    """Send a step to the endpoint, replay its log and events into `context`; its result (None for catch_up).

    Raises dg.Failure as the step would have, and EndpointError when the endpoint failed outside the step.
    """
    context.log.info(f"running on lakehouse serve's warm Spark session (pid {endpoint.pid}, "
                     f"{HOST}:{endpoint.port}) instead of starting one")
    call = urllib.request.Request(f"http://{HOST}:{endpoint.port}/", data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call) as response:
            for line in response:
                message = json.loads(line)
                if "log" in message:
                    level, text = message["log"]
                    getattr(context.log, level)(text)
                elif "record" in message:
                    _replay_record(*message["record"])
                elif "event" in message:
                    context.log_event(deserialize_value(message["event"]))
                elif "failure" in message:
                    raise dg.Failure(description=message["failure"],
                                     metadata=deserialize_value(message["metadata"]))
                elif "error" in message:
                    raise EndpointError(f"lakehouse serve (pid {endpoint.pid}) failed on this run: {message['error']}")
                elif "result" in message:
                    return deserialize_value(message["result"])
                elif message.get("done"):
                    return None
    except (urllib.error.URLError, ConnectionError) as exc:
        raise EndpointError(f"lakehouse serve (pid {endpoint.pid}) stopped during this run ({exc}); "
                            "run it again") from None
    raise EndpointError(f"lakehouse serve (pid {endpoint.pid}) stopped during this run; run it again")


def on_endpoint(context, spark: SparkResource, lake: LakeResource, kafka: KafkaResource, kind: str,
                **more: Any) -> Any:
    """A TABLE, BACKFILL or CHECK step's answer from the endpoint; None, after saying so, when none is up."""
    if (endpoint := endpoint_for(spark, lake)) is None:
        note_local_spark(context)
        return None
    return run_served(endpoint, request(kind, lake, kafka, **more), context)


def served_check(context, spark: SparkResource, lake: LakeResource, kafka: KafkaResource, asset: str,
                 name: str) -> dg.AssetCheckResult | None:
    """An asset check computed on the endpoint; None when there is none and the step starts Spark."""
    parts = on_endpoint(context, spark, lake, kafka, CHECK, asset=asset, check=name)
    return None if parts is None else _check_from(parts)


def _replay_record(name: str, level: int, text: str) -> None:
    """A batch-lane log line of the step, to the handlers a command put on its logger (its progress bar).

    Not to the root's: the endpoint has written the line to the log file, which is the same file.
    """
    record = logging.LogRecord(name, level, __file__, 0, text, None, None)
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None and logger is not logging.root:
        for handler in logger.handlers:
            if level >= handler.level:
                handler.handle(record)
        logger = logger.parent


def _check_parts(check: dg.AssetCheckResult) -> dict[str, Any]:
    return {"check_name": check.check_name, "passed": check.passed, "metadata": check.metadata,
            "severity": check.severity.value, "description": check.description}


def _check_from(parts: dict[str, Any]) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(**{**parts, "severity": dg.AssetCheckSeverity(parts["severity"])})


def _parts(result: dg.MaterializeResult) -> dict[str, Any]:
    """A MaterializeResult as values Dagster's serdes can carry (it carries metadata, not the result itself)."""
    return {"metadata": result.metadata, "checks": [_check_parts(c) for c in result.check_results or []]}


def result_from(parts: dict[str, Any]) -> dg.MaterializeResult:
    """The MaterializeResult the endpoint computed, rebuilt in the run from `_parts`."""
    checks = [_check_from(c) for c in parts["checks"]]
    return dg.MaterializeResult(metadata=parts["metadata"], check_results=checks or None)


class _Log:
    """context.log for a step run on the endpoint: each line goes back to the run, and to the endpoint's log."""

    def __init__(self, emit: Callable[[dict], None]):
        self._emit = emit

    def _line(self, level: str, text: str) -> None:
        log.log(getattr(logging, level.upper()), "run step: %s", text)
        self._emit({"log": [level, str(text)]})

    def debug(self, text: str) -> None:
        self._line("debug", text)

    def info(self, text: str) -> None:
        self._line("info", text)

    def warning(self, text: str) -> None:
        self._line("warning", text)

    def error(self, text: str) -> None:
        self._line("error", text)


class _Context:
    """The part of a Dagster step context the catch-up code uses (log, log_event), sent back to the run."""

    def __init__(self, emit: Callable[[dict], None]):
        self.log = _Log(emit)
        self._emit = emit

    def log_event(self, event: Any) -> None:
        self._emit({"event": serialize_value(event)})


class _Forward(logging.Handler):
    """Sends the batch lane's log records of one step's thread back to the run, as they would be logged there."""

    def __init__(self, emit: Callable[[dict], None]):
        super().__init__(logging.INFO)
        self._emit, self._thread = emit, threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread:
            self._emit({"record": [record.name, record.levelno, record.getMessage()]})


class _WarmSpark:
    """A SparkResource stand-in whose session is the endpoint's."""

    warm = True   # the catch-up then does not say it starts a JVM

    def __init__(self, session):
        self._session = session

    def session(self):
        return self._session


def serve_step(spark, settings: Settings, body: dict[str, Any], emit: Callable[[dict], None]) -> None:
    """Run a step sent by `run_served` in the endpoint's session, emitting its log, events and end."""
    from datetime import date

    from lakehouse.orchestration.assets import backfill_table, catch_up_table
    from lakehouse.orchestration.catch_up import CatchUpConfig, catch_up
    from lakehouse.orchestration.checks import VERIFY_CHECK, verify_result
    from lakehouse.orchestration.quality_checks import rule_result, rules
    from lakehouse.schemas import sources
    from lakehouse.streaming import flows as flow_registry

    try:
        lake, kafka = LakeResource(**body["lake"]), KafkaResource(**body["kafka"])
        if lake.root != settings.lake_root:
            raise EndpointError(f"this endpoint serves {settings.lake_root}, not {lake.root}")
        context = _Context(emit)

        def flow_of(asset: str):
            [flow] = [f for f in flow_registry.build_flows(sources.SOURCES) if f.asset_name == asset]
            return flow

        with RUN_LOCK:
            if body["kind"] == CATCH_UP:
                catch_up(context, CatchUpConfig(assets=body["assets"]), _WarmSpark(spark), kafka, lake, sources.SOURCES)
                emit({"done": True})
            elif body["kind"] == CHECK:
                asset, name = body["asset"], body["check"]
                if name == VERIFY_CHECK:
                    check = verify_result(spark, flow_of(asset), lake.flow_context(kafka))
                else:
                    check = rule_result(spark, lake.root, rules(sources.SOURCES)[(asset, name)][1])
                emit({"result": serialize_value(_check_parts(check))})
            else:
                flow, ctx = flow_of(body["asset"]), lake.flow_context(kafka)
                if body["kind"] == BACKFILL:
                    first, last = (date.fromisoformat(day) for day in body["days"])
                    # backfill's per-table lines, which move lakehouse backfill's progress bar
                    forward, batch_log = _Forward(emit), logging.getLogger("lakehouse.batch")
                    batch_log.addHandler(forward)
                    try:
                        result = backfill_table(context, spark, flow, ctx, (first, last), body["run_id"],
                                                body["checked"], body.get("verify", False))
                    finally:
                        batch_log.removeHandler(forward)
                else:
                    result = catch_up_table(context, spark, flow, ctx, body["docs"], body["checked"])
                emit({"result": serialize_value(_parts(result))})
    except dg.Failure as failure:
        emit({"failure": failure.description, "metadata": serialize_value(failure.metadata)})
    except Exception as exc:  # noqa: BLE001 - the run shows it; the endpoint keeps serving
        log.exception("run step failed")
        emit({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
