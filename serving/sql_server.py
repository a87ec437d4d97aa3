"""`lakehouse sql-server`: Spark's Thrift JDBC/ODBC server over the lake's tables by name, read-only by default.

BI tools, beeline and any HiveServer2 client (JDBC `jdbc:hive2://127.0.0.1:10000/default`, Python's PyHive)
speak to it. It runs in a process of its own, started in the background and stopped by PID like the broker:
a Spark session with Delta and the read-only guard (serving/jvm/ReadOnlyGuard.java), Spark's
HiveThriftServer2 started on that session, and a loop that registers tables created after the start. Each
client connection gets a session of its own that shares the catalog, so every table is seen by name.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lakehouse.infra.settings import Settings
from lakehouse.serving.guarded import answers

log = logging.getLogger("lakehouse")

DEFAULT_PORT = 10000   # HiveServer2's own default: what BI tools propose
STOP_WAIT_S = 30.0


class SqlServerError(RuntimeError):
    """The SQL server cannot start or stop; the message says why in one sentence."""


@dataclass(frozen=True)
class SqlServer:
    """A running `lakehouse sql-server`: where it listens, for which lake, and whether it refuses writes."""

    pid: int
    host: str
    port: int
    lake_root: str
    read_only: bool

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}/default"


def _state_file(settings: Settings) -> Path:
    return Path(settings.home) / "sql-server.json"


def log_file(settings: Settings) -> Path:
    return Path(settings.log_dir) / "sql-server.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:   # a zombie (exited, not yet reaped by its parent) is not a server
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def running_server(settings: Settings) -> SqlServer | None:
    """The SQL server of this home, if its process is alive."""
    try:
        server = SqlServer(**json.loads(_state_file(settings).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return server if _alive(server.pid) else None


def _last_error(log_path: Path) -> str:
    """The last line of the server's log that says what went wrong, for a start that failed."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "it left no log"
    errors = [line.strip() for line in lines if "Error" in line or "Exception" in line or "error:" in line]
    return (errors or lines or ["it left an empty log"])[-1][:400]


def start(settings: Settings, host: str = "127.0.0.1", port: int = DEFAULT_PORT, writable: bool = False,
          timeout_s: float = 240.0) -> SqlServer:
    """Start the server in the background and return once it accepts connections."""
    other = running_server(settings)
    if other is not None:
        raise SqlServerError(f"a SQL server is already running for this home on {other.host}:{other.port} "
                             f"(pid {other.pid}); `lakehouse sql-server stop` stops it.")
    if answers(host, port):
        raise SqlServerError(f"port {port} on {host} is taken by another program; choose another with --port.")
    from lakehouse.serving.guard_jar import build_guard

    try:
        build_guard(settings.jars_dir)
    except RuntimeError as exc:
        raise SqlServerError(f"{exc}.") from None
    log_path = log_file(settings)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _state_file(settings).unlink(missing_ok=True)
    command = [sys.executable, "-m", "lakehouse.serving.sql_server", "--host", host, "--port", str(port)]
    with open(log_path, "ab") as out:
        # A session of its own: a Ctrl-C in the terminal that started it does not stop the server.
        proc = subprocess.Popen(command + (["--writable"] if writable else []), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SqlServerError(f"the SQL server stopped while starting (exit {proc.returncode}): "
                                 f"{_last_error(log_path)} (log: {log_path}).")
        server = running_server(settings)
        if server is not None and server.pid == proc.pid and answers(host, port):
            return server
        time.sleep(0.5)
    _stop_pid(proc.pid)
    raise SqlServerError(f"the SQL server did not accept connections within {timeout_s:.0f} s and was stopped "
                         f"(log: {log_path}).")


def _stop_pid(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + STOP_WAIT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def stop(settings: Settings) -> SqlServer | None:
    """Stop this home's server (SIGTERM to its process group, SIGKILL after 30 s); the one stopped, or None."""
    server = running_server(settings)
    if server is not None:
        _stop_pid(server.pid)
    _state_file(settings).unlink(missing_ok=True)
    return server


def _open_first_session(spark, host: str, port: int) -> None:
    """Connect and disconnect once over JDBC, before clients do: Hive builds its (empty) metastore on the first
    disconnect, about 12 s that the first client would otherwise wait for."""
    jvm = spark._jvm
    jvm.java.lang.Class.forName("org.apache.hive.jdbc.HiveDriver")
    address = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    started = time.monotonic()
    jvm.java.sql.DriverManager.getConnection(f"jdbc:hive2://{address}:{port}/default", "lakehouse", "").close()
    log.info("first JDBC session opened and closed in %.1f s", time.monotonic() - started)


def _serve(settings: Settings, host: str, port: int, read_only: bool) -> int:
    """The server process: Spark with the guard, the Thrift server on it, tables registered until SIGTERM."""
    from lakehouse.serving.guarded import guarded_session, keep_registered

    scratch = Path(settings.home) / "sql-server"
    conf = {
        "spark.hadoop.hive.server2.thrift.bind.host": host,
        "spark.hadoop.hive.server2.thrift.port": str(port),
        # Hive's working folders under the home, not /tmp/hive shared with every other user of the machine.
        "spark.hadoop.hive.exec.scratchdir": str(scratch / "scratch"),
        "spark.hadoop.hive.exec.local.scratchdir": str(scratch / "local-scratch"),
        "spark.hadoop.hive.downloaded.resources.dir": str(scratch / "resources"),
        "spark.hadoop.hive.server2.logging.operation.log.location": str(scratch / "operation-logs"),
        # Hive opens a metastore when a client's session closes; without a database of its own it retried for
        # 20 s on every disconnect. The tables are in Spark's catalog: this one stays empty.
        "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:memory:lakehouse-sql-server;create=true",
    }
    spark = guarded_session(settings, "lakehouse-sql-server", read_only, conf)
    from lakehouse.batch.catalog import register_tables

    names = register_tables(spark, settings.lake_root)
    server = spark._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())
    _open_first_session(spark, host, port)
    state = SqlServer(os.getpid(), host, port, settings.lake_root, read_only)
    path = _state_file(settings)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state)))
    tmp.replace(path)   # readers never see half a file
    log.info("SQL server on %s (pid %d, %s) with %d tables: %s", state.jdbc_url, state.pid,
             "read-only" if read_only else "writable", len(names), ", ".join(names) or "none yet")
    stopping, wake = threading.Event(), threading.Event()

    def on_signal(_signum, _frame) -> None:
        stopping.set()
        wake.set()   # the registering loop's wait ends at once

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        keep_registered(spark, settings, stopping, wake)
    finally:
        log.info("SQL server stopping")
        server.stop()
        spark.stop()
        if running_server(settings) == state:
            path.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the server process that `start` launches."""
    parser = argparse.ArgumentParser(prog="python -m lakehouse.serving.sql_server")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--writable", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return _serve(Settings.from_env(), args.host, args.port, read_only=not args.writable)


if __name__ == "__main__":
    sys.exit(main())
