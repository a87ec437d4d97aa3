"""Dagster resources carry the settings, and never a secret: resource config is shown in the Dagster UI."""

from __future__ import annotations

from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import spark_conf
from lakehouse.orchestration.resources import build_resources
from lakehouse.pipelines import shop


def test_secret_spark_settings_stay_out_of_resource_config(tmp_path):
    """An object-store key in LAKEHOUSE_SPARK_CONF is not in the Spark resource's config; other entries are."""
    settings = Settings(home=str(tmp_path), spark_conf={
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        "spark.hadoop.fs.s3a.access.key": "AKIA123",
        "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
    })
    spark = build_resources(settings)["spark"]
    assert spark.extra_conf == {"spark.hadoop.fs.s3a.endpoint": "http://minio:9000"}
    shown = repr(spark) + str(spark.model_dump())
    assert "s3cr3t" not in shown and "AKIA123" not in shown


def test_a_dagster_runs_spark_session_gets_the_clis_spark_configuration(tmp_path, jars_dir):
    """Every Spark setting reaches the session a Dagster run starts on its own: JVM options and class archive too."""
    settings = Settings(
        home=str(tmp_path), jars_dir=jars_dir, spark_master="local[2]", spark_driver_memory="3g",
        spark_java_options="-XX:+UseG1GC -Xss4m", spark_class_archive=False, spark_shuffle_partitions=7,
        spark_ui=True, spark_conf={"spark.sql.ansi.enabled": "true"}, replay_window="3 days",
    )
    run_settings = build_resources(settings)["spark"].settings()
    assert spark_conf(run_settings) == spark_conf(settings)
    assert "-XX:+UseG1GC -Xss4m" in spark_conf(run_settings)["spark.driver.extraJavaOptions"]


def test_every_spark_read_of_a_topic_gets_the_kafka_fetch_wait_setting(tmp_path):
    """LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS reaches the Kafka options of the flows' reads; the default is short."""
    from lakehouse.schemas import topics
    from lakehouse.streaming.sources import kafka_options

    def fetch_wait(settings: Settings) -> str:
        resources = build_resources(settings)
        return kafka_options(shop.ORDERS.topic_spec, resources["lake"].flow_context(resources["kafka"]))["kafka.fetch.max.wait.ms"]

    assert fetch_wait(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})) == "10"
    assert fetch_wait(Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS": "500"})) == "500"
