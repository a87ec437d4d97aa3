"""The `lakehouse` command: set up, run the broker, produce events, materialize assets, query, open the UI."""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from lakehouse.infra.profiles import PROFILES
from lakehouse.infra.settings import HOST, Settings, SettingsError

log = logging.getLogger("lakehouse")

MAX_RECORDS = 100_000_000  # per produce or demo run: beyond it a typo is likelier than intent

DESCRIPTION = """\
A streaming lakehouse: Kafka topics feed Spark Structured Streaming jobs that write
Delta tables in bronze, silver and gold layers, driven as assets by Dagster.

Start here:
  lakehouse demo            everything once, end to end, on the embedded defaults
  lakehouse sql "SELECT * FROM gold_<mart> LIMIT 5"
  lakehouse ui              the Dagster UI on the same runs and assets

Every setting comes from a LAKEHOUSE_* environment variable: `lakehouse settings` lists them.
"""


def _setup_logging(settings: Settings, verbose: bool, quiet: bool = False) -> None:
    Path(settings.log_dir).mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    file_handler = logging.FileHandler(Path(settings.log_dir) / "lakehouse.log")
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    console.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    root.handlers[:] = [file_handler, console]
    for noisy in ("py4j", "urllib3", "alembic", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# ---------------------------------------------------------------- subcommands

def cmd_setup(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.jars import fetch_jars

    for name, count in fetch_jars(settings.jars_dir, maven_settings=settings.maven_settings, force=args.force).items():
        print(f"{name}: {count} jars in {Path(settings.jars_dir) / name}")
    _set_up_extras(settings)
    if settings.spark_class_archive:
        from lakehouse.infra.class_archive import build, usable_archive

        if usable_archive(settings.jars_dir) is None or args.force:
            print("class archive: building it from a small Spark run (once per set of jars, about a minute)", flush=True)
        try:
            built = build(settings.jars_dir, settings.spark_java_options, force=args.force)
        except RuntimeError as e:
            print(f"class archive: not built ({e}); Spark drivers start without it, a few seconds slower.")
            return 0
        done = "present" if built.reused else f"built in {built.seconds:.0f} s"
        print(f"class archive: {built.bytes / 2**20:.0f} MiB in {built.path} ({done}); each new Spark driver maps "
              "its classes from it (LAKEHOUSE_SPARK_CLASS_ARCHIVE=false to turn off)")
    return 0


def _set_up_extras(settings: Settings) -> None:
    """The SQL server's read-only guard and the Data Docs' offline assets: each optional, each said in one line."""
    from lakehouse.quality.docs_assets import AssetsMissing, fetch_docs_assets
    from lakehouse.serving.guard_jar import build_guard

    try:
        print(f"SQL server guard: {build_guard(settings.jars_dir)}")
    except RuntimeError as e:
        print(f"SQL server guard: not built ({e}); `lakehouse sql-server` cannot start until it is.")
    try:
        print(f"Data Docs assets: {fetch_docs_assets()} (the docs open with no network)")
    except (AssetsMissing, OSError, subprocess.SubprocessError) as e:
        print(f"Data Docs assets: not fetched ({e}); the docs will load them from public CDNs.")


def cmd_kafka(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.kafka_broker import BrokerError, local_node
    from lakehouse.infra.kafka_cluster import cluster_status, recorded_cluster

    node = local_node(settings)
    nodes = args.nodes or settings.kafka_nodes
    recorded = recorded_cluster(settings)
    if args.action == "start":
        if nodes > 1:
            return _start_kafka_cluster(settings, nodes)
        if recorded is not None and (running := recorded.running()):
            raise BrokerError(f"A Kafka cluster of {len(recorded.nodes)} nodes is running in this home (pids "
                              f"{', '.join(map(str, running.values()))}); stop it with `lakehouse kafka stop` first.")
        pid = node.start(settings.jars_dir)
        print(f"Kafka is running on {node.bootstrap} (pid {pid}); data in {node.data_dir}, logs in {node.logs_dir}.")
    elif args.action == "stop":
        stopped = recorded.stop() if recorded is not None else {}
        for node_id, pid in stopped.items():
            print(f"Stopped Kafka node {node_id} (pid {pid}).")
        pid = node.stop()
        if pid or not stopped:
            print(f"Stopped Kafka (pid {pid})." if pid else "Kafka is not running.")
    elif recorded is not None and (nodes > 1 or recorded.running()):
        status = cluster_status(recorded, settings.jars_dir)
        print(status.text())
        return 0 if status.healthy else 1
    elif nodes > 1:
        print(f"The Kafka cluster is not running (its {nodes} nodes would listen on "
              f"{', '.join(f'{settings.kafka_host}:{p}' for p, _ in settings.kafka_node_ports(nodes))}).")
        return 1
    else:
        pid = node.read_pid()
        if not pid:
            print(f"Kafka is not running (it would listen on {node.bootstrap}).")
            return 1
        from lakehouse.streaming.kafka_topics import admin_client

        names = sorted(t for t in admin_client(node.bootstrap).list_topics(timeout=5).topics if not t.startswith("__"))
        print(f"Kafka is running on {node.bootstrap} (pid {pid}); topics: {', '.join(names) or 'none'}.")
    return 0


def _start_kafka_cluster(settings: Settings, nodes: int) -> int:
    """`kafka start --nodes N`: N combined broker/controller nodes; the output says how to reach them all."""
    from lakehouse.infra.kafka_broker import BrokerError, local_node
    from lakehouse.infra.kafka_cluster import cluster_of

    cluster = cluster_of(settings, nodes)
    rf = settings.kafka_replication_factor
    addresses = {n.bootstrap for n in cluster.nodes}
    if rf > nodes and addresses & set(settings.kafka_bootstrap.split(",")):
        raise SettingsError(f"LAKEHOUSE_KAFKA_REPLICATION_FACTOR={rf} needs at least {rf} brokers but --nodes {nodes} "
                            f"starts {nodes}; start {rf} nodes, or set the factor to {nodes} or less (0 follows the cluster).")
    if (pid := local_node(settings).read_pid()) is not None:
        raise BrokerError(f"The one-node Kafka of this home is running (pid {pid}); stop it with `lakehouse kafka stop` "
                          f"before starting {nodes} nodes.")
    cluster.layout()   # a cluster formatted with other ports is refused before anything starts
    if down := len(cluster.nodes) - len(cluster.running()):
        print(f"starting {down} of {nodes} Kafka nodes (each a broker and a KRaft controller) in {cluster.directory}",
              flush=True)
    started = cluster.start(settings.jars_dir)
    for node in cluster.nodes:
        pid = started.get(node.node_id) or node.read_pid()
        print(f"  node {node.node_id}: {node.bootstrap} (controller {node.host}:{node.controller_port}), pid {pid}"
              + ("" if node.node_id in started else ", already running"))
    print(f"Kafka cluster of {nodes} nodes is running; bootstrap {cluster.bootstrap}. `lakehouse kafka status` shows "
          "the quorum and under-replicated partitions.")
    if nodes == 2:
        print("note: two controllers tolerate no loss (a majority of two is two); three tolerate one.")
    if settings.kafka_bootstrap != cluster.bootstrap:
        print(f"note: the other commands use LAKEHOUSE_KAFKA_BOOTSTRAP={settings.kafka_bootstrap}; set "
              f"LAKEHOUSE_KAFKA_NODES={nodes} so that they reach every node and keep reading when one is down.")
    return 0


def cmd_topics(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.retention import duration_ms
    from lakehouse.serving.sql import format_table
    from lakehouse.schemas import topics
    from lakehouse.streaming.kafka_topics import ensure_topics

    statuses = ensure_topics(settings.kafka_bootstrap, topics.ALL, replication_factor=settings.kafka_replication_factor,
                             replay_window_ms=duration_ms(settings.replay_window))
    rows = [
        (s.name, "created" if s.created else "exists", s.partitions, s.messages,
         "; ".join(f"{k}: spec {v['spec']}, live {v['live']}" for k, v in s.drift.items()) or "none")
        for s in statuses
    ]
    print(format_table(("topic", "state", "partitions", "records", "drift from spec"), rows))
    return 1 if any(s.drift for s in statuses) else 0


def cmd_produce(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.schemas.pipeline import Mix, active_pipeline
    from lakehouse.streaming.producer import produce

    pipeline = active_pipeline()
    if pipeline.demo is None:
        print(f"error: pipeline {pipeline.name} declares no demo data (Pipeline.demo); produce its events with your "
              "own producer.", file=sys.stderr)
        return 2
    TOPICS = pipeline.demo.topics
    mix = Mix(out_of_order=args.out_of_order, late=args.late, duplicate=args.duplicates, malformed=args.malformed)
    gen = pipeline.demo.events(seed=args.seed, start=args.start, events_per_second=args.event_rate, mix=mix)
    records = (next(gen) for _ in range(args.count))

    def progress(report) -> None:
        log.info("sent %d, acknowledged %d, failed %d", report.sent, report.delivered, report.failed)

    report = produce(records, bootstrap=settings.kafka_bootstrap, rate=args.rate, progress=progress,
                     topics=TOPICS)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.by_kind.items()))
    topics = ", ".join(f"{t}: {n}" for t, n in sorted(report.by_topic.items()))
    print(f"Sent {report.sent} records ({kinds}); {report.delivered} acknowledged, {report.failed} failed, "
          f"in {report.duration_s}s. Per topic: {topics}.")
    if report.failed:
        print(f"Delivery errors: {'; '.join(report.errors[:3])}", file=sys.stderr)
        return 1
    return 0


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.orchestration import runs

    result = runs.catch_up(settings, args.assets or None, command=shlex.join(["lakehouse", "run", *args.assets]))
    for name, meta in runs.tables_metadata(result).items():
        shown = {k: v for k, v in meta.items() if k in (
            "rows_written", "quarantined", "late_arrivals", "duplicates_dropped", "delta_version", "records_consumed",
            "retained_records", "partitions", "duration_s", "dagster/row_count", "watermark", "state_rows", "waiting_for",
            "partitions_touched")}
        print(f"{name}: " + ", ".join(f"{k.split('/')[-1]}={v}" for k, v in shown.items()))
    print(f"run {result.run_id} of job catch_up (lakehouse ui shows it)")
    return runs.exit_status(result)


def _answer(settings: Settings, request: dict, app_name: str) -> int:
    """Print what `lakehouse sql` or `history` answers to `request` and return the exit code.

    With `lakehouse serve` up the query goes to its warm session over Spark Connect (no JVM here); otherwise
    the same code runs in a Spark session of this process.
    """
    from lakehouse.serving.connect import served_session
    from lakehouse.serving.sql import answer

    lake_log = logging.getLogger("lakehouse")
    served = served_session(settings)
    if served is not None:
        spark, connected_s = served
        started = time.monotonic()
        try:
            result = answer(spark, settings, request)
        finally:
            spark.stop()   # a Connect client's stop closes its session on the server, not the server
        lake_log.info("answered %s over Spark Connect in %.2f s (connected in %.2f s)", request["kind"],
                      time.monotonic() - started, connected_s)
    else:
        notice = ("no lakehouse serve running for this lake: starting Spark for this one query, a new JVM; "
                  "`lakehouse serve` keeps one warm and answers in about a second")
        lake_log.info(notice)
        if sys.stderr.isatty():   # a hint for a person; a script's stderr keeps to errors
            print(f"({notice})", file=sys.stderr, flush=True)
        from lakehouse.infra.spark import get_spark

        result = answer(get_spark(settings, app_name), settings, request)
    if "error" in result:
        print(f"error: {result['error']}", file=sys.stderr)
        return 2
    print(result["text"])
    return 0


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    return _answer(settings, {"kind": "sql", "query": args.query, "limit": args.limit}, "lakehouse-sql")


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    return _answer(settings, {"kind": "history", "table": args.table, "limit": args.limit}, "lakehouse-history")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.serving.server import serve

    return serve(settings, args.port)


def _beeline(settings: Settings, beeline_args: list[str]) -> int:
    """Run the beeline of pyspark's wheel connected to this home's SQL server; its exit code."""
    import getpass

    import pyspark

    from lakehouse.serving import sql_server

    server = sql_server.running_server(settings)
    if server is None:
        print("The SQL server is not running (`lakehouse sql-server start` starts it).", file=sys.stderr)
        return 1
    spark_home = Path(pyspark.__file__).resolve().parent
    command = [str(spark_home / "bin" / "beeline"), "-u", server.jdbc_url, "-n", getpass.getuser(), *beeline_args]
    return subprocess.call(command, env={**os.environ, "SPARK_HOME": str(spark_home)})


def cmd_sql_server(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.serving import sql_server

    if args.action == "beeline":
        return _beeline(settings, args.passed)
    if args.action == "start":
        if (other := sql_server.running_server(settings)) is not None:
            raise sql_server.SqlServerError(f"a SQL server is already running for this home on {other.jdbc_url} "
                                            f"(pid {other.pid}); `lakehouse sql-server stop` stops it.")
        mode = "writable" if args.writable else "read-only"
        print(f"starting the SQL server (Spark's Thrift JDBC/ODBC server, {mode}) on {args.host}:{args.port}: a new "
              "Spark JVM, 10-40 s", flush=True)
        server = sql_server.start(settings, args.host, args.port, writable=args.writable)
        print(f"SQL server running (pid {server.pid}, {mode}) for {server.lake_root}. Connect with\n"
              f"  lakehouse sql-server beeline          (Spark's beeline on {server.jdbc_url})\n"
              f"  python: pyhive.hive.connect(host={server.host!r}, port={server.port})\n"
              f"Log: {sql_server.log_file(settings)}. `lakehouse sql-server stop` stops it.")
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"warning: {args.host} is not loopback and the server asks no password: anyone who reaches the port "
                  "reads the lake (the README says how to require one).")
        return 0
    if args.action == "stop":
        server = sql_server.stop(settings)
        print(f"Stopped the SQL server (pid {server.pid})." if server else "The SQL server is not running.")
        return 0
    server = sql_server.running_server(settings)
    if server is None:
        print("The SQL server is not running (`lakehouse sql-server start` starts it).")
        return 1
    print(f"SQL server running on {server.jdbc_url} (pid {server.pid}, "
          f"{'read-only' if server.read_only else 'writable'}) for {server.lake_root}; log: {sql_server.log_file(settings)}.")
    return 0


# How long dagster dev gets to stop its webserver, daemon and code servers before it is made to.
UI_STOP_GRACE_S = 20.0


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.orchestration.runs import dagster_instance

    dagster_instance(settings)  # creates DAGSTER_HOME and its dagster.yaml
    env = {**os.environ, "DAGSTER_HOME": settings.dagster_home}
    # `dg dev` (dagster-dg-cli, pinned beside dagster): `dagster dev` warns on every start that it is superseded.
    cmd = [str(Path(sys.executable).with_name("dg")), "dev", "-m", "lakehouse.orchestration.definitions",
           "--host", args.host, "--port", str(args.port)]
    if not Path(cmd[0]).exists():
        print(f"error: {cmd[0]} is missing: install the project's pins again (`pip install -e .`, which brings "
              "dagster-dg-cli and its `dg`).", file=sys.stderr)
        return 2
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={settings.dagster_home}); Ctrl-C stops it.",
          flush=True)
    stop = threading.Event()
    # Handlers go in before the child starts: a handled signal is reset to the default in the child at exec,
    # whereas an ignored one stays ignored. A script's background job starts with SIGINT ignored, and
    # dg dev (which maps SIGTERM to its SIGINT disposition) would then ignore every stop.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    # Its own session: a stop reaches dg dev once, from here, and the whole tree is one process group.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    while proc.poll() is None and not stop.wait(0.5):
        pass
    if proc.poll() is None:
        _stop_tree(proc)
        return 0
    _kill_group(proc.pid, signal.SIGKILL)  # anything dg dev left behind when it exited on its own
    return proc.returncode


def _stop_tree(proc: subprocess.Popen) -> None:
    """SIGINT to dagster dev (its clean stop), then SIGTERM and SIGKILL to its process group if it lingers."""
    proc.send_signal(signal.SIGINT)
    for signum, grace in ((signal.SIGTERM, UI_STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            log.warning("dagster dev did not stop within %.0fs; sending %s to its processes", grace, signum.name)
            _kill_group(proc.pid, signum)
    proc.wait()
    _kill_group(proc.pid, signal.SIGKILL)  # code servers orphaned by a forced stop


def _kill_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # the group is empty: everything has exited
        pass


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.cli.demo import run_demo
    from lakehouse.schemas.pipeline import Mix

    mix = Mix(out_of_order=args.out_of_order, late=args.late, duplicate=args.duplicates, malformed=args.malformed)
    report = run_demo(settings, events=args.events, seed=args.seed, mix=mix, keep_running=args.keep_running)
    return 0 if all(c.duplicates >= 0 for c in report.counts) else 1


def cmd_settings(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.serving.sql import format_table

    if args.profile:
        settings = Settings.from_env(profile=args.profile)
        print(f"Settings under profile {args.profile}" + "".join(
            f"; {name}={value}" for name, value in PROFILES[args.profile].items()) + ".")
    rows = [(env, settings.shown(env.removeprefix("LAKEHOUSE_").lower()), meaning) for env, _, meaning in Settings.describe()]
    from lakehouse.schemas.pipeline import active_pipeline

    pipeline = active_pipeline()
    rows += [(p.variable, str(value), f"{p.help} (a parameter of pipeline {pipeline.name})")
             for p, value in zip(pipeline.params, pipeline.param_values().values())]
    print(format_table(("variable", "value now", "meaning"), rows))
    return 0


def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.services import check_services
    from lakehouse.orchestration.maintenance import doctor_findings
    from lakehouse.serving.sql import format_table

    services = check_services(settings)
    print(f"Services of profile {settings.profile}:")
    print(format_table(("service", "address", "answer"), [(v.name, v.address, v.answer) for v in services]))
    down = [v for v in services if v.failed]
    if down:
        for v in down:
            print(f"- {v.problem}")
        print(f"{len(down)} service{'s' if len(down) != 1 else ''} of profile {settings.profile} "
              f"{'do' if len(down) != 1 else 'does'} not answer; the retention checks need them.")
        return 1
    print()
    findings = doctor_findings(settings)
    shown = [f for f in findings if args.all or f.status != "absent"]
    print(format_table(("kind", "name", "setting", "live", "needed", "status"),
                       [(f.kind, f.name, f.setting, f.live, f.needed, f.status) for f in shown]))
    absent = sorted({f.name for f in findings if f.status == "absent"})
    if absent and not args.all:
        print(f"Not created yet (nothing to check): {', '.join(absent)}.")
    failed = [f for f in findings if f.failed]
    for f in failed:
        print(f"- {f.problem}")
    print(f"{len(failed)} problem{'s' if len(failed) != 1 else ''} with the replay window of {settings.replay_window} "
          "(LAKEHOUSE_REPLAY_WINDOW); each line above says how to fix it." if failed else
          f"Every topic and table keeps at least the replay window of {settings.replay_window} (LAKEHOUSE_REPLAY_WINDOW).")
    return 1 if failed else 0


# ---------------------------------------------------------------- parser

class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one sentence, like every other user error of the command."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {message} (see `{self.prog} --help`).\n")


def _integer(low: int, high: int):
    """An argparse type: an integer from low to high."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer from {low} to {high}")
        return value
    return parse


def _number(low: float, high: float, *, low_included: bool = True, what: str = "a number"):
    """An argparse type: a finite number in a range (the low end included or not)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        above_low = value >= low if low_included else value > low
        if not (above_low and value <= high):  # NaN fails both comparisons
            bound = f"from {low:.10g} to" if low_included else f"above {low:.10g} and at most"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} {bound} {high:.10g}")
        return value
    return parse


def _host(text: str) -> str:
    if not HOST.check(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or an IP address")
    return text


def _instant(text: str) -> datetime:
    """An ISO-8601 instant from the command line; UTC when no offset is given."""
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time such as 2026-11-22T09:00:00Z") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _add_mix(p: argparse.ArgumentParser, malformed: float, duplicates: float, late: float, out_of_order: float) -> None:
    g = p.add_argument_group("faults injected on purpose (shares of all records, 0..1)")
    share = _number(0, 1, what="a share")
    g.add_argument("--malformed", type=share, default=malformed, help=f"records that must end in quarantine (default {malformed})")
    g.add_argument("--duplicates", type=share, default=duplicates, help=f"re-sent copies of recent events (default {duplicates})")
    g.add_argument("--late", type=share, default=late, help=f"events stamped 15-40 minutes in the past (default {late})")
    g.add_argument("--out-of-order", type=share, default=out_of_order, help=f"events stamped up to 45s early (default {out_of_order})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lakehouse", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="show debug logs on the terminal")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("setup", help="fetch the JVM jars (Delta, Spark-Kafka, the Kafka broker) with Maven; idempotent",
                       description="Resolve infra/maven/pom.xml into <home>/jars/spark and <home>/jars/kafka. Skips a folder that is complete. "
                       "Then builds the Spark driver's class archive in <home>/jars/class-archive (about 190 MiB, once per "
                       "set of jars), so that every new Spark driver starts about 4 s sooner.")
    p.add_argument("--force", action="store_true", help="fetch again even if the folders are complete, and build the class archive again")
    p.set_defaults(fn=cmd_setup)

    p = sub.add_parser("kafka", help="start, stop or check the embedded Kafka (KRaft: one node, or a cluster of --nodes)",
                       description="One node keeps its data, logs and PID file in <home>/kafka. With --nodes 3 (or "
                                   "LAKEHOUSE_KAFKA_NODES=3) three nodes, each a broker and a KRaft controller with one "
                                   "cluster id, keep theirs in <home>/kafka-cluster/node-<id>; node i listens on "
                                   "LAKEHOUSE_KAFKA_PORT + 2(i-1) and LAKEHOUSE_KAFKA_CONTROLLER_PORT + 2(i-1). Storage "
                                   "is formatted on first start. `stop` stops every node by its PID; `status` shows each "
                                   "node, the controller quorum and under-replicated partitions (exit 1 unless all is well).")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--nodes", type=_integer(1, 9), default=None,
                   help="nodes to start (default LAKEHOUSE_KAFKA_NODES, 1); a start with some nodes down starts those")
    p.set_defaults(fn=cmd_kafka)

    p = sub.add_parser("topics", help="create the topics from their specs and report drift of existing ones",
                       description="Creates missing topics; an existing topic whose config differs from its spec is reported (exit 1), never altered.")
    p.set_defaults(fn=cmd_topics)

    p = sub.add_parser("produce", help="send the pipeline's demo events to Kafka (the shop's by default)",
                       description="The pipeline's seeded demo generator (Pipeline.demo): the same seed and start give the "
                                   "same events, a chosen share of them out of order, late, duplicated or malformed. "
                                   "Records with one key stay in order in one partition. Idempotent producer, acks=all.")
    p.add_argument("--count", type=_integer(1, MAX_RECORDS), default=1000, help="records to send (default 1000)")
    p.add_argument("--rate", type=_number(0, 1e7), default=0.0,
                   help="records per second of wall time; 0 sends as fast as possible (default)")
    p.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    p.add_argument("--start", type=_instant, help="event time of the first event, ISO-8601 (default: now)")
    p.add_argument("--event-rate", type=_number(0, 1e7, low_included=False), default=20.0,
                   help="events per second of event time (default 20)")
    _add_mix(p, 0.02, 0.02, 0.01, 0.03)
    p.set_defaults(fn=cmd_produce)

    p = sub.add_parser("run", help="materialize assets through Dagster (all by default): topics, bronze, silver, gold",
                       description="Each table asset runs its streaming queries until they catch up (availableNow). "
                                   "It is a run of the job catch_up, recorded in DAGSTER_HOME and tagged "
                                   "lakehouse/command, so the UI lists it under the job and can re-execute it.")
    p.add_argument("assets", nargs="*", help="asset keys, e.g. bronze_<entity> silver_<entity> gold_<mart> kafka/<topic with _ for .>")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("sql", help="run Spark SQL over the silver and gold tables by name",
                       description="Tables: bronze_*, silver_*, quarantine, gold_*. Example: "
                                   "lakehouse sql \"SELECT * FROM gold_<mart> LIMIT 5\". "
                                   "Read a table as it was: FROM gold_<mart> VERSION AS OF 3, or "
                                   "TIMESTAMP AS OF '2026-11-22 09:00:00' (UTC); `lakehouse history TABLE` lists versions.")
    p.add_argument("query")
    p.add_argument("--limit", type=_integer(1, 1_000_000), default=100, help="rows to print at most (default 100)")
    p.set_defaults(fn=cmd_sql)

    p = sub.add_parser("serve", help="run a Spark Connect server over the lake that lakehouse sql, history, notebooks "
                                     "and Dagster runs use",
                       description="Starts Spark's own Spark Connect server on 127.0.0.1 (read-only, every table by "
                                   "name, tables created later included) and keeps it until Ctrl-C or SIGTERM; its PID "
                                   "and ports are in <home>/serve.json. lakehouse sql and lakehouse history use it "
                                   "instead of starting a JVM (10-40 s); any Spark Connect client does too: "
                                   "SparkSession.builder.remote(\"sc://127.0.0.1:15002\").getOrCreate(). Dagster runs "
                                   "on the same lake (lakehouse run, lakehouse backfill, a materialization in the UI, the "
                                   "checks that read tables) run their Spark work in the same process, one step at a "
                                   "time. Once up, it warms the run path up on a scratch lake (LAKEHOUSE_SERVE_WARM_UP) "
                                   "so that the first run is not a cold one.")
    p.add_argument("--port", type=_integer(1, 65535), default=15002,
                   help="Spark Connect's port on 127.0.0.1 (default 15002, Spark Connect's own)")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("sql-server", help="start, stop or check a JDBC/ODBC endpoint (Spark's Thrift server) over the tables",
                       description="Spark's Thrift JDBC/ODBC server (HiveServer2 protocol) in the background, with every "
                                   "table of the lake registered by name (tables created later appear within seconds). "
                                   "Beeline, BI tools and Python's PyHive connect to jdbc:hive2://HOST:PORT/default. "
                                   "Read-only unless --writable: a statement that would change the lake is refused. "
                                   "Its PID and port are in <home>/sql-server.json, its log in <log dir>/sql-server.log.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("start", help="start the server in the background (a Spark JVM; 10-40 s)",
                           description="Starts the server and returns once it accepts connections.")
    a.add_argument("--host", type=_host, default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    a.add_argument("--port", type=_integer(1, 65535), default=10000, help="port to listen on (default 10000, HiveServer2's)")
    a.add_argument("--writable", action="store_true", help="let clients write (INSERT, MERGE, DDL); off by default")
    actions.add_parser("stop", help="stop the server (by its PID)")
    actions.add_parser("status", help="say whether it runs, where and for which lake (exit 1 if not)")
    a = actions.add_parser("beeline", help="Spark's JDBC shell connected to the running server",
                           description="Runs the beeline of pyspark's wheel on the running server; every argument goes "
                                       "to beeline, e.g. lakehouse sql-server beeline -e \"SELECT * FROM gold_<mart> LIMIT 5\"")
    a.set_defaults(passes_through=True)   # every other argument is beeline's (main() hands them over)
    p.set_defaults(fn=cmd_sql_server)

    p = sub.add_parser("history", help="list a table's Delta versions, newest first, with what each one wrote",
                       description="One row per Delta commit: version, when (UTC), the operation, the rows it wrote "
                                   "(inserted/updated/deleted for a MERGE, files for OPTIMIZE and VACUUM) and its user "
                                   "metadata. Read any of them with lakehouse sql \"... FROM TABLE VERSION AS OF N\".")
    p.add_argument("table", help="a table name, e.g. gold_<mart>")
    p.add_argument("--limit", type=_integer(1, 1_000_000), default=None, help="versions to list at most (default all)")
    p.set_defaults(fn=cmd_history)

    p = sub.add_parser("ui", help="start the Dagster UI and daemon (dg dev) on the project's DAGSTER_HOME",
                       description="Runs `dg dev -m lakehouse.orchestration.definitions` with DAGSTER_HOME=<home>/dagster, the "
                                   "instance `lakehouse demo` and `lakehouse run` record their runs in. Ctrl-C stops it.")
    p.add_argument("--host", type=_host, default="127.0.0.1", help="address to serve the UI on (default 127.0.0.1)")
    p.add_argument("--port", type=_integer(1, 65535), default=3000, help="port to serve the UI on (default 3000)")
    p.set_defaults(fn=cmd_ui)

    p = sub.add_parser("demo", help="the main job: broker, topics, events with faults, every asset, a gold query, counts",
                       description="Sets up what is missing, starts the broker, creates topics, produces events (some bad, "
                                   "late and duplicated), materializes every asset, queries gold, prints counts per layer, "
                                   "and stops the broker it started unless --keep-running.")
    p.add_argument("--events", type=_integer(1, MAX_RECORDS), default=5000, help="records to produce (default 5000)")
    p.add_argument("--seed", type=int, help="generator seed (default: from the clock, printed)")
    p.add_argument("--keep-running", action="store_true", help="leave the broker running afterwards")
    _add_mix(p, 0.02, 0.02, 0.01, 0.03)
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("settings", help="list every LAKEHOUSE_* setting, its value now and what it means",
                       description="Every setting is read once from a LAKEHOUSE_* environment variable; this prints each "
                                   "one with the value in force now and what it controls. A profile "
                                   "(LAKEHOUSE_PROFILE: local, the default, or cluster) gives the defaults of one kind "
                                   "of set-up; a variable that is set wins over it.")
    p.add_argument("--profile", choices=sorted(PROFILES),
                   help="show the values under this profile instead of LAKEHOUSE_PROFILE's (variables that are set "
                        "still win)")
    p.set_defaults(fn=cmd_settings)

    p = sub.add_parser(
        "doctor", help="check that the profile's services answer and that every topic and table keeps at least the "
                       "replay window (exit 1 if not)",
        description="First asks each service the settings point at (LAKEHOUSE_PROFILE's, or the variables') whether it "
                    "answers: Kafka and its live brokers, the Spark master and its workers (a local master has none), and "
                    "the lake's S3 bucket. Then, "
                    "one retention policy follows from LAKEHOUSE_REPLAY_WINDOW (default 7 days): topics keep "
                    "records (retention.ms, and no retention.bytes limit), and Delta tables keep removed files "
                    "(delta.deletedFileRetentionDuration, what VACUUM obeys) and their log "
                    "(delta.logRetentionDuration: time travel, where a stopped stream resumes) at least that long. "
                    "This reads the live values from the broker and every table, prints them in a table, and for "
                    "each one that no longer covers the window says in one sentence how to fix it. Exits 1 when "
                    "something fails, 0 when all is well.")
    p.add_argument("--all", action="store_true", help="also list the topics and tables that do not exist yet")
    p.set_defaults(fn=cmd_doctor)

    from lakehouse.cli.batch import add_batch_commands
    from lakehouse.cli.quality import add_quality_commands

    from lakehouse.cli.stream import add_stream_commands

    add_batch_commands(sub)
    add_quality_commands(sub)
    add_stream_commands(sub)

    from lakehouse.cli.cluster import add_cluster_commands

    add_cluster_commands(sub)

    from lakehouse.cli.s3 import add_s3_commands

    add_s3_commands(sub)

    from lakehouse.cli.postgres import add_postgres_commands

    add_postgres_commands(sub)

    from lakehouse.cli.cdc import add_cdc_commands

    add_cdc_commands(sub)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message is a sentence for the user, not a trace."""
    from lakehouse.batch.lineage import UnknownTable
    from lakehouse.infra.jars import JarsMissing
    from lakehouse.batch.replay import BadReplay
    from lakehouse.streaming.fingerprints import DefinitionChanged
    from lakehouse.cli.batch import BadRange
    from lakehouse.infra.kafka_broker import BrokerError
    from lakehouse.cli.demo import DemoFailed
    from lakehouse.orchestration.runs import UnknownAsset, UnknownJob, UnknownPartition
    from lakehouse.serving.sql import SqlError
    from lakehouse.serving.endpoint import EndpointError
    from lakehouse.serving.sql_server import SqlServerError
    from lakehouse.schemas.pipeline import MixError, PipelineError
    from lakehouse.streaming.kafka_topics import KafkaUnreachable, TopicsMissing
    from lakehouse.streaming.continuous import UnknownTable as NotStreamed

    return (SettingsError, JarsMissing, BrokerError, KafkaUnreachable, SqlError, DemoFailed, UnknownAsset, UnknownJob,
            UnknownPartition, MixError, PipelineError, UnknownTable, BadRange, BadReplay, DefinitionChanged, NotStreamed, EndpointError, TopicsMissing,
            SqlServerError)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, passed = parser.parse_known_args(argv)
        if passed and not getattr(args, "passes_through", False):
            parser.error(f"unrecognized arguments: {' '.join(passed)}")
        args.passed = passed
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        settings = Settings.from_env()
        _setup_logging(settings, args.verbose, quiet=args.command in ("demo", "sql", "history"))
        return args.fn(settings, args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Whoever read the output stopped early (`lakehouse status | head`): end quietly, as `ls | head` does,
        # with the shell's status for SIGPIPE, and keep the interpreter's last flush off the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:  # noqa: BLE001 - sorted below: user errors get a sentence, bugs a trace
        if isinstance(exc, _user_errors()):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
