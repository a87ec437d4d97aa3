"""Where `lakehouse serve` is (its state file) and its run-step handler; the server itself is server.py.

`lakehouse serve` is a Spark Connect server: `lakehouse sql`, `lakehouse history`, notebooks and any Spark
Connect client reach its warm session at `sc://127.0.0.1:<port>` (connect.py). A Dagster run's steps cannot
go over Spark Connect: the flows' writers call Delta's Python API and the JVM, which a Connect session does
not have (no Delta Connect plugin is served for this Delta). So the same process also runs them, in its own
session, on a second loopback port: remote_runs.py sends a step, served_steps.py runs it, and its log
lines and events come back here one JSON line each. Both ports and the PID are in `<home>/serve.json`.
"""

from __future__ import annotations

import json
import logging
import os
import time
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
    return Path(settings.home) / "serve.json"


@dataclass(frozen=True)
class Endpoint:
    """A running `lakehouse serve`: its PID, run-step port, Spark Connect port and the lake it serves."""

    pid: int
    port: int
    lake_root: str
    connect_port: int

    @property
    def url(self) -> str:
        """What a Spark Connect client passes to `SparkSession.builder.remote`."""
        return f"sc://{HOST}:{self.connect_port}"


def running_endpoint(settings: Settings) -> Endpoint | None:
    """The endpoint serving this home's lake, if one is up (its process alive and its lake this one)."""
    try:
        state = json.loads(state_file(settings).read_text())
        endpoint = Endpoint(int(state["pid"]), int(state["port"]), str(state["lake_root"]), int(state["connect_port"]))
        os.kill(endpoint.pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return endpoint if endpoint.lake_root == settings.lake_root else None


class EndpointError(RuntimeError):
    """The endpoint cannot start, or answered with something other than a result or a user's error."""


def _handler(stream: Callable[[dict[str, Any], Callable[[dict], None]], None]) -> type[BaseHTTPRequestHandler]:
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
                body, status = f"not a run step: {request.get('kind')!r}".encode(), 400
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
