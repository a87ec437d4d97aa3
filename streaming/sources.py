"""Streaming reads: a Kafka topic from its earliest offset, or a Delta table's appends."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from schemas.tables import TableSpec
from schemas.topics import TopicSpec
from streaming.context import FlowContext


def read_kafka_stream(spark: SparkSession, topic: TopicSpec, ctx: FlowContext) -> DataFrame:
    """The topic as an unbounded DataFrame (key, value, headers, coordinates, timestamp)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", ctx.kafka_bootstrap)
        .option("subscribe", topic.name)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        # Offsets that vanished (retention) must stop the stream loudly, never skip silently. A compacted
        # changelog has gaps by design (older values of a key removed), which Spark would take for loss.
        .option("failOnDataLoss", "false" if topic.cleanup_policy == "compact" else "true")
        # A client call blocks a query's stop until it times out (60 s by default): bound it, so that a
        # lost broker is reported, and the query stopped, within seconds. Healthy requests take milliseconds.
        .option("kafka.request.timeout.ms", "10000")
        .option("kafka.default.api.timeout.ms", "15000")
    )
    if ctx.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(ctx.max_offsets_per_trigger))
    return reader.load()


def read_delta_stream(spark: SparkSession, table: TableSpec, ctx: FlowContext) -> DataFrame:
    """The appends to a Delta table as an unbounded DataFrame."""
    # A backfill or replay rewrites rows of this table and recomputes the tables downstream itself, so a
    # reader skips those rewrite commits instead of stopping for good (DELTA_SOURCE_TABLE_IGNORE_CHANGES).
    reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    if ctx.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(ctx.max_files_per_trigger))
    return reader.load(table.path(ctx.lake_root))
