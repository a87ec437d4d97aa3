"""The endpoint's side of a Dagster run's step: the same code the step would run, in the warm session.

`remote_runs.run_served` sends a step; `serve_step` runs it here under RUN_LOCK and emits, as they happen,
its log lines, the events it logs and its result, which the run replays into its own context.
"""

from __future__ import annotations

import logging
import threading
from datetime import date
from typing import Any, Callable

import dagster as dg
from dagster._serdes import serialize_value

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import backfill_table, catch_up_table
from lakehouse.orchestration.catch_up import CatchUpConfig, catch_up
from lakehouse.orchestration.checks import VERIFY_CHECK, verify_result
from lakehouse.orchestration.quality_checks import rule_result, rules
from lakehouse.orchestration.resources import KafkaResource, LakeResource
from lakehouse.schemas import sources
from lakehouse.serving.endpoint import EndpointError
from lakehouse.serving.remote_runs import BACKFILL, CATCH_UP, CHECK, _check_parts, _parts
from lakehouse.streaming import flows as flow_registry

log = logging.getLogger("lakehouse")

# One run step at a time on the endpoint: two runs of one flow would race for its checkpoint. Queries do not wait.
RUN_LOCK = threading.Lock()


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
