"""Streaming reads: a Kafka topic from its earliest offset, or a Delta table's appends (or from recorded positions)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext


def kafka_options(topic: TopicSpec, ctx: FlowContext) -> dict[str, str]:
    """What every read of a topic sets, streaming or bounded (the batch lane's)."""
    return {
        "kafka.bootstrap.servers": ctx.kafka_bootstrap,
        "subscribe": topic.name,
        "includeHeaders": "true",
        # Offsets that vanished (retention) must stop the read loudly, never skip silently. A compacted
        # changelog has gaps by design (older values of a key removed), which Spark would take for loss.
        "failOnDataLoss": "false" if topic.cleanup_policy == "compact" else "true",
        # Each read task's last fetch finds no more records, and the broker holds such a fetch this long
        # (Kafka's default 500 ms): most of a small micro-batch's read, with a task slot held idle meanwhile.
        "kafka.fetch.max.wait.ms": str(ctx.kafka_fetch_max_wait_ms),
    }


def read_kafka_stream(spark: SparkSession, topic: TopicSpec, ctx: FlowContext, *,
                      starting_offsets: str | None = None) -> DataFrame:
    """The topic as an unbounded DataFrame (key, value, headers, coordinates, timestamp).

    A new checkpoint starts at `starting_offsets` (Spark's JSON of offsets per partition: where a lost
    checkpoint's flow resumes), else at the earliest offsets; an existing checkpoint ignores it.
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_options(topic, ctx))
        .option("startingOffsets", starting_offsets or "earliest")
        # A client call blocks a query's stop until it times out (60 s by default): bound it, so that a
        # lost broker is reported, and the query stopped, within seconds. Healthy requests take milliseconds.
        .option("kafka.request.timeout.ms", "10000")
        .option("kafka.default.api.timeout.ms", "15000")
    )
    if ctx.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(ctx.max_offsets_per_trigger))
    return reader.load()


def stream_path(table: TableSpec, ctx: FlowContext) -> str:
    """Where a streaming flow reads the Delta table `table`."""
    return table.path(ctx.lake_root)


def read_delta_stream(spark: SparkSession, table: TableSpec, ctx: FlowContext, *,
                      starting_version: int | None = None) -> DataFrame:
    """The appends to a Delta table as an unbounded DataFrame.

    A new checkpoint reads the changes from `starting_version` on (where a lost checkpoint's flow
    resumes), else the table as it is and then its changes; an existing checkpoint ignores it.
    """
    # A backfill or replay rewrites rows of this table and recomputes the tables downstream itself, so a
    # reader skips those rewrite commits instead of stopping for good (DELTA_SOURCE_TABLE_IGNORE_CHANGES).
    reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    if ctx.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(ctx.max_files_per_trigger))
    if ctx.max_bytes_per_trigger not in ("", "0"):
        # Whichever cap is reached first ends the batch: a backlog of any size goes in bounded batches.
        reader = reader.option("maxBytesPerTrigger", ctx.max_bytes_per_trigger)
    if starting_version is not None:
        reader = reader.option("startingVersion", str(starting_version))
    return reader.load(stream_path(table, ctx))
