"""One hop from Kafka to silver: a topic's bronze and silver flows run as one query in a stream.

As two queries, silver sees a bronze commit only at its own next trigger, reads it back from the Delta
log and commits: a hop, about 2 s at the median on two cores (docs/performance.md, "Limits on
two cores"). Here one query reads the topic, and each micro-batch is appended to bronze by the bronze flow's
transform, then the very rows appended are parsed by the silver flow's transform and written by its
writer (`SilverWriter`): the two flows' own per-batch functions, in one batch.

The tables stay the two flows' own, so their own queries (a catch-up, a Dagster run) take over where
this one stopped:

- bronze's rows keep their Kafka coordinates, from which the bronze flow resumes (`bronze_positions`);
- each silver commit records the bronze versions its batch read in the silver flow's own form
  (streaming/positions.py: `from` version V, `sources` version V + 1, this query's id and batch number),
  from which the silver flow rebuilds its checkpoint. A batch stopped between its writes runs again
  there with the same txn app ids, so Delta skips the writes it had made.

Every start hands over the other way the same way: both flows first catch up (availableNow), which
also recovers a one-hop batch cut short; then their checkpoints are dropped (they would be behind once
this query writes) and this query starts with a new checkpoint after the offsets bronze holds. So this
query never replays a batch: recovery is the flows' own, which their tests cover.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import commits_after, table_id, table_version
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import delete_tree
from lakehouse.streaming.positions import StreamBinding, commit_metadata, parse_metadata
from lakehouse.streaming.runner import after_bronze, in_flow_pool, run_flow
from lakehouse.streaming.sinks import append_once
from lakehouse.streaming.sources import read_kafka_stream

log = logging.getLogger(__name__)


def one_hop_pairs(flows: list[Flow]) -> dict[str, Flow]:
    """Silver flow name -> the bronze flow it reads, for each topic whose two flows are both in `flows`."""
    writers = {f.target.name: f for f in flows}
    pairs = {}
    for flow in flows:
        if flow.writer is None or flow.schema is None:   # not a silver flow
            continue
        bronze = writers.get(flow.sources[0].name)
        if len(flow.sources) == 1 and bronze is not None and isinstance(bronze.source, TopicSpec):
            pairs[flow.name] = bronze
    return pairs


def checkpoint(silver: Flow, ctx: FlowContext) -> str:
    """The one-hop query's own checkpoint, beside the silver flow's (new at every start)."""
    return f"{silver.checkpoint(ctx).rstrip('/')}-one-hop"


def covering(flow: Flow, ctx: FlowContext) -> tuple[str, TopicSpec] | None:
    """The checkpoint of the one-hop query that may run `flow` (a bronze or silver flow), and the topic it reads."""
    for silver, bronze in one_hop_pairs(list(flow_registry.FLOWS)).items():
        if flow.name in (silver, bronze.name):
            return checkpoint(flow_registry.BY_NAME[silver], ctx), bronze.source
    return None


@dataclass
class OneHopBinding(StreamBinding):
    """Records each silver commit's positions as the silver flow's own query would: the bronze version it read."""

    bronze_version: int = -1
    bronze_table_id: str | None = None
    at_ms: int = 0

    def record(self, spark: SparkSession, batch_id: int) -> dict[str, Any]:
        (name,) = self.sources
        pos = {"table_id": self.bronze_table_id}
        return {
            "flow": self.flow, "batch": batch_id, "query": self.query_id(spark), "app": self.app,
            "sources": {name: {"version": self.bronze_version + 1, **pos}},
            "from": {name: {"version": self.bronze_version, **pos}}, "at": self.at_ms, "watermark_ms": None,
        }


class OneHopWriter:
    """A `(kafka_batch, batch_id)` function: the batch appended to bronze, then those rows written to silver."""

    def __init__(self, bronze: Flow, silver: Flow, ctx: FlowContext, *, checkpoint: str):
        self.bronze, self.silver_flow, self.ctx = bronze, silver, ctx
        self.bronze_path = bronze.target.path(ctx.lake_root)
        self.silver = silver.batch_writer(ctx)
        self.binding = OneHopBinding(flow=silver.name, app=silver.app_id, checkpoint=checkpoint,
                                     sources={bronze.target.name: self.bronze_path})
        self.silver.bind_stream(self.binding)
        self.stats = self.silver.stats

    def __call__(self, kafka: DataFrame, batch_id: int) -> None:
        spark = kafka.sparkSession
        query = self.binding.query_id(spark)
        self.binding.at_ms = int(time.time() * 1000)
        # Cached as appended: silver parses the rows bronze holds (their ingest time included), not a re-read of Kafka.
        rows = self.bronze.apply(kafka, ctx=self.ctx).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            before = table_version(spark, self.bronze_path)
            append_once(rows, self.bronze_path, app_id=f"{self.bronze.app_id}-{query}", batch_id=batch_id,
                        partition_by=self.bronze.target.partition_by,
                        user_metadata=commit_metadata(self.bronze.name, batch_id, None, query=query))
            self.binding.bronze_version = self._appended(spark, before, query, batch_id)
            if self.binding.bronze_table_id is None:
                self.binding.bronze_table_id = table_id(spark, self.bronze_path)
            self.silver(self.silver_flow.apply(rows, ctx=self.ctx), batch_id)
        finally:
            rows.unpersist()

    def _appended(self, spark: SparkSession, before: int | None, query: str, batch_id: int) -> int:
        """The bronze version this batch's append made (another writer may have committed meanwhile)."""
        for commit in commits_after(spark, self.bronze_path, before):
            record = parse_metadata(commit.user_metadata) or {}
            if record.get("query") == query and record.get("batch") == batch_id:
                return commit.version
        raise RuntimeError(f"flow {self.bronze.name}: the append of one-hop batch {batch_id} is not in "
                           f"{self.bronze.target.name}'s log after version {before}")


def start_one_hop(spark: SparkSession, bronze: Flow, silver: Flow, ctx: FlowContext, *,
                  trigger: dict[str, Any]) -> tuple[StreamingQuery, OneHopWriter]:
    """Hand over from the two flows (both catch up, their checkpoints dropped), then start the one-hop query."""
    log.info("flows %s and %s catch up before one query takes over both (one hop from %s to %s)",
             bronze.name, silver.name, bronze.source.name, silver.target.name)
    for flow in (bronze, silver):
        run_flow(spark, flow, ctx)
    own = checkpoint(silver, ctx)
    for folder in (bronze.checkpoint(ctx), silver.checkpoint(ctx), own):
        delete_tree(spark, folder)   # the flows rebuild theirs from the tables when they run again
    starting, said = after_bronze(spark, bronze, ctx)
    writer = OneHopWriter(bronze, silver, ctx, checkpoint=own)
    stream = read_kafka_stream(spark, bronze.source, ctx, starting_offsets=starting)
    query_writer = (stream.writeStream.queryName(silver.name).option("checkpointLocation", own)
                    .trigger(**trigger).foreachBatch(writer))
    query = in_flow_pool(spark, silver, query_writer.start)
    log.info("flow %s: one query now writes %s and %s, from %s", silver.name, bronze.target.name,
             silver.target.name, said)
    return query, writer
