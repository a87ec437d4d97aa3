"""`lakehouse spark-cluster start|stop|status`: a Spark standalone cluster on this machine's loopback."""

from __future__ import annotations

import argparse
import sys
import time

from lakehouse.infra.settings import MEMORY, Settings, memory_bytes


def _memory(text: str) -> str:
    if not MEMORY.check(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; {MEMORY.allowed}")
    return text


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse spark-cluster`."""
    from lakehouse.cli.main import _integer as _bounded
    from lakehouse.infra.spark_cluster import DEFAULT_MEMORY, DEFAULT_PORT, DEFAULT_UI_PORT

    p = sub.add_parser(
        "spark-cluster", help="start, stop or check a Spark standalone cluster (a master and workers) on 127.0.0.1",
        description="Spark's own standalone master and workers, from the pyspark wheel, on 127.0.0.1. Their PID "
                    "files, logs and the workers' work folders (each application's executor logs) are in "
                    "<home>/spark-cluster. Point the lakehouse at it with "
                    "LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:PORT: every command's Spark then runs its tasks on the "
                    "cluster's executors.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("start", help="start the master and the workers in the background, and wait until they "
                                         "are registered",
                           description="Starts the master, then the workers, detached; returns once the master "
                                       "lists every worker ALIVE, and prints the master URL to set.")
    a.add_argument("--workers", type=_bounded(1, 64), default=1, help="workers to start (default 1)")
    a.add_argument("--cores", type=_bounded(1, 4096), default=None,
                   help="task slots each worker offers (default: twice this machine's cores, divided among the "
                        "workers, so that two applications run at once)")
    a.add_argument("--app-cores", type=_bounded(1, 4096), default=None,
                   help="slots an application gets at most, unless it sets spark.cores.max (default: this "
                        "machine's cores, the parallelism of local[*])")
    a.add_argument("--memory", type=_memory, default=DEFAULT_MEMORY,
                   help=f"memory each worker offers its executors (default {DEFAULT_MEMORY}: an application's "
                        "executor takes 1g unless LAKEHOUSE_SPARK_CONF sets spark.executor.memory)")
    a.add_argument("--port", type=_bounded(1, 65535), default=DEFAULT_PORT,
                   help=f"the master's port (default {DEFAULT_PORT}, Spark's own)")
    a.add_argument("--ui-port", type=_bounded(1, 65535), default=DEFAULT_UI_PORT,
                   help=f"the master's web UI and JSON status (default {DEFAULT_UI_PORT}, Spark's own); worker i's web "
                        "UI is on this port + i")
    actions.add_parser("stop", help="stop the workers (and their executors), then the master, by PID")
    actions.add_parser("status", help="the master's workers, cores and running applications (exit 1 if not running)")
    p.set_defaults(fn=cmd_spark_cluster)


def cmd_spark_cluster(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.spark_cluster import ClusterError

    try:
        return {"start": _start, "stop": _stop, "status": _status}[args.action](settings, args)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _start(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.spark import EXECUTOR_MEMORY
    from lakehouse.infra.spark_cluster import ClusterSpec, check_can_start, cluster_dir, start

    spec = ClusterSpec(workers=args.workers, cores=args.cores or 0, app_cores=args.app_cores or 0,
                       memory=args.memory, port=args.port, ui_port=args.ui_port)
    check_can_start(settings, spec)
    print(f"starting a Spark master and {spec.workers} worker{'s' if spec.workers > 1 else ''} "
          f"({spec.worker_cores} cores, {spec.memory} each; at most {spec.application_cores} cores per application) "
          "on 127.0.0.1: JVMs, 10-30 s", flush=True)
    started = time.monotonic()
    state = start(settings, spec)
    print(f"Spark cluster running in {time.monotonic() - started:.0f} s: master {spec.master_url}, web UI "
          f"{spec.ui_url}, {len(state['workers'])} worker{'s' if len(state['workers']) > 1 else ''}, "
          f"{state['cores']} cores. Logs and PID files in {cluster_dir(settings)}.")
    print(f"Run the lakehouse on it:\n  export LAKEHOUSE_SPARK_MASTER={spec.master_url}")
    executor = settings.spark_conf.get("spark.executor.memory", EXECUTOR_MEMORY)
    if MEMORY.check(executor) and memory_bytes(executor) > memory_bytes(spec.memory):
        print(f"warning: an application's executor asks for {executor} (spark.executor.memory), more than a worker "
              f"offers ({spec.memory}): no executor would start and its jobs would wait forever; start the workers "
              f"with --memory {executor}.")
    return 0


def _stop(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.spark_cluster import stop

    stopped = stop(settings)
    if not stopped:
        print("The Spark cluster is not running.")
        return 0
    print("Stopped the Spark cluster: " + ", ".join(f"{name} (pid {pid})" for name, pid in stopped.items()) + ".")
    return 0


def _status(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.spark_cluster import ClusterError, ClusterSpec, master, master_state, running_pids, saved_spec
    from lakehouse.serving.sql import format_table

    spec = saved_spec(settings) or ClusterSpec()
    pids = running_pids(settings)
    if "master" not in pids:
        print("The Spark cluster is not running (`lakehouse spark-cluster start` starts it)."
              + (f" Workers still running without their master: {', '.join(f'{n} pid {p}' for n, p in pids.items())}; "
                 "`lakehouse spark-cluster stop` stops them." if pids else ""))
        return 1
    try:
        state = master_state(spec.ui_port)
    except ClusterError as exc:
        print(f"The Spark master runs (pid {pids['master']}) but {str(exc).removeprefix('the ')}")
        return 1
    print(f"Spark master {state.get('url', spec.master_url)} (pid {pids['master']}): {state.get('status')}, web UI "
          f"{spec.ui_url}, logs in {master(settings).directory.parent}")
    rows = [(w["id"], f"{w['host']}:{w['port']}", w["state"], w["cores"], w["coresused"], f"{w['memory']} MiB",
             f"{w['memoryused']} MiB") for w in state.get("workers", [])]
    print(format_table(("worker", "host:port", "state", "cores", "cores used", "memory", "memory used"), rows)
          if rows else "No workers registered.")
    alive = sum(1 for w in state.get("workers", []) if w["state"] == "ALIVE")
    print(f"Total: {alive} worker{'s' if alive != 1 else ''} alive, {state.get('cores', 0)} cores "
          f"({state.get('coresused', 0)} used), {state.get('memory', 0)} MiB memory ({state.get('memoryused', 0)} used).")
    apps = state.get("activeapps", [])
    if not apps:
        print("Running applications: none.")
        return 0
    print("Running applications:")
    print(format_table(("application", "name", "state", "cores", "memory per executor", "running for"), [
        (app["id"], app["name"], app["state"], app["cores"], f"{app.get('memoryperexecutor', app.get('memoryperslave'))} MiB",
         f"{app.get('duration', 0) / 1000:.0f} s") for app in apps]))
    return 0
