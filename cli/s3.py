"""`lakehouse s3 start|stop|status`: a local S3-protocol server (moto's) for trying a lake on s3a:// on one machine."""

from __future__ import annotations

import argparse
import sys

from lakehouse.infra.settings import Settings


def add_s3_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse s3`."""
    p = sub.add_parser(
        "s3", help="start, stop or check a local S3 server (moto) at LAKEHOUSE_S3_ENDPOINT for a lake on s3a://",
        description="Serves the address LAKEHOUSE_S3_ENDPOINT names (http://127.0.0.1:<port>) and creates the bucket "
                    "of LAKEHOUSE_LAKE_ROOT (s3a://<bucket>/<folder>); PID file and log in <home>/s3. It keeps "
                    "objects in memory: stopping it loses the lake. For a lake that lasts, point the settings at "
                    "AWS S3 or another S3-compatible store.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.set_defaults(fn=cmd_s3)


def cmd_s3(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.s3_server import S3ServerError, lake_bucket, local_server

    try:
        server = local_server(settings)
        if args.action == "start":
            bucket = lake_bucket(settings)
            pid = server.start((bucket,))
            print(f"S3 server (moto) running, pid {pid}, at {server.endpoint} with bucket {bucket}; log {server.log_file}.")
            print("The lake's commands need LAKEHOUSE_S3_PATH_STYLE=true and any AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY in their environment.")
            return 0
        if args.action == "stop":
            pid = server.stop()
            print(f"S3 server stopped (pid {pid})." if pid else "S3 server was not running.")
            return 0
        pid = server.read_pid()
        running = pid is not None and server.answers()
        print(f"S3 server running, pid {pid}, at {server.endpoint}." if running
              else f"S3 server is not running at {server.endpoint}.")
        return 0 if running else 1
    except S3ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
