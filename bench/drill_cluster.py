"""Drill: the cluster profile, all three engines at once, and one Kafka node killed under a stream running on them.

    lakehouse drill cluster [--events N] [--losses L] [--tables TABLE ...] [--keep]
    .venv/bin/python -m bench.drill_cluster [the same options]

In a state folder of its own, on the ports the cluster profile's settings name (LAKEHOUSE_PROFILE=cluster, each
variable that is set winning): a Spark standalone master with one worker (`lakehouse spark-cluster start`), three
KRaft nodes (`lakehouse kafka start --nodes 3`) and the local S3 server (`lakehouse s3 start`) holding the lake.
`lakehouse stream` runs its flows on the cluster's executors, reads the three-node Kafka and writes the s3a:// lake;
the quorum leader's node is killed with SIGKILL while events are produced, stays away until bronze has committed
without it, and starts again. Then the broker-loss drill's checks (bench/drills.py): bronze holds each acknowledged
record's coordinates once, silver each valid id once, gold equals the batch lane's recomputation and plain Python;
and no partition stays under-replicated. Prints the report; exit 0 only when every difference is 0. Everything it
started is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import dataclasses as dc
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

from bench.drills import DrillReport, run_broker_loss, say
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
    from urllib.parse import urlsplit

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
                      workdir: Path, rate: float | None = None, spark: Any) -> tuple[DrillReport, list[str]]:
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
        verify_layers=("gold",), commit_while_down=True)
    deadline = time.monotonic() + 120
    while (lagging := under_replicated(settings.kafka_bootstrap)[1]) and time.monotonic() < deadline:
        time.sleep(1)
    return report, lagging


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakehouse drill cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=3_000, help="events produced over the drill (default 3000)")
    p.add_argument("--losses", type=int, default=2, help="kill -9 of the quorum leader's node (default 2)")
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
                                                tables=args.tables, workdir=home, rate=args.rate, spark=spark)
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
