"""The batch lane's one move: a flow run once over a bounded read of its inputs, by the streaming lane's own code.

`recompute` reads a flow's inputs as static DataFrames (a Delta snapshot, optionally at a version, or
a Kafka offset range), applies the flow's transform and hands the result to the flow's own
`(batch_df, batch_id)` writer as one batch, exactly as foreachBatch would. Its output goes to a
shadow lake (a folder of its own), never to the live tables; backfill, verify and replay then compare
the shadow with the live tables and, where asked, replace live rows with it. No transform lives here.

One batch over the whole bounded input has no watermark to fall behind: nothing in it is late, so a
recomputation counts every event, including those the stream sent to `late_arrivals`.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas.tables import KAFKA_COORDINATES, LATE_ARRIVALS, TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import delete_tree, has_delta_log
from lakehouse.streaming.sources import kafka_options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """Which bounded slice of a flow's inputs to read (default: every input's current snapshot)."""

    versions: dict[str, int] | None = None       # input table name -> Delta version to read (time travel)
    timestamps: dict[str, str] | None = None     # input table name -> timestamp to read as of
    kafka: dict[str, dict[str, dict[str, int]]] | None = None  # topic -> {"start": {p: o}, "end": {p: o}}
    without_late: bool = False                   # leave out the events the flow sent to late_arrivals


class Shadow:
    """A lake root of the batch lane's own, beside the live one: `<lake>/_batch/<purpose>-<utc>-<id>`."""

    def __init__(self, spark: SparkSession, ctx: FlowContext, purpose: str):
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.spark = spark
        self.root = f"{ctx.lake_root.rstrip('/')}/_batch/{purpose}-{stamp}-{uuid.uuid4().hex[:6]}"
        # Inputs and lookups come from the live lake (or an earlier shadow); writes go to the shadow.
        # Quality results name the lane: backfill, verify or replay.
        self.ctx = replace(ctx, lake_root=self.root, input_root=ctx.inputs, lane=purpose.split("-")[0])

    def path(self, table: TableSpec) -> str:
        return table.path(self.root)

    def read(self, table: TableSpec) -> DataFrame | None:
        if not has_delta_log(self.spark, self.path(table)):
            return None
        return self.spark.read.format("delta").load(self.path(table))

    def reading(self, input_roots: dict[str, str]) -> "Shadow":
        """The same shadow lake, its flows reading the tables named in `input_roots` from those roots."""
        view = copy.copy(self)
        view.ctx = replace(self.ctx, input_roots=input_roots)
        return view

    def drop(self) -> None:
        """Delete the shadow's files (through Hadoop, so an object-store lake works too)."""
        delete_tree(self.spark, self.root)


def read_input(spark: SparkSession, source: TopicSpec | TableSpec, ctx: FlowContext, inputs: Inputs) -> DataFrame:
    """One input of a flow as a static DataFrame: a Delta snapshot (at a version or time) or a Kafka range."""
    if isinstance(source, TopicSpec):
        return read_kafka_range(spark, source, ctx, (inputs.kafka or {}).get(source.name, {}))
    reader = spark.read.format("delta")
    if inputs.versions and source.name in inputs.versions:
        reader = reader.option("versionAsOf", inputs.versions[source.name])
    elif inputs.timestamps and source.name in inputs.timestamps:
        reader = reader.option("timestampAsOf", inputs.timestamps[source.name])
    return reader.load(ctx.input_path(source))


def read_kafka_range(spark: SparkSession, topic: TopicSpec, ctx: FlowContext, bounds: dict[str, dict[str, int]]) -> DataFrame:
    """A topic's records from `start` (default earliest) to `end` (default latest) offsets per partition."""
    def spec(offsets: dict[str, int] | None, default: str) -> str:
        if not offsets:
            return default
        return json.dumps({topic.name: {str(p): int(o) for p, o in offsets.items()}})

    return (
        spark.read.format("kafka").options(**kafka_options(topic, ctx))
        .option("startingOffsets", spec(bounds.get("start"), "earliest"))
        .option("endingOffsets", spec(bounds.get("end"), "latest"))
        .load()
    )


def unreconciled_late(spark: SparkSession, lake_root: str, flow: Flow) -> DataFrame | None:
    """The events this flow sent to late_arrivals that no backfill has folded in yet (None: no such table)."""
    path = LATE_ARRIVALS.path(lake_root)
    if not has_delta_log(spark, path):
        return None
    late = spark.read.format("delta").load(path).where(F.col("flow") == flow.name)
    if "reconciled_at" in late.columns:
        late = late.where(F.col("reconciled_at").isNull())
    return late


def recompute(spark: SparkSession, flow: Flow, shadow: Shadow, inputs: Inputs = Inputs()) -> DataFrame | None:
    """Run `flow` once over its bounded inputs into the shadow lake; returns the shadow table (None: no input yet)."""
    ctx = shadow.ctx
    for table in (*flow.sources, *flow.lookups):
        if isinstance(table, TableSpec) and not has_delta_log(spark, ctx.input_path(table)):
            log.info("recompute %s: %s does not exist yet", flow.name, table.name)
            return None
    frames = [read_input(spark, source, ctx, inputs) for source in flow.sources]
    if inputs.without_late and (late := unreconciled_late(spark, ctx.inputs, flow)) is not None:
        coordinates = late.select(*KAFKA_COORDINATES).distinct()
        frames = [df.join(coordinates, list(KAFKA_COORDINATES), "left_anti") for df in frames]
    out = flow.apply(*frames, ctx=ctx)
    target = shadow.path(flow.target)
    if flow.output == "batch":
        # The streaming lane's own micro-batch function, called once with the whole bounded input.
        try:
            flow.batch_writer(ctx)(out, 0)
        finally:
            if ctx.quality is not None:     # the stream's runner flushes after a run; here, after the one batch
                ctx.quality.flush(spark)
    else:
        writer = out.write.format("delta").mode("overwrite")
        if flow.target.partition_by:
            writer = writer.partitionBy(*flow.target.partition_by)
        writer.save(target)
    return shadow.read(flow.target)
