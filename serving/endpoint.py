"""`lakehouse serve`'s endpoint: where it is, how to ask it, and its HTTP handler (the server is server.py).

Starting Spark costs a JVM and 10-40 s on a small machine; a query over a gold table then takes about a
second. So `lakehouse serve` starts one session, keeps it, and answers queries on a loopback HTTP port
(127.0.0.1 only, a port the system picks) that it writes with its PID to `<home>/sql-endpoint.json`. The
commands read that file: with an endpoint up for the same lake they send the query there, otherwise they
start Spark themselves, as before, and say so. The endpoint runs the very same code (`serving/sql.py`):
the same read-only guard, the same one-sentence errors, and tables that appear after it started are seen.
A Dagster run's catch-up steps (`lakehouse run`, a materialization in the UI) run there too, in the same
session (serving/remote_runs.py sends them, serving/served_steps.py runs them).
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable

from lakehouse.infra.settings import Settings

log = logging.getLogger("lakehouse")

HOST = "127.0.0.1"
# A Dagster run's steps (remote_runs.py), answered as they run.
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
