"""A real PostgreSQL on this machine, started and stopped by the project like the broker: a pipeline's operational
database, its write-ahead log at `wal_level=logical` so that Debezium can capture its changes.

Its data folder and log are in <home>/postgres; it listens on 127.0.0.1 only, with trust authentication for the
project's role (a loopback database for trying CDC, not one to hold anything that must last). PostgreSQL refuses
to run as root, so under root it runs as the system user `postgres` that Debian's package creates.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lakehouse.infra.processes import pid_alive, port_is_free, process_args
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

ROLE = "lakehouse"            # the database role the project and Debezium connect as (a superuser, trust on loopback)
SERVICE_USER = "postgres"     # the system user the server runs as when the project runs as root
# Logical decoding for Debezium's pgoutput plugin: a replication slot per connector, a WAL sender per stream.
SERVER_OPTIONS = {"wal_level": "logical", "max_replication_slots": "8", "max_wal_senders": "8"}


class PostgresError(RuntimeError):
    """PostgreSQL cannot be found, started or reached; the message says why and what to do."""


def find_bin_dir(configured: str = "") -> Path:
    """The folder of PostgreSQL's server programs: the setting's, else pg_ctl on PATH, else Debian's newest."""
    candidates = [configured] if configured else []
    if not configured:
        on_path = shutil.which("pg_ctl")
        candidates += [str(Path(on_path).parent)] if on_path else []
        candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name),
                             reverse=True)
    for folder in candidates:
        if all((Path(folder) / program).is_file() for program in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    if configured:
        raise PostgresError(f"LAKEHOUSE_POSTGRES_BIN={configured} does not hold initdb, pg_ctl and postgres; point it "
                            "at PostgreSQL's bin folder.")
    raise PostgresError("PostgreSQL's server programs (initdb, pg_ctl) were not found; install them (Debian: apt-get "
                        "install postgresql) or set LAKEHOUSE_POSTGRES_BIN to their folder.")


@dataclass(frozen=True)
class PostgresServer:
    """One PostgreSQL server on a loopback port, its data folder and log under `directory`."""

    host: str
    port: int
    directory: Path
    bin_dir: Path
    database: str

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def role(self) -> str:
        return ROLE

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={ROLE} dbname={self.database}"

    def read_pid(self) -> int | None:
        """The PID of this server's postmaster, from its own postmaster.pid; None when it is not running."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        args = process_args(pid)
        # PIDs are reused: only a postgres whose data folder is this one counts.
        if pid_alive(pid) and args and Path(args[0]).name == "postgres" and str(self.data_dir) in args:
            return pid
        return None

    def _as_service(self, command: Sequence[str]) -> list[str]:
        """`command` as the user the server runs as: this one, or `postgres` under root."""
        if os.geteuid() != 0:
            return list(command)
        runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin")
        if runuser is None:
            raise PostgresError("PostgreSQL refuses to run as root, and runuser (util-linux), which would run it as "
                                f"the user {SERVICE_USER!r}, is not installed; install util-linux or run the project "
                                "as another user.")
        return [runuser, "-u", SERVICE_USER, "--", *command]

    def _run(self, *command: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self._as_service(command), capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, cwd="/")

    def _prepare_folder(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        try:
            service = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            raise PostgresError(f"PostgreSQL refuses to run as root and there is no system user {SERVICE_USER!r} to "
                                "run it as; install Debian's postgresql package (it creates the user) or run the "
                                "project as another user.") from None
        os.chown(self.directory, service.pw_uid, service.pw_gid)
        if self._run("test", "-w", str(self.directory)).returncode != 0:
            raise PostgresError(f"PostgreSQL runs as the system user {SERVICE_USER!r} under root, and that user cannot "
                                f"reach {self.directory}; let others pass through its parent folders (chmod o+x) or "
                                "set LAKEHOUSE_HOME to a folder it can reach.")

    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def start(self, timeout_s: float = 120) -> int:
        """Create the data folder on first use, start the server and wait until it accepts connections; its PID."""
        running = self.read_pid()
        if running is not None:
            return running
        if not port_is_free(self.host, self.port):
            raise PostgresError(f"Port {self.port} on {self.host} is taken by another process; set "
                                "LAKEHOUSE_POSTGRES_PORT to a free port.")
        self._prepare_folder()
        if not self.initialized():
            made = self._run(str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", ROLE, "-A", "trust",
                             "-E", "UTF8", "--no-sync", "--no-instructions")
            if made.returncode != 0:
                raise PostgresError(f"initdb could not create {self.data_dir}: {_last_line(made)}")
            log.info("created the PostgreSQL data folder %s", self.data_dir)
        # The server's options on its command line, so that `ps` shows them and the port follows the setting.
        options = " ".join(f"-c {k}={v}" for k, v in {**SERVER_OPTIONS, "listen_addresses": self.host, "port": self.port,
                                                       "unix_socket_directories": self.data_dir}.items())
        started = self._run(str(self.bin_dir / "pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_file),
                            "-w", "-t", str(int(timeout_s)), "-o", options, timeout_s=timeout_s + 30)
        pid = self.read_pid()
        if started.returncode != 0 or pid is None:
            raise PostgresError(f"PostgreSQL did not start on {self.host}:{self.port}: {_last_line(started)} (log "
                                f"{self.log_file}).")
        return pid

    def stop(self, timeout_s: float = 60) -> int | None:
        """Stop the server (fast shutdown: open sessions and replication connections are ended); the PID stopped."""
        pid = self.read_pid()
        if pid is None:
            return None
        done = self._run(str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t",
                         str(int(timeout_s)), timeout_s=timeout_s + 30)
        if done.returncode != 0 and pid_alive(pid):
            log.warning("pg_ctl stop failed (%s); sending SIGKILL to %d", _last_line(done), pid)
            os.kill(pid, signal.SIGKILL)
        return pid

    def require_running(self) -> int:
        """The server's PID, or one sentence saying to start it."""
        pid = self.read_pid()
        if pid is None:
            raise PostgresError(f"PostgreSQL is not running at {self.host}:{self.port}; start it first with "
                                "`lakehouse postgres start`.")
        return pid

    def connect(self, database: str | None = None, **kwargs: Any) -> Any:
        """A psycopg connection to `database` (the pipeline's by default) as the project's role."""
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=ROLE, dbname=database or self.database,
                               connect_timeout=10, **kwargs)

    def setting(self, name: str) -> str:
        with self.connect("postgres") as conn:
            return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit code {proc.returncode}"


def local_postgres(settings: Settings, database: str) -> PostgresServer:
    """The server the settings name, holding `database` (a pipeline's operational database)."""
    return PostgresServer("127.0.0.1", settings.postgres_port, Path(settings.home) / "postgres",
                          find_bin_dir(settings.postgres_bin), database)
