"""A local S3-protocol server (moto's) in a process of its own: the object store of the tests and of a trial lake.

It keeps objects in memory: stopping it loses them. A lake that must last goes to AWS S3 or another store.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lakehouse.infra.processes import pid_alive, port_is_free, process_args, terminate
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


class S3ServerError(RuntimeError):
    """The local S3 server cannot start or be reached; the message says why."""


@dataclass(frozen=True)
class S3Server:
    """moto's server on one address, with its PID file and log in a state folder."""

    host: str
    port: int
    directory: Path

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.directory / "s3.pid"

    @property
    def log_file(self) -> Path:
        return self.directory / "s3.log"

    def read_pid(self) -> int | None:
        """The PID of this server's running process; a PID file naming anything else is removed as stale."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        args = process_args(pid)
        # PIDs are reused: only a moto server on this port is ever signalled.
        if pid_alive(pid) and "moto.server" in args and str(self.port) in args:
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self, buckets: tuple[str, ...] = (), timeout_s: float = 30) -> int:
        """Launch detached, wait until it answers, create the buckets; returns the PID (the running one's if up)."""
        running = self.read_pid()
        if running is None:
            if not port_is_free(self.host, self.port):
                raise S3ServerError(f"Port {self.port} on {self.host} is taken by another process; name a free port "
                                    "in LAKEHOUSE_S3_ENDPOINT.")
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)   # outlives the command that started it
            self.pid_file.write_text(str(proc.pid))
            self._wait_ready(proc, timeout_s)
            running = proc.pid
        for bucket in buckets:
            self.create_bucket(bucket)
        return running

    def _wait_ready(self, proc: subprocess.Popen, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                tail = self.log_file.read_text(errors="replace").strip().splitlines()[-3:]
                raise S3ServerError(f"The S3 server exited with code {proc.returncode} while starting; see "
                                    f"{self.log_file}. Last lines: {' | '.join(tail)}")
            if self.answers():
                return
            time.sleep(0.2)
        self.stop()
        raise S3ServerError(f"The S3 server did not answer within {timeout_s:.0f} s; see {self.log_file}.")

    def answers(self) -> bool:
        """Whether the server lists its buckets (S3's ListBuckets)."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def create_bucket(self, bucket: str) -> None:
        """S3's CreateBucket; a bucket that exists is kept as it is."""
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:     # BucketAlreadyOwnedByYou
                raise S3ServerError(f"Creating bucket {bucket!r} on {self.endpoint} failed: HTTP {exc.code}") from None

    def stop(self, timeout_s: float = 10) -> int | None:
        """SIGTERM the server by its PID, SIGKILL if it lingers; returns the PID stopped, or None."""
        pid = self.read_pid()
        if pid is None:
            return None
        terminate(pid, timeout_s, poll_s=0.1)
        self.pid_file.unlink(missing_ok=True)
        return pid



def lake_bucket(settings: Settings) -> str:
    """The bucket of an s3a:// lake root."""
    if not settings.lake_root.startswith("s3a://"):
        raise S3ServerError(f"LAKEHOUSE_LAKE_ROOT={settings.lake_root} is not on S3; set it to s3a://<bucket>/<folder>.")
    return urlsplit(settings.lake_root).netloc


def local_server(settings: Settings) -> S3Server:
    """The server LAKEHOUSE_S3_ENDPOINT names, which must be an http:// address on this machine."""
    parts = urlsplit(settings.s3_endpoint)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
        raise S3ServerError(f"LAKEHOUSE_S3_ENDPOINT={settings.s3_endpoint or '(none)'} is not a local address; set it to "
                            "http://127.0.0.1:<port> for the local S3 server.")
    return S3Server(parts.hostname, parts.port, Path(settings.home) / "s3")
