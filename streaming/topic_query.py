"""One query per topic: a topic's bronze and silver flows, and the gold flows that read only its silver, in one stream.

As separate queries, each table sees its source's commit only at its own next trigger, reads it back
from the Delta log and commits: a hop, about 2 s at the median on two cores, and a Spark job, a Delta
snapshot and a commit per flow per trigger (docs/performance.md, "Limits on two cores"). Here one
query reads the topic, and each micro-batch is appended to bronze by the bronze flow's transform; the
very rows appended are parsed by the silver flow's transform and written by its writer (`SilverWriter`);
the rows silver appended are then handed to each member: a gold (or dimension) flow whose only source
is that silver table, through its own transform and its own writer. The flows' own per-batch
functions, in one batch.

The tables stay the flows' own, so their own queries (a catch-up, a Dagster run) take over where this
one stopped:

- bronze's rows keep their Kafka coordinates, from which the bronze flow resumes (`bronze_positions`);
- each silver and member commit records the version its batch read in the flow's own form
  (streaming/positions.py: `from` version V, `sources` version V + 1, this query's id and batch number):
  silver read the bronze version this batch appended, a member the silver version it appended. From
  those the flow rebuilds its checkpoint. A batch stopped between its writes runs again there with the
  same txn app ids, so Delta skips the writes it had made.

Every start hands over the other way the same way: the flows first catch up (availableNow), which also
recovers a batch of this query cut short; then their checkpoints are dropped (they would be behind once
this query writes) and this query starts with a new checkpoint after the offsets bronze holds. So this
query never replays a batch: recovery is the flows' own, which their tests cover.

A member whose batch fails (a quality rule of fail severity, a user's bad SQL) fails the query, after
bronze and silver committed the batch. The restart's catch-up runs the member's own query over that
batch again (a passing fault heals there); if it fails again, the query starts without it, so the topic's
other tables keep streaming, and the member goes on as its own query, where its failure is reported and
retried as any flow's is. (It is let go only when this query restarts.) The flows' rebuilt checkpoints get
new query ids, so several of them may catch up at once although their records all name this query.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import commits_after, table_id, table_version
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import delete_tree, has_delta_log
from lakehouse.streaming.positions import StreamBinding, commit_metadata, parse_metadata, write_text
from lakehouse.streaming.runner import FlowRun, after_bronze, first_line, in_flow_pool, run_flow
from lakehouse.streaming.sinks import append_once
from lakehouse.streaming.sources import read_kafka_stream

log = logging.getLogger(__name__)

MEMBERS_FILE = "members"     # in a topic query's checkpoint: the members its batches write (streaming/topic_runs.py)


class MemberError(RuntimeError):
    """A member's batch failed inside its topic's query; the message names the member and the failure."""


@dataclass(frozen=True)
class TopicGroup:
    """The flows one topic's query can run: its bronze and silver flows, and the flows that read only that silver."""

    bronze: Flow
    silver: Flow
    members: tuple[Flow, ...] = ()


def topic_groups(flows: list[Flow]) -> dict[str, TopicGroup]:
    """Silver flow name -> its topic's group, for each topic whose bronze and silver flows are both in `flows`."""
    writers = {f.target.name: f for f in flows}
    groups = {}
    for flow in flows:
        if flow.writer is None or flow.schema is None:   # not a silver flow
            continue
        bronze = writers.get(flow.sources[0].name)
        if len(flow.sources) == 1 and bronze is not None and isinstance(bronze.source, TopicSpec):
            members = tuple(f for f in flows if f.output == "batch" and f.schema is None and len(f.sources) == 1
                            and f.sources[0].name == flow.target.name)
            groups[flow.name] = TopicGroup(bronze, flow, members)
    return groups


def checkpoint(silver: Flow, ctx: FlowContext) -> str:
    """The topic query's own checkpoint, beside the silver flow's (new at every start)."""
    return f"{silver.checkpoint(ctx).rstrip('/')}-topic"


def write_members(spark: SparkSession, own: str, members: tuple[Flow, ...]) -> None:
    """Record in the topic query's checkpoint which members its batches write."""
    write_text(spark, f"{own}/{MEMBERS_FILE}", json.dumps(sorted(m.name for m in members)))


def covering(flow: Flow, ctx: FlowContext) -> tuple[str, TopicSpec] | None:
    """The checkpoint of the topic query that may run `flow`, and the topic it reads."""
    for silver, group in topic_groups(list(flow_registry.FLOWS)).items():
        if flow.name in (silver, group.bronze.name, *(m.name for m in group.members)):
            return checkpoint(flow_registry.BY_NAME[silver], ctx), group.bronze.source
    return None


@dataclass
class ReadBinding(StreamBinding):
    """Records each commit's positions as the flow's own query would: the one version of its source the batch read."""

    version: int = -1
    source_table_id: str | None = None
    at_ms: int = 0

    def record(self, spark: SparkSession, batch_id: int) -> dict[str, Any]:
        (name,) = self.sources
        pos = {"table_id": self.source_table_id}
        return {
            "flow": self.flow, "batch": batch_id, "query": self.query_id(spark), "app": self.app,
            "sources": {name: {"version": self.version + 1, **pos}},
            "from": {name: {"version": self.version, **pos}}, "at": self.at_ms, "watermark_ms": None,
        }


@dataclass
class Member:
    """A flow fed with the rows its topic query appended to silver."""

    flow: Flow
    writer: Any
    binding: ReadBinding


class TopicWriter:
    """A `(kafka_batch, batch_id)` function: the batch appended to bronze, those rows to silver, silver's to each member."""

    def __init__(self, group: TopicGroup, ctx: FlowContext, *, checkpoint: str, members: tuple[Flow, ...] = ()):
        self.bronze, self.silver_flow, self.ctx = group.bronze, group.silver, ctx
        self.bronze_path = group.bronze.target.path(ctx.lake_root)
        self.silver_path = group.silver.target.path(ctx.lake_root)
        self.silver = group.silver.batch_writer(ctx)
        self.binding = ReadBinding(flow=group.silver.name, app=group.silver.app_id, checkpoint=checkpoint,
                                   sources={group.bronze.target.name: self.bronze_path})
        self.silver.bind_stream(self.binding)
        self.silver.then = self._feed
        self.stats = self.silver.stats
        self.members: dict[str, Member] = {}
        for flow in members:
            binding = ReadBinding(flow=flow.name, app=flow.app_id, checkpoint=checkpoint,
                                  sources={group.silver.target.name: self.silver_path})
            self.members[flow.name] = Member(flow, flow.batch_writer(ctx).bind_stream(binding), binding)
        self._query: str | None = None
        self._batch_id = -1
        self._silver_before: int | None = None

    def __call__(self, kafka: DataFrame, batch_id: int) -> None:
        spark = kafka.sparkSession
        query = self._query = self.binding.query_id(spark)
        self._batch_id = batch_id
        self.binding.at_ms = int(time.time() * 1000)
        # Cached as appended: silver parses the rows bronze holds (their ingest time included), not a re-read of Kafka.
        rows = self.bronze.apply(kafka, ctx=self.ctx).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            before = table_version(spark, self.bronze_path)
            append_once(rows, self.bronze_path, app_id=f"{self.bronze.app_id}-{query}", batch_id=batch_id,
                        partition_by=self.bronze.target.partition_by,
                        user_metadata=commit_metadata(self.bronze.name, batch_id, None, query=query))
            self.binding.version = self._appended(spark, self.bronze_path, before, self.bronze.name)
            if self.binding.source_table_id is None:
                self.binding.source_table_id = table_id(spark, self.bronze_path)
            self._silver_before = table_version(spark, self.silver_path) if self.members else None
            self.silver(self.silver_flow.apply(rows, ctx=self.ctx), batch_id)
        finally:
            rows.unpersist()

    def _feed(self, appended: DataFrame, batch_id: int) -> None:
        """Each attached member's writer over the rows this batch appended to silver (called by SilverWriter)."""
        if not self.members:
            return
        spark = appended.sparkSession
        version = self._appended(spark, self.silver_path, self._silver_before, self.silver_flow.name)
        silver_id = table_id(spark, self.silver_path)
        for member in self.members.values():
            member.binding.version, member.binding.source_table_id = version, silver_id
            member.binding.at_ms = self.binding.at_ms
            try:
                member.writer(member.flow.apply(appended, ctx=self.ctx), batch_id)
            except Exception as exc:
                raise MemberError(f"{member.flow.name} failed in the query of {self.bronze.source.name}: "
                                   f"{first_line(exc)}") from exc

    def _appended(self, spark: SparkSession, path: str, before: int | None, flow: str) -> int:
        """The version this batch's write of `flow` made (another writer may have committed meanwhile)."""
        for commit in commits_after(spark, path, before):
            record = parse_metadata(commit.user_metadata) or {}
            if record.get("query") == self._query and record.get("batch") == self._batch_id and record.get("flow") == flow:
                return commit.version
        raise RuntimeError(f"flow {flow}: the write of batch {self._batch_id} of the query of "
                           f"{self.bronze.source.name} is not in {path}'s log after version {before}")


@dataclass
class Started:
    """A topic query that started: the query, its writer, and the members left to run as their own queries (why)."""

    query: StreamingQuery
    writer: TopicWriter
    left_out: dict[str, str] = field(default_factory=dict)
    caught_up: dict[str, FlowRun] = field(default_factory=dict)   # what each flow's catch-up before it did


def usable(group: TopicGroup, caught_up: dict[str, FlowRun]) -> dict[str, FlowRun]:
    """The earlier catch-ups a start may reuse: a flow's only while the flows it reads are not caught up again.

    A flow that catches up again now (its earlier catch-up failed, say while the broker was away) appends
    rows its readers' earlier catch-ups never saw; the query starts after what bronze holds, so readers
    not caught up again would never see them.
    """
    if group.bronze.name not in caught_up:
        return {}
    if group.silver.name not in caught_up:
        return {group.bronze.name: caught_up[group.bronze.name]}
    names = {f.name for f in (group.bronze, group.silver, *group.members)}
    return {name: run for name, run in caught_up.items() if name in names}


def start_topic_query(spark: SparkSession, group: TopicGroup, ctx: FlowContext, *, trigger: dict[str, Any],
                      caught_up: dict[str, FlowRun] | None = None) -> Started:
    """Hand over from the flows (each catches up, their checkpoints dropped), then start the topic's query.

    `caught_up`: flows that have just caught up (the stream's start catches every flow up at once), with
    their runs; they are not run again.
    """
    bronze, silver = group.bronze, group.silver
    done = usable(group, caught_up or {})
    todo = [f.name for f in (bronze, silver, *group.members) if f.name not in done]
    if todo:
        log.info("flows %s catch up before one query takes them over (from %s)", ", ".join(todo), bronze.source.name)
    caught_up = {flow.name: done.get(flow.name) or run_flow(spark, flow, ctx) for flow in (bronze, silver)}
    members, left_out = [], {}
    for flow in group.members:
        missing = [t.name for t in flow.lookups if not has_delta_log(spark, t.path(ctx.lake_root))]
        if missing:
            left_out[flow.name] = f"{', '.join(missing)} does not exist yet"
            continue
        try:
            caught_up[flow.name] = done.get(flow.name) or run_flow(spark, flow, ctx)
        except Exception as exc:  # noqa: BLE001 - the member runs as its own query, which reports its failure
            left_out[flow.name] = first_line(exc)
            continue
        members.append(flow)
    own = checkpoint(silver, ctx)
    for folder in (*(f.checkpoint(ctx) for f in (bronze, silver, *members)), own):
        delete_tree(spark, folder)   # the flows rebuild theirs from the tables when they run again
    starting, said = after_bronze(spark, bronze, ctx)
    query, writer = start_query(spark, TopicGroup(bronze, silver, tuple(members)), ctx, trigger=trigger,
                                starting_offsets=starting)
    log.info("one query now writes %s, from %s", ", ".join(f.target.name for f in (bronze, silver, *members)), said)
    return Started(query, writer, left_out, caught_up)


def start_query(spark: SparkSession, group: TopicGroup, ctx: FlowContext, *, trigger: dict[str, Any],
                starting_offsets: str | None) -> tuple[StreamingQuery, TopicWriter]:
    """Start the topic's query on its checkpoint (a new one at `starting_offsets`) over the group's members."""
    own = checkpoint(group.silver, ctx)
    writer = TopicWriter(group, ctx, checkpoint=own, members=group.members)
    stream = read_kafka_stream(spark, group.bronze.source, ctx, starting_offsets=starting_offsets)
    query_writer = (stream.writeStream.queryName(group.silver.name).option("checkpointLocation", own)
                    .trigger(**trigger).foreachBatch(writer))
    query = in_flow_pool(spark, group.silver, query_writer.start)
    write_members(spark, own, group.members)
    return query, writer
