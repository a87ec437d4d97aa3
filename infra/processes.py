"""Processes the project runs in the background (brokers, Spark daemons, the S3 server): alive, what, stop by PID."""

from __future__ import annotations

import os
import signal
import socket
import time


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is not a running process.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def process_args(pid: int) -> list[str]:
    """The command line of a running process, or [] when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return [arg.decode(errors="replace") for arg in cmdline.read().split(b"\0") if arg]
    except OSError:
        return []


def reap(pid: int) -> None:
    """Collect a child that exited, so that it does not linger as a zombie; nothing for another's process."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def terminate(pid: int, timeout_s: float, poll_s: float = 0.2) -> bool:
    """SIGTERM `pid`, wait up to `timeout_s` for it to exit, SIGKILL it if it lingers; True when it had to be killed."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        reap(pid)
        time.sleep(poll_s)
    killed = pid_alive(pid)
    if killed:
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            reap(pid)
            time.sleep(0.1)
    return killed
