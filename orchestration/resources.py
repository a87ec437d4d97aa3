"""Dagster resources for Spark, Kafka and the lake, each built from the one settings object."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import SparkSession

from lakehouse.infra.settings import Settings, is_secret
from lakehouse.infra.spark import get_spark
from lakehouse.schemas.pipeline import active_pipeline
from lakehouse.schemas.tables import QUALITY_RESULTS
from lakehouse.streaming.context import FlowContext


class SparkResource(dg.ConfigurableResource):
    """The Spark session: local[*] by default, a spark:// master when configured; jars from the local folder."""

    master: str
    driver_memory: str
    shuffle_partitions: int
    home: str
    jars_dir: str
    log_dir: str
    java_options: str                   # the driver JVM's (LAKEHOUSE_SPARK_JAVA_OPTIONS)
    class_archive: bool                 # start the driver JVM from the class archive (infra/class_archive.py)
    ui: bool = False
    extra_conf: dict[str, str] = {}     # never a secret: resource config shows in the Dagster UI
    replay_window: str = "7 days"       # new tables keep removed files and their log this long
    # A lake on s3a:// gets the S3 jars and S3A's settings for its bucket (infra/spark.py); never keys.
    lake_root: str = ""
    s3_endpoint: str = ""
    s3_region: str = ""
    s3_path_style: bool = False

    def settings(self) -> Settings:
        """The settings a run's own Spark session starts with: the same Spark configuration as the CLI's."""
        # Secrets (object-store keys, passwords) come from the environment when the session starts.
        secrets = {k: v for k, v in Settings.from_env().spark_conf.items() if is_secret(k)}
        return Settings(
            home=self.home, jars_dir=self.jars_dir, log_dir=self.log_dir, spark_master=self.master,
            spark_driver_memory=self.driver_memory, spark_shuffle_partitions=self.shuffle_partitions,
            spark_ui=self.ui, spark_conf={**secrets, **self.extra_conf}, replay_window=self.replay_window,
            spark_java_options=self.java_options, spark_class_archive=self.class_archive, lake_root=self.lake_root,
            s3_endpoint=self.s3_endpoint, s3_region=self.s3_region, s3_path_style=self.s3_path_style,
        )

    def session(self) -> SparkSession:
        return get_spark(self.settings())


class KafkaResource(dg.ConfigurableResource):
    """Where the Kafka cluster is and how new topics are replicated."""

    bootstrap_servers: str
    replication_factor: int = 1
    fetch_max_wait_ms: int          # kafka.fetch.max.wait.ms of every Spark read (LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS)


class LakeResource(dg.ConfigurableResource):
    """The lake root under which every Delta table and checkpoint lives, and the stream tunables."""

    root: str
    silver_dedup_watermark: str
    gold_watermark: str
    gold_watermarks: dict[str, str] = {}
    params: dict[str, str] = {}         # the pipeline's parameters (LAKEHOUSE_<NAME>); missing ones: defaults
    event_time_floor: str = "2000-01-01T00:00:00Z"
    event_time_max_ahead: str = "1 day"
    max_offsets_per_trigger: int = 0
    max_bytes_per_trigger: str = "0"
    catch_up_parallel: int = 1          # flows a catch-up runs at once
    one_query_per_topic: bool = True    # a topic's flows catch up in one query when they can (streaming/topic_runs.py)
    replay_window: str = "7 days"       # what VACUUM keeps and the retention checks require
    quality: bool = True                # check each batch against its table's expectation suite
    quality_dir: str = ""               # GX's project folder (Data Docs); "": results go to the Delta table only
    quality_docs_keep: int = 20         # validations per table the Data Docs keep (the results table keeps all)

    def quality_gate(self):
        """The expectation suites' gate the flows call, or None when checks are off."""
        if not self.quality:
            return None
        from lakehouse.quality.gate import Gate

        return Gate(QUALITY_RESULTS.path(self.root), self.quality_dir or None, docs_keep=self.quality_docs_keep)

    def flow_context(self, kafka: KafkaResource) -> FlowContext:
        return FlowContext(
            quality=self.quality_gate(),
            lake_root=self.root,
            kafka_bootstrap=kafka.bootstrap_servers,
            kafka_fetch_max_wait_ms=kafka.fetch_max_wait_ms,
            silver_dedup_watermark=self.silver_dedup_watermark,
            gold_watermark=self.gold_watermark,
            gold_watermarks=dict(self.gold_watermarks),
            params=active_pipeline().param_values({}, **self.params),
            event_time_floor=self.event_time_floor,
            event_time_max_ahead=self.event_time_max_ahead,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            max_bytes_per_trigger=self.max_bytes_per_trigger,
        )


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """The three resources, all from one settings object."""
    return {
        "spark": SparkResource(
            master=settings.spark_master, driver_memory=settings.spark_driver_memory,
            shuffle_partitions=settings.spark_shuffle_partitions, home=settings.home,
            jars_dir=settings.jars_dir, log_dir=settings.log_dir, ui=settings.spark_ui,
            extra_conf={k: v for k, v in settings.spark_conf.items() if not is_secret(k)},
            replay_window=settings.replay_window, java_options=settings.spark_java_options,
            class_archive=settings.spark_class_archive, lake_root=settings.lake_root,
            s3_endpoint=settings.s3_endpoint, s3_region=settings.s3_region, s3_path_style=settings.s3_path_style,
        ),
        "kafka": KafkaResource(
            bootstrap_servers=settings.kafka_bootstrap, replication_factor=settings.kafka_replication_factor,
            fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        ),
        "lake": LakeResource(
            root=settings.lake_root, silver_dedup_watermark=settings.silver_dedup_watermark,
            gold_watermark=settings.gold_watermark, gold_watermarks=dict(settings.gold_watermarks),
            params={name: str(value) for name, value in active_pipeline().param_values().items()},
            max_offsets_per_trigger=settings.max_offsets_per_trigger, max_bytes_per_trigger=settings.max_bytes_per_trigger,
            catch_up_parallel=settings.catch_up_parallel, one_query_per_topic=settings.catch_up_one_query_per_topic,
            event_time_floor=settings.event_time_floor, event_time_max_ahead=settings.event_time_max_ahead,
            replay_window=settings.replay_window, quality=settings.quality, quality_dir=settings.quality_dir,
            quality_docs_keep=settings.quality_docs_keep,
        ),
    }
