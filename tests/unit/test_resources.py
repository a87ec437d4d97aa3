"""Dagster resources carry the settings, and never a secret: resource config is shown in the Dagster UI."""

from __future__ import annotations

from infra.settings import Settings
from orchestration.resources import build_resources


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
