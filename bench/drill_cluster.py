"""Drill: the cluster profile, all three engines at once, and one Kafka node killed under a stream running on them.

    lakehouse drill cluster [--events N] [--losses L] [--stream-kills K] [--tables TABLE ...] [--keep]
    .venv/bin/python -m bench.drill_cluster [the same options]

In a state folder of its own, on the ports the cluster profile's settings name (LAKEHOUSE_PROFILE=cluster, each
variable that is set winning): a Spark standalone master with one worker (`lakehouse spark-cluster start`), three
KRaft nodes (`lakehouse kafka start --nodes 3`) and the local S3 server (`lakehouse s3 start`) holding the lake.
`lakehouse stream` runs its flows on the cluster's executors, reads the three-node Kafka and writes the s3a:// lake;
the quorum leader's node is killed with SIGKILL while events are produced, stays away until bronze has committed
without it, and starts again; then the stream itself is killed with SIGKILL mid-batch and restarted. Then the
broker-loss drill's checks (bench/drills.py): bronze holds each acknowledged record's coordinates once, silver each
valid id once, gold equals the batch lane's recomputation and plain Python; the cluster's executors ran the stream's
tasks; the S3 server lists bronze's Delta log
without a gap and the stream's checkpoint, and bronze's previous version reads back with `VERSION AS OF`; and no
partition stays under-replicated. Prints the report; exit 0 only when every difference is 0. Everything it
started is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import dataclasses as dc
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, urlsplit

from bench.drills import Check, DrillReport, run_broker_loss, say
from lakehouse.infra.settings import Settings

TABLES = ("gold_revenue_per_minute",)   # the orders path: bronze, silver and a window table
# moto accepts any keys; S3A and pyarrow still sign with what the environment holds, as they would on AWS.
LOCAL_KEYS = {"AWS_ACCESS_KEY_ID": "lakehouse-drill", "AWS_SECRET_ACCESS_KEY": "lakehouse-drill"}


def cluster_settings(home: Path) -> Settings:
    """The cluster profile's settings, in a state folder of the drill's own."""
    env = {k: v for k, v in os.environ.items() if k.startswith("LAKEHOUSE_")}
    env.setdefault("LAKEHOUSE_JARS_DIR", Settings.from_env().jars_dir)
    env.update({"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_HOME": str(home)})
    return Settings.from_env(env)


def lake_env(settings: Settings) -> dict[str, str]:
    """What `lakehouse stream` needs beyond the drills' own environment to run on the three engines."""
    return {"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_SPARK_MASTER": settings.spark_master,
            "LAKEHOUSE_LAKE_ROOT": settings.lake_root, "LAKEHOUSE_S3_ENDPOINT": settings.s3_endpoint,
            "LAKEHOUSE_S3_PATH_STYLE": str(settings.s3_path_style).lower(), "LAKEHOUSE_S3_REGION": settings.s3_region}


def start_engines(settings: Settings, stack: ExitStack, spark_ui_port: int) -> list[str]:
    """Start the master and a worker, the three Kafka nodes and the S3 server; each is stopped when `stack` closes."""
    from lakehouse.infra import spark_cluster
    from lakehouse.infra.kafka_cluster import cluster_of
    from lakehouse.infra.s3_server import lake_bucket, local_server

    lines = []
    master = urlsplit(settings.spark_master)
    spec = spark_cluster.ClusterSpec(port=master.port or spark_cluster.DEFAULT_PORT, ui_port=spark_ui_port)
    server = local_server(settings)
    server.start((lake_bucket(settings),))
    stack.callback(server.stop)
    lines.append(f"S3 server (moto) pid {server.read_pid()} at {server.endpoint}, bucket {lake_bucket(settings)}")
    kafka = cluster_of(settings)
    stack.callback(kafka.stop)
    pids = kafka.start(settings.jars_dir)
    lines.append(f"Kafka: 3 nodes at {kafka.bootstrap} (pids {', '.join(map(str, pids.values()))})")
    stack.callback(spark_cluster.stop, settings)
    state = spark_cluster.start(settings, spec)
    lines.append(f"Spark: master {spec.master_url} with {len(spark_cluster.alive_workers(state))} worker(s), "
                 f"web UI {spec.ui_url}")
    for line in lines:
        say(line)
    return lines


def run_cluster_drill(settings: Settings, *, events: int, losses: int, seed: int, tables: Sequence[str],
                      workdir: Path, rate: float | None = None, spark: Any,
                      stream_kills: int = 1, spark_ui_port: int | None = None) -> tuple[DrillReport, list[str]]:
    """The broker-loss drill with the stream on the cluster; the report and the under-replicated partitions left."""
    from lakehouse.infra.kafka_cluster import cluster_of, quorum, under_replicated
    from lakehouse.schemas import topics
    from lakehouse.streaming.kafka_topics import ensure_topics

    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    nodes = cluster_of(settings)
    voters, error = quorum(list(nodes.nodes), settings.jars_dir, workdir / "quorum-logs")
    leader = next((v.node_id for v in voters if v.role == "Leader"), nodes.nodes[0].node_id)
    say(f"killing the quorum leader's node {leader} ({'from the quorum' if voters else error})")
    report = run_broker_loss(
        settings, node=nodes.node(leader), losses=losses, down_s=(5.0,), events=events, seed=seed, tables=tables,
        spark=spark, workdir=workdir, rate=rate, warm_up_rate=0.5, settle_s=4, commit_timeout_s=600,
        catch_up_s=600, extra_env={**lake_env(settings), "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "200"},
        verify_layers=("gold",), commit_while_down=True, stream_kills=stream_kills)
    if report.checks:
        report.checks += lake_checks(settings, spark, tables)
        if spark_ui_port is not None:
            report.checks.append(executor_check(settings, spark_ui_port))
    deadline = time.monotonic() + 120
    while (lagging := under_replicated(settings.kafka_bootstrap)[1]) and time.monotonic() < deadline:
        time.sleep(1)
    return report, lagging


def lake_checks(settings: Settings, spark: Any, tables: Sequence[str]) -> list[Check]:
    """What the object store itself holds of the first bronze table: its Delta log as the S3 server lists it (versions
    0..n, no gap, more than one) with the stream's checkpoint beside it, and its previous version read back."""
    from bench.drills import _flows

    bronze = next(f.target for f in _flows(tables) if f.target.layer == "bronze")
    root = urlsplit(settings.lake_root).path.strip("/")
    log = list_keys(settings, f"{root}/{bronze.layer}/{bronze.name}/_delta_log/")
    versions = sorted(int(m.group(1)) for k in log if (m := re.search(r"/(\d{20})\.json$", k)))
    checkpoint = list_keys(settings, f"{root}/{bronze.layer}/_checkpoints/{bronze.name}/")
    listed = Check("S3 server", bronze.name, len(versions),
                   int(versions != list(range(len(versions))) or len(versions) < 2) + int(not checkpoint),
                   "Delta log versions listed by the S3 server (0..n, no gap, at least 2), and the stream's checkpoint")
    if listed.differences:
        listed.samples.append(f"versions {versions[:10]}, checkpoint objects {len(checkpoint)}")
    session = spark() if callable(spark) else spark
    path = bronze.path(settings.lake_root)
    now = session.sql(f"SELECT count(*) FROM delta.`{path}`").first()[0]
    before = session.sql(f"SELECT count(*) FROM delta.`{path}` VERSION AS OF {max(versions[-1] - 1, 0)}").first()[0] \
        if versions else 0
    travel = Check("time travel", bronze.name, before, int(not 0 < before < now),
                   "rows at the previous version (VERSION AS OF), fewer than now and more than none")
    if travel.differences:
        travel.samples.append(f"{before} rows then, {now} now")
    return [listed, travel]


def executor_check(settings: Settings, ui_port: int) -> Check:
    """The stream's applications (one per start) as the master lists them, and the tasks their executors ran."""
    from lakehouse.infra.spark_cluster import executor_logs, master_state

    state = master_state(ui_port)
    apps = state.get("completedapps", []) + state.get("activeapps", [])
    logs = [p for a in apps for p in executor_logs(settings, a["id"])]
    tasks = sum(p.read_text(errors="replace").count("Running task") for p in logs)
    check = Check("Spark cluster", "executors", tasks, int(not apps or tasks == 0),
                  f"tasks the workers' executors ran for the stream's {len(apps)} application(s)")
    if check.differences:
        check.samples.append(f"applications {[a.get('name') for a in apps]}, executor logs {len(logs)}")
    return check


def list_keys(settings: Settings, prefix: str) -> list[str]:
    """The object keys under `prefix` in the lake's bucket, as the S3 server itself lists them (ListObjectsV2)."""
    import urllib.request
    import xml.etree.ElementTree as ET

    from lakehouse.infra.s3_server import lake_bucket

    keys: list[str] = []
    token = ""
    while True:
        url = f"{settings.s3_endpoint}/{lake_bucket(settings)}?list-type=2&prefix={quote(prefix)}{token}"
        with urllib.request.urlopen(url, timeout=10) as response:
            root = ET.fromstring(response.read())
        keys += [e.text for e in root.iter() if e.tag.endswith("}Key")]
        following = [e.text for e in root.iter() if e.tag.endswith("}NextContinuationToken")]
        if not following:
            return keys
        token = f"&continuation-token={quote(following[0])}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakehouse drill cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=3_000, help="events produced over the drill (default 3000)")
    p.add_argument("--losses", type=int, default=2, help="kill -9 of the quorum leader's node (default 2)")
    p.add_argument("--stream-kills", type=int, default=1,
                   help="kill -9 of the stream's process group after the losses, restarted at once (default 1)")
    p.add_argument("--rate", type=float, default=None,
                   help="events per second once the stream has committed (default: paced so that production spans "
                        "every loss)")
    p.add_argument("--seed", type=int, default=7, help="generator and timing seed (default 7)")
    p.add_argument("--tables", nargs="+", default=list(TABLES), metavar="TABLE",
                   help=f"tables to stream (default: {' '.join(TABLES)})")
    p.add_argument("--spark-ui-port", type=int, default=8080,
                   help="the Spark master's web UI port (default 8080; the master's own port is the one in "
                        "LAKEHOUSE_SPARK_MASTER)")
    p.add_argument("--keep", action="store_true", help="keep the state folder (kept anyway when the drill fails)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from lakehouse.infra.kafka_broker import BrokerError
    from lakehouse.infra.s3_server import S3ServerError
    from lakehouse.infra.settings import SettingsError
    from lakehouse.infra.spark_cluster import ClusterError

    for key, value in LOCAL_KEYS.items():
        os.environ.setdefault(key, value)    # only for the local S3 server; keys set by the caller win

    def terminated(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminated)
    home = Path(tempfile.mkdtemp(prefix="drill-cluster-"))
    report: DrillReport | None = None
    lagging: list[str] = []
    sessions: list[Any] = []
    try:
        settings = cluster_settings(home)
        say(f"cluster profile in {home}: master {settings.spark_master}, Kafka {settings.kafka_bootstrap}, "
            f"lake {settings.lake_root} at {settings.s3_endpoint}")

        def spark() -> Any:
            from lakehouse.infra.spark import get_spark

            # The checks' own session is a local one reading the lake on S3: the stream ran on the cluster, and the
            # checks' batch-lane recomputation through an executor took about 3 minutes of the drill (2 cores).
            sessions.append(get_spark(dc.replace(settings, spark_master="local[2]", spark_shuffle_partitions=2),
                                      "drill-cluster-checks"))
            return sessions[-1]

        with ExitStack() as stack:
            start_engines(settings, stack, args.spark_ui_port)
            stack.callback(lambda: [s.stop() for s in sessions])
            report, lagging = run_cluster_drill(settings, events=args.events, losses=args.losses, seed=args.seed,
                                                tables=args.tables, workdir=home, rate=args.rate, spark=spark,
                                                stream_kills=args.stream_kills, spark_ui_port=args.spark_ui_port)
    except (BrokerError, ClusterError, S3ServerError, SettingsError, KeyboardInterrupt) as exc:
        print(f"error: {exc}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report is not None:
        print(report.text(), flush=True)
        print(f"under-replicated partitions after the drill: {len(lagging)}" +
              (f" ({', '.join(lagging[:5])})" if lagging else ""), flush=True)
    passed = report is not None and report.passed and not lagging
    if args.keep or not passed:
        print(f"state kept in {home}", flush=True)
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
