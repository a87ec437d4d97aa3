"""`lakehouse serve`: Spark's own Spark Connect server over the lake, read-only, with the tables by name.

Any Spark Connect client (`lakehouse sql` and `history`, a notebook, PySpark's `SparkSession.builder.remote`)
reaches its warm session at `sc://127.0.0.1:15002`; each client's session shares the catalog, where the
lake's tables are registered by name (and re-registered every few seconds for tables created later). The
same process runs the steps Dagster runs send it on a second loopback port (endpoint.py says why), after
warming its session on the lake (warm_up.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Callable

from lakehouse.infra.settings import Settings
from lakehouse.serving.endpoint import HOST, Endpoint, EndpointError, _handler, running_endpoint, state_file
from lakehouse.serving.served_steps import RUN_LOCK, serve_step
from lakehouse.serving.warm_up import warm_up_runs

log = logging.getLogger("lakehouse")

DEFAULT_PORT = 15002   # Spark Connect's own default: what clients and notebooks try first
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


WARM_CONNECT = """
import sys
from pyspark.sql import SparkSession
client = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
client.sql("SHOW TABLES").collect()
client.stop()
"""


def _warm_connect(url: str) -> None:
    """Plan a first query through Spark Connect as a client would (the server's first one takes seconds).

    From a process of its own: this one's session builder holds the server's settings, which a client must not send.
    """
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", WARM_CONNECT, url], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    log.info("warmed up Spark Connect in %.1f s", time.monotonic() - started)


def serve(settings: Settings, port: int = DEFAULT_PORT) -> int:
    """Start the Spark Connect server, warm it, serve until SIGTERM or Ctrl-C; 0 when stopped."""
    from lakehouse.batch.catalog import register_tables
    from lakehouse.serving.guarded import answers, guarded_session, keep_registered

    other = running_endpoint(settings)
    if other is not None:
        raise EndpointError(f"lakehouse serve is already running for this lake (pid {other.pid}); "
                            f"stop it first (kill {other.pid}).")
    if answers(HOST, port):
        raise EndpointError(f"port {port} on {HOST} is taken by another program; choose another with --port.")
    conf = {"spark.plugins": CONNECT_PLUGIN, "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(port)}
    spark = guarded_session(settings, "lakehouse-serve", read_only=True, conf=conf)
    started = time.monotonic()
    register_tables(spark, settings.lake_root)
    stop = threading.Event()
    url = f"sc://{HOST}:{port}"
    try:
        _warm_connect(url)
    except Exception as exc:  # noqa: BLE001 - a client's first query is then the slow one, nothing else
        log.warning("could not warm Spark Connect up (%s)", str(exc).splitlines()[0][:300] if str(exc) else exc)
    log.info("warmed up in %.1f s", time.monotonic() - started)
    look_now = threading.Event()
    threading.Thread(target=keep_registered, args=(spark, settings, stop, look_now), name="register-tables",
                     daemon=True).start()

    def step(request: dict[str, Any], emit: Callable[[dict], None]) -> None:
        serve_step(spark, settings, request, emit)
        look_now.set()   # a table the step created can be queried by name at once, not a few seconds later

    server = ThreadingHTTPServer((HOST, 0), _handler(step))
    endpoint = Endpoint(os.getpid(), server.server_address[1], settings.lake_root, port)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _s, _f: stop.set())
    threading.Thread(target=server.serve_forever, name="run-steps", daemon=True).start()
    path = state_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": endpoint.pid, "port": endpoint.port, "lake_root": endpoint.lake_root,
                               "connect_port": port}))
    tmp.replace(path)   # readers never see half a file
    print(f"lakehouse serve: Spark Connect for {settings.lake_root} at {endpoint.url} (pid {endpoint.pid}), read-only; "
          "lakehouse sql, lakehouse history and Dagster runs now use it. Ctrl-C or SIGTERM stops it.", flush=True)
    if settings.serve_warm_up:
        threading.Thread(target=warm_up_runs, args=(spark, settings, RUN_LOCK), name="serve-warm-up",
                         daemon=True).start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        look_now.set()   # the registering loop sees `stop` and ends
        server.shutdown()
        if running_endpoint(settings) == endpoint:
            path.unlink(missing_ok=True)
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - its JVM was stopped with it (a signal to the whole group)
            log.info("the Spark JVM had already stopped")
    print("lakehouse serve: stopped.", flush=True)
    return 0
