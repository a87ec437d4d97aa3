"""Bronze: Kafka records exactly as they arrived, with their coordinates; bronze never parses."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def to_bronze(kafka: DataFrame) -> DataFrame:
    """Keep key, value bytes, headers and (topic, partition, offset); add the broker and ingest timestamps."""
    return kafka.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("appended_at"),
        F.col("timestampType").alias("timestamp_type"),
        F.current_timestamp().alias("ingested_at"),
    )
