"""Dagster runs whose flows run in `lakehouse serve`'s warm Spark session: the run's side (served_steps.py runs them).

A run's step that needs Spark (the catch_up op; a table asset that catches up, or backfills the days of
its partitions; an asset check that reads tables) first asks whether an endpoint is up for its lake. If
so it sends the step there: the endpoint runs the very same code in its session and streams back, as
they happen, the step's log lines and the events it logs (materializations, observations, check
evaluations), one JSON line each; the step replays them into its own context, so the run looks the same
in the UI and in `lakehouse run` either way. Without an endpoint the step uses the run's own session
(orchestration/sessions.py), whose first step says how long starting it took.

A run the UI cancels stops waiting, but its flows finish on the endpoint: a catch-up ends on a commit.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

import dagster as dg
from dagster._serdes import deserialize_value

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.serving.endpoint import HOST, STREAMED, Endpoint, EndpointError, running_endpoint

log = logging.getLogger("lakehouse")

# The catch_up op's work (topics, then the chosen flows); one table asset's catch-up, or its backfill of a
# partition range (each answered with its MaterializeResult's parts); one asset check that reads tables.
CATCH_UP, TABLE, BACKFILL, CHECK = STREAMED

def endpoint_for(spark: SparkResource, lake: LakeResource) -> Endpoint | None:
    """The endpoint serving the run's lake, if one is up."""
    return running_endpoint(Settings(home=spark.home, lake_root=lake.root))


def _fields(resource: dg.ConfigurableResource) -> dict[str, Any]:
    return {name: getattr(resource, name) for name in type(resource).model_fields}


def request(kind: str, lake: LakeResource, kafka: KafkaResource, **more: Any) -> dict[str, Any]:
    """What a step sends: its kind, the resources it would have used, and what it needs (assets, a table)."""
    return {"kind": kind, "lake": _fields(lake), "kafka": _fields(kafka), **more}


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
    """A TABLE, BACKFILL or CHECK step's answer from the endpoint; None when none is up."""
    if (endpoint := endpoint_for(spark, lake)) is None:
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
