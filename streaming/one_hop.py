"""One hop from Kafka to silver: a topic's bronze and silver flows run as one query in a stream.

As two queries, silver sees a bronze commit only at its own next trigger, reads it back from the Delta
log and commits: a hop, about 2 s at the median on two cores (docs/performance.md, the twenty-fourth
step). Here one query reads the topic through the bronze flow's transform and then the silver flow's
(which keeps every bronze column). Each micro-batch, cached, is appended to bronze in bronze's columns,
then written by the silver flow's writer (`SilverWriter`): the two flows' own transforms and per-batch
function, in one batch.

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
query never replays a batch: recovery is the flows' own, which their tests cover. That is also why its
bronze append carries no txn id (Delta's check of one costs the append the table's whole state): a
batch cut after it is not run again by this query, and the bronze flow resumes after the coordinates.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from schemas.topics import TopicSpec
from streaming.context import FlowContext
from streaming.delta_log import commits_after, table_id, table_version
from streaming.flows import BY_NAME, FLOWS, Flow
from streaming.lake_files import delete_tree
from streaming.positions import StreamBinding, commit_metadata, parse_metadata
from streaming.runner import after_bronze, in_flow_pool, run_flow
from streaming.sinks import append_blind
from streaming.sources import read_kafka_stream

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
    for silver, bronze in one_hop_pairs(list(FLOWS)).items():
        if flow.name in (silver, bronze.name):
            return checkpoint(BY_NAME[silver], ctx), bronze.source
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
    """A `(parsed_batch, batch_id)` function: the batch's bronze columns appended to bronze, then the batch to silver.

    The query applies both flows' transforms to its stream once, at its start, so each batch arrives parsed:
    built in Python from a batch's rows instead, the parse plan cost 0.6 s a batch (docs/performance.md).
    """

    def __init__(self, bronze: Flow, silver: Flow, ctx: FlowContext, *, checkpoint: str, bronze_columns: list[str]):
        self.bronze, self.ctx = bronze, ctx
        self.bronze_columns = bronze_columns   # what the bronze transform gives; the silver transform keeps them all
        self.bronze_path = bronze.target.path(ctx.lake_root)
        self.silver = silver.batch_writer(ctx)
        self.binding = OneHopBinding(flow=silver.name, app=silver.app_id, checkpoint=checkpoint,
                                     sources={bronze.target.name: self.bronze_path})
        self.silver.bind_stream(self.binding)
        self.stats = self.silver.stats

    def __call__(self, parsed: DataFrame, batch_id: int) -> None:
        spark = parsed.sparkSession
        query = self.binding.query_id(spark)
        self.binding.at_ms = int(time.time() * 1000)
        # Cached as appended: silver is written from the rows bronze holds, not from a second read of Kafka.
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            before = table_version(spark, self.bronze_path)
            # No txn id: this query never runs a batch twice (see the module docstring), and the bronze flow
            # resumes after the Kafka coordinates the table holds, so a txn check would only cost time.
            append_blind(parsed.select(*self.bronze_columns), self.bronze_path,
                         partition_by=self.bronze.target.partition_by,
                         user_metadata=commit_metadata(self.bronze.name, batch_id, None, query=query))
            version = self._appended(spark, before, query, batch_id)
            if version is None:
                if parsed.isEmpty():
                    # A new query's first batch runs even when Kafka has nothing new (it has no offsets to compare
                    # with). Delta commits no empty append without a txn id, and silver has nothing to write.
                    return
                raise RuntimeError(f"flow {self.bronze.name}: the append of one-hop batch {batch_id} is not in "
                                   f"{self.bronze.target.name}'s log after version {before}")
            self.binding.bronze_version = version
            if self.binding.bronze_table_id is None:
                self.binding.bronze_table_id = table_id(spark, self.bronze_path)
            self.silver(parsed, batch_id)
        finally:
            parsed.unpersist()

    def _appended(self, spark: SparkSession, before: int | None, query: str, batch_id: int) -> int | None:
        """The bronze version this batch's append made (another writer may have committed meanwhile), if any."""
        for commit in commits_after(spark, self.bronze_path, before):
            record = parse_metadata(commit.user_metadata) or {}
            if record.get("query") == query and record.get("batch") == batch_id:
                return commit.version
        return None


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
    rows = bronze.apply(read_kafka_stream(spark, bronze.source, ctx, starting_offsets=starting), ctx=ctx)
    writer = OneHopWriter(bronze, silver, ctx, checkpoint=own, bronze_columns=rows.columns)
    query_writer = (silver.apply(rows, ctx=ctx).writeStream.queryName(silver.name).option("checkpointLocation", own)
                    .trigger(**trigger).foreachBatch(writer))
    query = in_flow_pool(spark, silver, query_writer.start)
    log.info("flow %s: one query now writes %s and %s, from %s", silver.name, bronze.target.name,
             silver.target.name, said)
    return query, writer
