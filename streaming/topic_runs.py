"""A catch-up of one topic's flows as one availableNow query, when their tables let one query take over.

A catch-up (`lakehouse run`, Dagster's catch_up) ran each flow as its own query: 22 for the shop, each
paying a query start, Delta snapshots and commits, most of a small run's time. The flows one query runs
in a stream (streaming/topic_query.py: a topic's bronze and silver flows and the flows that read only
that silver) catch up here the same way, in one query whose micro-batches reach all of them.

One query takes over only where it reads exactly what the flows' own queries would:

- resume: the topic's query ran last (a catch-up like this one, or a stream): its newest batch is
  committed, it ran the same members, and each of their tables' newest data commit is one of its
  batches (nothing else wrote since);
- new: none of the flows' tables or checkpoints exists (a fresh lake), or each flow's own checkpoint
  has committed its newest batch and read all its source holds. A new query then starts after the
  Kafka offsets bronze holds, as a stream's topic query does.

Either way the flows' own checkpoints are dropped first: they would fall behind once this query writes,
and a flow run alone rebuilds its checkpoint from the positions the tables record (streaming/positions.py).
Otherwise the flows run as their own queries this time (their own recovery: a batch cut short, a
replay's swap, a member added), which leaves them level for the next run. A query whose batch fails
keeps what bronze appended; silver and the members then run as their own queries, which report the
failure (a quality breach, a user's bad SQL) as they always do.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import commits_after, last_data_commit, table_version
from lakehouse.streaming.fingerprints import DefinitionChanged, check_definition
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.health import done_version, latest_data_version, settled_batch
from lakehouse.streaming.kafka_topics import KafkaUnreachable, admin_client
from lakehouse.streaming.lake_files import delete_tree, has_delta_log
from lakehouse.streaming.positions import inspect_checkpoint, parse_metadata, read_text
from lakehouse.streaming.runner import (
    BrokerWatchdog, FlowRun, KafkaLost, _lost, _raise_if_kafka_lost, after_bronze, finished_run, first_line,
)
from lakehouse.streaming.shared_tables import ensure_shared_tables
from lakehouse.streaming.sources import stream_path
from lakehouse.streaming.topic_query import MEMBERS_FILE, TopicGroup, checkpoint, start_query

log = logging.getLogger(__name__)


@dataclass
class TopicRun:
    """What a topic's catch-up did: each flow's run, the flows left to run as their own queries, bronze's error."""

    runs: dict[str, FlowRun] = field(default_factory=dict)
    rest: list[Flow] = field(default_factory=list)
    error: BaseException | None = None      # the broker went away: bronze's failure


def _members(spark: SparkSession, own: str) -> list[str] | None:
    try:
        found = json.loads(read_text(spark, f"{own}/{MEMBERS_FILE}") or "null")
    except ValueError:
        return None
    return found if isinstance(found, list) else None


def _resumable(spark: SparkSession, group: TopicGroup, ctx: FlowContext, own: str) -> bool:
    """The topic query ran last over these members, finished its newest batch, and nothing else wrote since."""
    state = inspect_checkpoint(spark, own)
    batch = settled_batch(own) if state.state == "ok" else None
    if batch is None or _members(spark, own) != sorted(m.name for m in group.members):
        return False
    for flow in (group.bronze, group.silver, *group.members):
        path = flow.target.path(ctx.lake_root)
        commit = last_data_commit(spark, path)
        if commit is None:
            if has_delta_log(spark, path):
                return False        # only maintenance commits within reach: do not guess
            continue                # a member none of whose batches had rows for it
        record = parse_metadata(commit.user_metadata) or {}
        if record.get("query") != state.query_id or record.get("flow") != flow.name:
            return False
    return True


def _level(flow: Flow, ctx: FlowContext) -> bool:
    """The flow's own checkpoint committed its newest batch, and (but for bronze) read all its source holds."""
    batch = settled_batch(flow.checkpoint(ctx))
    if batch is None:
        return False
    if isinstance(flow.sources[0], TopicSpec):
        return True                 # bronze: a new query starts after the offsets its table holds
    newest = latest_data_version(stream_path(flow.sources[0], ctx))
    return newest is not None and bool(batch.sources) and done_version(batch.sources[0]) >= newest


def takeover(spark: SparkSession, group: TopicGroup, ctx: FlowContext) -> str | None:
    """How one query can take the group's flows over: "resume" its checkpoint, start a "new" one, or None."""
    flows = (group.bronze, group.silver, *group.members)
    own = checkpoint(group.silver, ctx)
    if _resumable(spark, group, ctx, own):
        return "resume"
    fresh = not any(has_delta_log(spark, f.target.path(ctx.lake_root)) for f in flows) and all(
        inspect_checkpoint(spark, f.checkpoint(ctx)).state == "missing" for f in flows)
    if fresh or all(_level(f, ctx) for f in flows):
        return "new"
    return None


def run_topic_group(spark: SparkSession, group: TopicGroup, ctx: FlowContext) -> TopicRun:
    """Catch the group's flows up in one availableNow query if one can take them over; else leave them to their own."""
    flows = [group.bronze, group.silver, *group.members]
    try:
        for flow in flows:
            check_definition(spark, flow, ctx)
        admin_client(ctx.kafka_bootstrap)
    except (DefinitionChanged, KafkaUnreachable):
        return TopicRun(rest=flows)     # each flow's own run says which table changed, or that the broker is away
    waiting = [m for m in group.members
               if any(not has_delta_log(spark, t.path(ctx.lake_root)) for t in m.lookups)]
    group = TopicGroup(group.bronze, group.silver, tuple(m for m in group.members if m not in waiting))
    how = takeover(spark, group, ctx)
    if how is None:
        log.info("flows %s catch up as their own queries this time: one query takes them over once they stand level",
                 ", ".join(f.name for f in flows))
        return TopicRun(rest=flows)
    ensure_shared_tables(spark, ctx.lake_root)
    fused = (group.bronze, group.silver, *group.members)
    own = checkpoint(group.silver, ctx)
    for flow in fused:
        delete_tree(spark, flow.checkpoint(ctx))   # rebuilt from the tables' records when the flow runs alone
    starting, said = None, "where its checkpoint stands"
    if how == "new":
        delete_tree(spark, own)
        starting, said = after_bronze(spark, group.bronze, ctx)
    started = time.monotonic()
    before = {f.name: table_version(spark, f.target.path(ctx.lake_root)) for f in fused}
    query, writer = start_query(spark, group, ctx, trigger={"availableNow": True}, starting_offsets=starting)
    log.info("one query catches up %s, from %s", ", ".join(f.target.name for f in fused), said)
    watchdog = BrokerWatchdog(query, ctx.kafka_bootstrap)
    failed: BaseException | None = None
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - bronze keeps what it appended; the others run as their own queries
        failed = exc
    finally:
        watchdog.close()
        if ctx.quality is not None:
            ctx.quality.flush(spark)
    progress = query.recentProgress
    out = TopicRun(rest=waiting)
    if watchdog.lost:
        failed = _lost(group.bronze, ctx)
    elif failed is not None:
        try:
            _raise_if_kafka_lost(group.bronze, ctx, failed)
        except KafkaLost as lost:
            failed = lost
    if isinstance(failed, KafkaLost):
        out.error = failed
        out.rest = [group.silver, *group.members, *waiting]
        return out
    bronze = out.runs[group.bronze.name] = finished_run(spark, group.bronze, ctx, progress, None,
                                                        before[group.bronze.name], started)
    # Bronze's appends here are batch writes (rows_written counts a flow's streaming appends and MERGEs only). Spark
    # counts the topic's rows once per write that reads them (each member's, from silver's cached rows): bronze read
    # what it appended.
    appended = commits_after(spark, group.bronze.target.path(ctx.lake_root), before[group.bronze.name])
    bronze.rows_written = bronze.input_rows = sum(int(c.metrics.get("numOutputRows", 0)) for c in appended
                                                  if c.operation == "WRITE")
    if failed is not None:
        log.warning("the query of %s stopped (%s); %s catch up as their own queries", group.bronze.source.name,
                    first_line(failed), ", ".join(f.name for f in (group.silver, *group.members)))
        out.rest = [group.silver, *group.members, *waiting]
        return out
    writers = {group.silver.name: writer.silver, **{name: m.writer for name, m in writer.members.items()}}
    for flow in (group.silver, *group.members):
        run = finished_run(spark, flow, ctx, [], writers[flow.name], before[flow.name], started)
        stats = writers[flow.name].stats
        run.batches = int(getattr(stats, "batches", 0))
        run.input_rows = int(getattr(stats, "input_rows", 0))
        out.runs[flow.name] = run
    return out
