"""`lakehouse serve`: a long-lived Spark session that `lakehouse sql`, `lakehouse history` and Dagster runs use.

It answers queries (sql.py) and runs the steps Dagster runs send it (served_steps.py) on the endpoint of
endpoint.py, after warming its session on the lake (warm_up.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Callable

from lakehouse.infra.settings import Settings
from lakehouse.serving.endpoint import HOST, Endpoint, EndpointError, _handler, running_endpoint, state_file
from lakehouse.serving.served_steps import RUN_LOCK, serve_step
from lakehouse.serving.sql import answer, run_sql
from lakehouse.serving.warm_up import warm_up_runs

log = logging.getLogger("lakehouse")


def _warm_up(spark, settings: Settings) -> None:
    """The run path's warm-up (warm_up.py), holding the lock run steps take."""
    warm_up_runs(spark, settings, RUN_LOCK)


def serve(settings: Settings) -> int:
    """Start Spark, warm it on the lake, answer requests until SIGTERM or Ctrl-C; 0 when stopped."""
    from lakehouse.infra.spark import get_spark

    other = running_endpoint(settings)
    if other is not None:
        raise EndpointError(f"lakehouse serve is already running for this lake (pid {other.pid}); "
                            f"stop it first (kill {other.pid}).")
    spark = get_spark(settings, "lakehouse-serve")
    started = time.monotonic()
    run_sql(spark, settings.lake_root, "SELECT 1")   # plans a first query: registers the tables, loads the parser
    log.info("warmed up in %.1f s", time.monotonic() - started)

    lock = threading.Lock()   # one query at a time: they share the session's catalog and 2 cores (a run's step
                              # takes a lock of its own: a query need not wait for a catch-up)

    def run(request: dict[str, Any]) -> dict[str, Any]:
        with lock:
            return answer(spark, settings, request)

    def step(request: dict[str, Any], emit: Callable[[dict], None]) -> None:
        serve_step(spark, settings, request, emit)

    server = ThreadingHTTPServer((HOST, 0), _handler(run, step))
    endpoint = Endpoint(os.getpid(), server.server_address[1], settings.lake_root)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _s, _f: stop.set())
    threading.Thread(target=server.serve_forever, name="sql-endpoint", daemon=True).start()
    path = state_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": endpoint.pid, "port": endpoint.port, "lake_root": endpoint.lake_root}))
    tmp.replace(path)   # readers never see half a file
    print(f"lakehouse serve: SQL endpoint for {settings.lake_root} on {HOST}:{endpoint.port} (pid {endpoint.pid}); "
          "lakehouse sql and lakehouse history now use it. Ctrl-C or SIGTERM stops it.", flush=True)
    if settings.serve_warm_up:
        threading.Thread(target=_warm_up, args=(spark, settings), name="serve-warm-up", daemon=True).start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        if running_endpoint(settings) == endpoint:
            path.unlink(missing_ok=True)
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - its JVM was stopped with it (a signal to the whole group)
            log.info("the Spark JVM had already stopped")
    print("lakehouse serve: stopped.", flush=True)
    return 0
