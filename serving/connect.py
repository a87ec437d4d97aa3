"""A Spark Connect client's session on `lakehouse serve`, as `lakehouse sql` and `history` (and a notebook) open one."""

from __future__ import annotations

import time

from pyspark.sql import SparkSession

from lakehouse.infra.settings import Settings
from lakehouse.serving.endpoint import Endpoint, EndpointError, running_endpoint


def remote_session(endpoint: Endpoint) -> SparkSession:
    """A new Spark Connect session on the server (no JVM here): the same as `SparkSession.builder.remote(url)`."""
    from lakehouse.infra.spark import quiet_error_context_loggers

    quiet_error_context_loggers()
    try:
        session = SparkSession.builder.remote(endpoint.url).getOrCreate()
        session.version   # the first call to the server: a server that does not answer fails here, in one sentence
        return session
    except Exception as exc:  # noqa: BLE001 - gRPC's many errors: the server stopped or its port is not Spark's
        raise EndpointError(f"lakehouse serve (pid {endpoint.pid}) did not answer at {endpoint.url}: "
                            f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None


def served_session(settings: Settings) -> tuple[SparkSession, float] | None:
    """A session on this lake's `lakehouse serve` and the seconds connecting took, or None when none is up."""
    endpoint = running_endpoint(settings)
    if endpoint is None:
        return None
    started = time.monotonic()
    return remote_session(endpoint), time.monotonic() - started


def is_remote(spark: SparkSession) -> bool:
    """Whether the session is a Spark Connect client's (its JVM is the server's, out of reach)."""
    return not hasattr(spark, "_jsparkSession")
