"""`lakehouse serve`: a long-lived Spark session that `lakehouse sql`, `lakehouse history` and Dagster runs use.

Starting Spark costs a JVM and 10-40 s on a small machine; a query over a gold table then takes about a
second. So `lakehouse serve` starts one session, keeps it, and answers queries on a loopback HTTP port
(127.0.0.1 only, a port the system picks) that it writes with its PID to `<home>/sql-endpoint.json`. The
commands read that file: with an endpoint up for the same lake they send the query there, otherwise they
start Spark themselves, as before, and say so. The endpoint runs the very same code (`orchestration.sql`):
the same read-only guard, the same one-sentence errors, and tables that appear after it started are seen.
A Dagster run's catch-up steps (`lakehouse run`, a materialization in the UI) run there too, in the same
session (orchestration/served_runs.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from lakehouse.infra.settings import Settings

log = logging.getLogger("lakehouse")

HOST = "127.0.0.1"
# A Dagster run's steps (orchestration/served_runs.py), answered as they run.
STREAMED = ("catch_up", "table", "backfill", "check")


def state_file(settings: Settings) -> Path:
    return Path(settings.home) / "sql-endpoint.json"


@dataclass(frozen=True)
class Endpoint:
    """A running `lakehouse serve`: its PID, port and the lake it answers for."""

    pid: int
    port: int
    lake_root: str


def running_endpoint(settings: Settings) -> Endpoint | None:
    """The endpoint serving this home's lake, if one is up (its process alive and its lake this one)."""
    try:
        state = json.loads(state_file(settings).read_text())
        endpoint = Endpoint(int(state["pid"]), int(state["port"]), str(state["lake_root"]))
        os.kill(endpoint.pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return endpoint if endpoint.lake_root == settings.lake_root else None


class EndpointError(RuntimeError):
    """The endpoint cannot start, or answered with something other than a result or a user's error."""


def ask(settings: Settings, request: dict[str, Any]) -> dict[str, Any] | None:
    """The endpoint's answer to one request, or None when no endpoint is up (the caller then runs it itself)."""
    endpoint = running_endpoint(settings)
    if endpoint is None:
        return None
    body = json.dumps(request).encode()
    call = urllib.request.Request(f"http://{HOST}:{endpoint.port}/", data=body, method="POST",
                                  headers={"Content-Type": "application/json"})
    try:
        # No timeout on the answer: a query over a large table may take minutes; connecting is immediate.
        with urllib.request.urlopen(call) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"lakehouse serve (pid {endpoint.pid}) failed on this request: "
                            f"{exc.read().decode(errors='replace')[:500]}") from None
    except (urllib.error.URLError, ConnectionError):
        return None   # it stopped between the check and the call


def answer(spark, settings: Settings, request: dict[str, Any]) -> dict[str, Any]:
    """What `lakehouse sql` or `lakehouse history` prints for `request`, run in `spark`: text, or a user's error."""
    from lakehouse.orchestration.sql import SqlError, format_table, history, run_sql

    try:
        if request.get("kind") == "history":
            columns, rows = history(spark, settings.lake_root, request["table"], request.get("limit"))
            return {"text": format_table(columns, rows)}
        columns, rows, truncated = run_sql(spark, settings.lake_root, request["query"], int(request.get("limit", 100)))
    except SqlError as exc:
        return {"error": str(exc)}
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown: raise --limit' if truncated else ''})"
    return {"text": format_table(columns, rows) + "\n" + footer}


def _handler(run: Callable[[dict[str, Any]], dict[str, Any]],
             stream: Callable[[dict[str, Any], Callable[[dict], None]], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _stream(self, request: dict[str, Any]) -> None:
            """A run's step: its log lines and events go back one JSON line each as they happen (HTTP/1.0: the
            connection's end ends the answer)."""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()

            def emit(message: dict) -> None:
                try:
                    self.wfile.write(json.dumps(message).encode() + b"\n")
                    self.wfile.flush()
                except OSError:
                    pass   # the run stopped waiting (cancelled); its flows still end on a commit here

            started = time.monotonic()
            stream(request, emit)
            log.info("ran a %s step in %.2f s", request.get("kind"), time.monotonic() - started)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if request.get("kind") in STREAMED:
                    return self._stream(request)
                started = time.monotonic()
                body, status = json.dumps(run(request)).encode(), 200
                log.info("answered %s in %.2f s", request.get("kind", "sql"), time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - the client shows it; the endpoint keeps serving
                log.exception("request failed")
                body, status = f"{type(exc).__name__}: {exc}".encode(), 500
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass   # one line per answer is logged above

    return Handler


def _warm_up(spark, settings: Settings) -> None:
    """The run path's warm-up (orchestration/serve_warm_up.py), holding the lock run steps take."""
    from lakehouse.orchestration.served_runs import RUN_LOCK
    from lakehouse.orchestration.serve_warm_up import warm_up_runs

    warm_up_runs(spark, settings, RUN_LOCK)


def serve(settings: Settings) -> int:
    """Start Spark, warm it on the lake, answer requests until SIGTERM or Ctrl-C; 0 when stopped."""
    from lakehouse.infra.spark import get_spark
    from lakehouse.orchestration.served_runs import serve_step
    from lakehouse.orchestration.sql import run_sql

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
