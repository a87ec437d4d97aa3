"""Whether the services the settings point at answer: Kafka, the Spark master and the lake's store (`lakehouse doctor`)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from lakehouse.infra.settings import Settings


@dataclass(frozen=True)
class Service:
    """One service as doctor reports it: what it is, where, what it said, and how to fix it when it did not answer."""

    name: str
    address: str
    answer: str
    problem: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.problem)


def check_services(settings: Settings) -> list[Service]:
    """Ask each service of the settings in force (the profile's, or the variables') whether it answers."""
    return [_kafka(settings), _spark(settings), _lake(settings)]


def _kafka(settings: Settings) -> Service:
    from confluent_kafka.admin import AdminClient

    bootstrap = settings.kafka_bootstrap
    try:
        brokers = len(AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=8).brokers)
    except Exception as exc:  # noqa: BLE001 - any client error means it does not answer
        start = f"lakehouse kafka start{' --nodes %d' % settings.kafka_nodes if settings.kafka_nodes > 1 else ''}"
        return Service("kafka", bootstrap, "no answer", f"No Kafka broker answers at {bootstrap} "
                       f"({str(exc).splitlines()[0][:120]}); start the embedded one with `{start}` or set "
                       "LAKEHOUSE_KAFKA_BOOTSTRAP to your cluster's.")
    answer = f"{brokers} broker{'s' if brokers != 1 else ''}"
    if brokers < settings.kafka_nodes:
        return Service("kafka", bootstrap, answer, f"Kafka at {bootstrap} has {brokers} live broker(s) of the "
                       f"{settings.kafka_nodes} LAKEHOUSE_KAFKA_NODES names; `lakehouse kafka status` says which is "
                       "down and `lakehouse kafka start` starts it again.")
    return Service("kafka", bootstrap, answer)


def _spark(settings: Settings) -> Service:
    master = settings.spark_master
    if not master.startswith("spark://"):
        return Service("spark", master, "in the driver's JVM (nothing to reach)")
    down = [hp for hp in master.removeprefix("spark://").split(",") if not _port_answers(hp)]
    if down:
        return Service("spark", master, "no answer", f"No Spark master answers at {', '.join(down)}; start one with "
                       "`lakehouse spark-cluster start` or set LAKEHOUSE_SPARK_MASTER to your cluster's.")
    from lakehouse.infra.spark_cluster import ClusterError, alive_workers, master_state, saved_spec

    spec = saved_spec(settings)
    if spec is None or spec.master_url != master:
        return Service("spark", master, "master answers")
    try:
        state = master_state(spec.ui_port)
    except ClusterError:
        return Service("spark", master, "master answers")
    alive = alive_workers(state)
    answer = f"{len(alive)} worker(s) alive, {sum(w.get('cores', 0) for w in alive)} cores"
    if not alive:
        return Service("spark", master, answer, f"The Spark master at {master} has no live worker, so no job can run; "
                       "`lakehouse spark-cluster status` shows the cluster, `stop` and `start` restart it.")
    return Service("spark", master, answer)


def _lake(settings: Settings) -> Service:
    root = settings.lake_root
    if not root.startswith("s3a://"):
        return Service("lake", root, "a folder on this machine")
    from lakehouse.streaming.health import filesystem

    bucket = urlsplit(root).netloc
    where = settings.s3_endpoint or "AWS S3"
    try:
        fs, path = filesystem(root)
        info = fs.get_file_info(bucket)
    except OSError as exc:
        return Service("lake", root, "no answer", f"The S3 store at {where} does not answer for bucket {bucket} "
                       f"({str(exc).splitlines()[0][:160]}); check LAKEHOUSE_S3_ENDPOINT and the keys in "
                       "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (`lakehouse s3 start` serves a local store).")
    if info.type.name == "NotFound":
        return Service("lake", root, "no bucket", f"Bucket {bucket} does not exist at {where}; create it (the local "
                       "store's `lakehouse s3 start` does) or set LAKEHOUSE_LAKE_ROOT to a bucket you have.")
    return Service("lake", root, f"bucket {bucket} answers at {where}")


def _port_answers(host_port: str, timeout_s: float = 3) -> bool:
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False
