"""Build the one Spark session the lakehouse uses: Delta and the Kafka connector from local jars."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.infra.jars import jar_paths
from lakehouse.infra.retention import table_defaults
from lakehouse.infra.settings import Settings

log = logging.getLogger(__name__)

LOG4J2_FILE = Path(__file__).resolve().parent / "conf" / "spark-log4j2.properties"
NIO_MAX_CACHED_BUFFER = 256 * 1024   # bytes: the largest temporary direct buffer a driver thread keeps


# With the web UI off nothing reads Spark's status store, yet by default it keeps the last 1,000 SQL executions
# (each with its plan's text and metrics), 1,000 jobs and stages and 100,000 tasks in the driver's heap. A stream
# or an endpoint runs thousands of executions an hour, so the store stays full: after three 15,000-event bursts
# into the fused shop stream its live heap held 1.43M plan nodes with Spark's limits, 0.85M with these.
UNSEEN_STATUS_LIMITS = {"spark.sql.ui.retainedExecutions": "20", "spark.ui.retainedJobs": "50",
                        "spark.ui.retainedStages": "50", "spark.ui.retainedTasks": "2000",
                        "spark.ui.dagGraph.retainedRootRDDs": "50", "spark.sql.streaming.ui.retainedQueries": "20",
                        "spark.sql.streaming.ui.retainedProgressUpdates": "20"}


def spark_conf(settings: Settings, app_name: str = "lakehouse") -> dict[str, str]:
    """Every Spark setting the session gets; extra `LAKEHOUSE_SPARK_CONF` entries win."""
    log_dir = Path(settings.log_dir)
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": app_name,
        # Jars come from the folder Maven filled; a session never resolves packages at start.
        "spark.jars": ",".join(project_jars(settings)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        # Delta's VACUUM lists a table's folders in a Spark job of this many tasks (Spark's default: 10,000).
        # VACUUM of a table of three small files took 20-27 s with it and 1.3-1.9 s with 2 to 16 tasks, so
        # the nightly maintenance of the shop's tables spent minutes in empty tasks. As parallel as shuffles.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(settings.spark_shuffle_partitions),
        # Queries share the session (a stream's every flow, a catch-up's concurrent flows): each flow's jobs
        # go to a pool of its own, so a small flow's jobs are not queued behind a big flow's.
        "spark.scheduler.mode": "FAIR",
        # Delta rebuilds a table's state (to look up an idempotent write's txn version, or the files a
        # MERGE reads) after every commit. Its default of 50 tasks cost 1.7 s per small append here, 4
        # tasks 0.57 s, one task 0.33 s (docs/performance.md). The logs here are small; a cluster with
        # tables of very many files can raise it through LAKEHOUSE_SPARK_CONF.
        "spark.databricks.delta.snapshotPartitions": "1",
        # Every flow's queries, Delta's own and the quality checks compile their own classes; with 22
        # flows in one session Spark's cache of 100 evicted them between micro-batches, and each small
        # silver batch compiled about 80 classes again (6 with room for them).
        "spark.sql.codegen.cache.maxEntries": "2000",
        # PySpark records the Python call site of every DataFrame and Column call in the JVM, for the query
        # context of an error: about six Py4J round trips per call. Building silver's parse of orders
        # took 1.01 s with it and 0.47 s without, and every micro-batch builds its plans again in Python
        # (docs/performance.md). Errors still name the failing expression, not the Python line.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # A checkpoint of a table's log every 10 commits (Delta's default) costs a Spark job each time: a
        # small append with a txn id took 0.43 s on average here (p90 0.73 s), 0.39 s (p90 0.45 s) with one
        # every 50; the state rebuilt after a commit then reads up to 49 small commit files instead of 9.
        # Set when a table is created.
        "spark.databricks.delta.properties.defaults.checkpointInterval": "50",
        # A stream commits every table every few seconds, a file or more each time: Delta's auto compaction
        # rewrites a table's small files after a commit, in the writer's own thread, so it never conflicts
        # with that writer's next MERGE (the nightly OPTIMIZE skips tables whose writer runs). Off by
        # default: tests that count a table's versions and a few others do not yet pass with it on
        # (docs/performance.md, "Auto compaction").
        "spark.databricks.delta.autoCompact.enabled": str(settings.auto_compact).lower(),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        **({} if settings.spark_ui else UNSEEN_STATUS_LIMITS),
        "spark.sql.warehouse.dir": f"{settings.home}/spark-warehouse",
        # LAKEHOUSE_SPARK_JAVA_OPTIONS, by default the throughput collector: with G1, concurrent marking
        # (mostly started by large cached buffers, humongous to its 1 MiB regions) took 17-20 s of CPU in
        # a 1M-event catch-up on 2 cores, and the catch-up took 90-92 s against 81 s (docs/performance.md).
        # The JDK caches, per thread, a direct buffer as large as the largest socket or file read that
        # thread made through a heap buffer (Kafka's fetch responses), and never frees it: the driver's
        # direct memory grew with the backlog, 28 -> 130 MiB from 100k to 4M events. Reads above 256 KiB now
        # get a buffer of their own (26-31 MiB at 4M; docs/performance.md). A user's own value comes later
        # on the line and wins.
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE} -Dlakehouse.log.dir={log_dir} "
            f"-Dderby.system.home={settings.home} -Djdk.nio.maxCachedBufferSize={NIO_MAX_CACHED_BUFFER} "
            f"{settings.spark_java_options}{_class_archive_option(settings)}"
        ),
        # Parquet's INT96 (Spark's default) is read as nanoseconds by Arrow-based readers (delta-rs,
        # DuckDB), which cannot hold every instant Spark can; microseconds are what Delta specifies.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Tables are addressed by path; Delta's own retention checks stay on by default.
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # An empty micro-batch after each catch-up only to advance the watermark costs seconds per
        # stateful query; state expiry simply waits for the next batch with data (results are the same:
        # dedup and update-mode windows emit on data, not on watermark moves).
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        # The replay window (LAKEHOUSE_REPLAY_WINDOW) as every new table's deleted-file and log retention:
        # set at creation, because a later ALTER is a metadata commit that stops the table's readers.
        **table_defaults(settings.replay_window),
        **s3_conf(settings),
        **cluster_conf(settings),
    }
    conf.update(settings.spark_conf)
    return conf


# ---------------------------------------------------------------- a lake on S3 (s3a://)

S3_CREDENTIALS = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


def s3_lake(settings: Settings) -> bool:
    """Whether the lake, and so every checkpoint under it, is on S3 through Hadoop's S3A connector."""
    return settings.lake_root.startswith("s3a://")


def project_jars(settings: Settings) -> list[str]:
    """The jars a session adds to pyspark's: Delta and the Kafka connector, and S3A for a lake on S3.

    S3A only then, so that a local lake's JVM loads nothing more than before.
    """
    jars = jar_paths(settings.jars_dir, "spark")
    return jars + jar_paths(settings.jars_dir, "s3") if s3_lake(settings) else jars


def s3_conf(settings: Settings) -> dict[str, str]:
    """S3A's settings for the lake's bucket, from LAKEHOUSE_S3_*; none for a lake elsewhere."""
    if not s3_lake(settings):
        return {}
    conf = {
        # Also on the driver's own class path: Hadoop resolves s3a:// with the loader of the thread that asks, and
        # a flow's thread (a catch-up runs several at once) does not see spark.jars' loader ("Class
        # org.apache.hadoop.fs.s3a.S3AFileSystem not found"). spark.jars still ships them to a cluster's executors.
        "spark.driver.extraClassPath": os.pathsep.join(jar_paths(settings.jars_dir, "s3")),
        # Keys only from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN): never a setting, never logged.
        "spark.hadoop.fs.s3a.aws.credentials.provider": S3_CREDENTIALS,
        "spark.hadoop.fs.s3a.path.style.access": str(settings.s3_path_style).lower(),
    }
    if settings.s3_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.s3_endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https:")).lower()
    # A store of its own has no AWS region to find; the SDK still signs requests with one.
    region = settings.s3_region or ("us-east-1" if settings.s3_endpoint else "")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


# ---------------------------------------------------------------- a standalone cluster (spark://)

EXECUTOR_MEMORY = "1g"
LOOPBACK = re.compile(r"(?:127\.\d+\.\d+\.\d+|localhost|\[::1\])(?::\d+)?")


def standalone_master(settings: Settings) -> bool:
    """Whether the master is a Spark standalone cluster's (spark://host:port[,host:port]), not local."""
    return settings.spark_master.startswith("spark://")


def cluster_conf(settings: Settings) -> dict[str, str]:
    """What a session on a standalone cluster needs beyond a local one's; none for any other master."""
    if not standalone_master(settings):
        return {}
    conf = {
        # Executors run the driver's own Python (this venv, with the lakehouse and pipeline packages installed),
        # not whatever python3 a worker finds on its PATH.
        "spark.pyspark.python": sys.executable,
        # Spark's default, said here: a worker of `lakehouse spark-cluster start` offers 2g, room for the executors
        # of two applications at once (a stream and `lakehouse serve`); more through LAKEHOUSE_SPARK_CONF.
        "spark.executor.memory": EXECUTOR_MEMORY,
        # Executors now read Kafka: the same collector and cap on cached direct buffers as the driver's (above).
        "spark.executor.extraJavaOptions": (
            f"-Djdk.nio.maxCachedBufferSize={NIO_MAX_CACHED_BUFFER} {settings.spark_java_options}"
        ),
    }
    # A pipeline package found through PYTHONPATH (not installed) must be importable by executors' Python too.
    if os.environ.get("PYTHONPATH"):
        conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
    hosts = settings.spark_master.removeprefix("spark://").split(",")
    if all(LOOPBACK.fullmatch(host) for host in hosts):
        # A cluster on this machine's loopback reaches the driver there, whatever SPARK_LOCAL_IP says.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def _class_archive_option(settings: Settings) -> str:
    """The class archive a new driver maps instead of loading Spark's classes one by one (infra/class_archive.py)."""
    if not settings.spark_class_archive:
        return ""
    from lakehouse.infra.class_archive import java_option

    option = java_option(settings.jars_dir)
    return f" {option}" if option else ""


def get_spark(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """The process's Spark session (created on first call with the settings' configuration)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    Path(settings.log_dir).mkdir(parents=True, exist_ok=True)
    # Workers of a local master bind to loopback instead of the machine's external address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # glibc gives each thread that mallocs its own arena (up to 16 on 2 cores) and keeps what is freed there:
    # the driver's native memory outside the JVM's own accounting grew from about 100 to 420 MiB between 1M
    # and 4M events. Two arenas keep it near 100 (docs/performance.md). The JVM inherits this environment.
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    builder = SparkSession.builder
    conf = spark_conf(settings, app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    # A new JVM takes seconds to start: say so, so a pause at the start of a command has a reason.
    archived = "-XX:SharedArchiveFile=" in conf["spark.driver.extraJavaOptions"]
    archive = "from the class archive" if archived else "without a class archive"
    log.info("starting a Spark session (%s, driver memory %s, JVM options %s): a new JVM, %s", settings.spark_master,
             settings.spark_driver_memory, settings.spark_java_options, archive)
    started = time.monotonic()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    quiet_error_context_loggers()
    log.info("Spark session ready in %.1f s (Spark %s)", time.monotonic() - started, spark.version)
    return spark


def quiet_error_context_loggers() -> None:
    """PySpark logs every failed query (JSON with a JVM trace) to stderr before raising it.

    The exception still reaches the caller, who turns it into one sentence; the dump is noise.
    """
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def stop_spark() -> None:
    """Stop the process's Spark session, if any."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
