"""Where a run's step gets Spark: lakehouse serve's warm session, this process's session, or a new one it starts.

The step's log says that it starts a session only when it does, with how long the start took; a step that
reuses the session an earlier step of the run started (the in-process executor runs them all in one
process) or that runs on lakehouse serve says nothing about a JVM.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.orchestration.resources import KafkaResource, LakeResource, SparkResource
from lakehouse.serving import remote_runs


def served(context, spark: SparkResource, lake: LakeResource, kafka: KafkaResource, kind: str, **more: Any) -> Any:
    """The step's answer from lakehouse serve when one is up for the lake; None, saying nothing, when none is."""
    return remote_runs.on_endpoint(context, spark, lake, kafka, kind, **more)


def served_check(context, spark: SparkResource, lake: LakeResource, kafka: KafkaResource, asset: str, name: str):
    """An asset check computed on lakehouse serve when one is up; None, saying nothing, when none is."""
    return remote_runs.served_check(context, spark, lake, kafka, asset, name)


def run_session(context, spark) -> SparkSession:
    """The Spark session the step runs in; the log says so when the step starts it, with the start's real duration."""
    if getattr(spark, "warm", False) or SparkSession.getActiveSession() is not None:
        return spark.session()      # lakehouse serve's, or the one an earlier step of this run started
    started = time.monotonic()
    session = spark.session()
    context.log.info(f"started a Spark session for this run in {time.monotonic() - started:.1f} s (a new JVM; the "
                     "run's later steps reuse it; `lakehouse serve` keeps one warm that runs reuse)")
    return session
