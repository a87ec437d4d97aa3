"""Replay: a table and everything downstream of it rebuilt from an earlier point of the log into shadow tables.

The starting point is the table's input as of a Delta version or a timestamp (bronze, for a silver
table), or, for a bronze table, Kafka itself from an offset or a timestamp per partition (bronze keeps
its rows before that point and the rest is read again from the topic). Every flow downstream is then
recomputed from the rebuilt tables. `compare` reports how the shadow differs from the live tables;
`swap` replaces each live table with its shadow in one Delta commit per table (the old version stays
readable by time travel), moves the flows' gold state in place, records in that commit where each
flow's sources stand, and resets the flows' checkpoints, so that the streams resume from there: the
ones downstream of a rewritten table included.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.batch.compare import TableDiff, diff_tables
from lakehouse.batch.lineage import flow_for, with_downstream
from lakehouse.batch.recompute import Inputs, Shadow, read_kafka_range, recompute
from lakehouse.schemas.tables import TableSpec
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.gold_batches import WATERMARK_TABLE, EventTimeWriter
from lakehouse.streaming.lake_files import children, has_delta_log
from lakehouse.streaming.runner import table_version

log = logging.getLogger(__name__)

# A record read again from Kafka is ingested anew; silver and the tables after it carry bronze's time.
REINGESTED = ("ingested_at",)


class BadReplay(ValueError):
    """A replay whose starting point cannot be used; the message says why."""


@dataclass(frozen=True)
class StartingPoint:
    """Where a replay starts: one of a Delta version or timestamp of the input, or Kafka offsets or a timestamp."""

    version: int | None = None
    timestamp: str | None = None
    offsets: dict[int, int] | None = None        # bronze only: partition -> first offset to read again
    kafka_timestamp: datetime | None = None      # bronze only: first record at or after this time, per partition
    latest: bool = False                         # the whole of every input as it is now (a refresh)

    def describe(self) -> str:
        if self.latest:
            return "the whole of its inputs as they are now"
        if self.version is not None:
            return f"input version {self.version}"
        if self.timestamp is not None:
            return f"input as of {self.timestamp}"
        if self.offsets is not None:
            return "Kafka offsets " + ", ".join(f"{p}:{o}" for p, o in sorted(self.offsets.items()))
        return f"Kafka time {self.kafka_timestamp.isoformat() if self.kafka_timestamp else 'earliest'}"


@dataclass
class Replayed:
    """One table rebuilt by a replay."""

    table: str
    flow: str
    shadow_path: str
    rows: int = 0
    diff: TableDiff | None = None
    positions: dict[str, dict] = field(default_factory=dict)   # source name -> where the flow resumes after a swap
    swapped_version: int | None = None


def _version_at(spark: SparkSession, path: str, timestamp: str) -> int:
    """The table's newest version committed at or before `timestamp`."""
    row = (DeltaTable.forPath(spark, path).history().where(F.col("timestamp") <= F.to_timestamp(F.lit(timestamp)))
           .agg(F.max("version")).first())
    if row[0] is None:
        raise BadReplay(f"{path} has no version at or before {timestamp}.")
    return int(row[0])


def _kafka_start(spark: SparkSession, topic: TopicSpec, ctx: FlowContext, bronze: DataFrame | None,
                 start: StartingPoint) -> dict[int, int]:
    """First offset per partition to read again: given, found by time, or (partitions not named) after bronze's last."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": ctx.kafka_bootstrap, "group.id": "lakehouse-replay", "log_level": 0,
                         "enable.auto.commit": False})
    try:
        parts = sorted(consumer.list_topics(topic.name, timeout=10).topics[topic.name].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)[1] for p in parts}
        if start.kafka_timestamp is not None:
            ms = int(start.kafka_timestamp.timestamp() * 1000)
            found = consumer.offsets_for_times([TopicPartition(topic.name, p, ms) for p in parts], timeout=10)
            # -1: no record at or after that time in the partition; nothing to read again there.
            return {tp.partition: (tp.offset if tp.offset >= 0 else ends[tp.partition]) for tp in found}
    finally:
        consumer.close()
    kept = {}
    if bronze is not None:
        kept = {r["partition"]: r["next"] for r in bronze.groupBy("partition").agg((F.max("offset") + 1).alias("next")).collect()}
    unknown = sorted(set(start.offsets or {}) - set(parts))
    if unknown:
        raise BadReplay(f"{topic.name} has no partition {', '.join(map(str, unknown))}; it has {', '.join(map(str, parts))}.")
    return {p: (start.offsets or {}).get(p, kept.get(p, 0)) for p in parts}


def _rebuild_bronze(spark: SparkSession, flow: Flow, ctx: FlowContext, shadow: Shadow, start: StartingPoint) -> DataFrame:
    """Bronze's rows before the starting offsets, and the topic read again from them, into the shadow."""
    topic = flow.source
    assert isinstance(topic, TopicSpec)
    live_path = flow.target.path(ctx.lake_root)
    live = spark.read.format("delta").load(live_path) if has_delta_log(spark, live_path) else None
    first = _kafka_start(spark, topic, ctx, live, start)
    again = flow.apply(read_kafka_range(spark, topic, ctx, {"start": {str(p): o for p, o in first.items()}}), ctx=ctx)
    rows = again
    if live is not None:
        cut = F.lit(False)
        for p, o in first.items():
            cut = cut | ((F.col("partition") == p) & (F.col("offset") < o))
        rows = live.where(cut).unionByName(again)
    writer = rows.write.format("delta").mode("overwrite")
    if flow.target.partition_by:
        writer = writer.partitionBy(*flow.target.partition_by)
    writer.save(shadow.path(flow.target))
    return shadow.read(flow.target)


def replay(spark: SparkSession, ctx: FlowContext, table: str, start: StartingPoint, *,
           flows=None, downstream: bool = True) -> tuple[Shadow, list[Replayed]]:
    """Rebuild `table` (and its downstream) into a shadow lake from `start`; returns the shadow and what it holds."""
    chosen = with_downstream([table], flows) if downstream else [flow_for(table, flows)]
    root = flow_for(table, flows)
    shadow = Shadow(spark, ctx, f"replay-{table}")
    rebuilt: dict[str, str] = {}
    out: list[Replayed] = []
    for flow in chosen:
        # Inputs this replay rebuilt are read from the shadow; the rest from the live lake.
        fshadow = shadow.reading({name: shadow.root for name in rebuilt})
        done = Replayed(flow.target.name, flow.name, shadow.path(flow.target))
        if flow is root and isinstance(flow.source, TopicSpec):
            if start.version is not None or start.timestamp is not None:
                raise BadReplay(f"{table} is read from Kafka: start it from offsets or a Kafka timestamp, "
                                "not a Delta version.")
            df = _rebuild_bronze(spark, flow, ctx, fshadow, start)
        else:
            positions = {}
            for source in flow.sources:
                if source.name in rebuilt:
                    continue
                path = ctx.input_path(source) if isinstance(source, TableSpec) else None
                if path is None:
                    raise BadReplay(f"{flow.name} reads Kafka; replay its bronze table instead.")
                if flow is root and start.version is not None:
                    if len(flow.sources) > 1:
                        raise BadReplay(f"{table} reads {len(flow.sources)} tables, whose versions differ: start it "
                                        "from a timestamp instead (--from-timestamp).")
                    version = start.version
                    if not 0 <= version <= (latest := table_version(spark, path)):
                        raise BadReplay(f"{source.name} has no version {version}; its versions go from 0 to {latest}.")
                elif flow is root and start.latest:
                    version = table_version(spark, path)
                    if version is None:
                        raise BadReplay(f"{source.name}, which {table} reads, does not exist yet: materialize it first "
                                        f"(lakehouse run {source.name}).")
                elif flow is root and start.timestamp is not None:
                    version = _version_at(spark, path, start.timestamp)
                elif flow is root:
                    raise BadReplay(f"{table} is not read from Kafka: start it from a Delta version or timestamp.")
                else:
                    version = table_version(spark, path)
                positions[source.name] = version
            # A refresh leaves out the events the flow had listed late: they stay in late_arrivals, to be folded in
            # by a backfill as for any table, so that the table and late_arrivals still account for every event.
            df = recompute(spark, flow, fshadow, Inputs(versions=positions, without_late=start.latest))
            done.positions = {name: {"version": v + 1} for name, v in positions.items()}
        if df is not None:
            rebuilt[flow.target.name] = shadow.root
            done.rows = df.count()
        out.append(done)
        log.info("replay %s: %d rows rebuilt in %s", done.table, done.rows, done.shadow_path)
    return shadow, out


def compare(spark: SparkSession, ctx: FlowContext, shadow: Shadow, replayed: list[Replayed], *, flows=None,
            limit: int = 10) -> list[Replayed]:
    """Each rebuilt table against the live one, row by row."""
    for done in replayed:
        spec = flow_for(done.table, flows).target
        live_path = spec.path(ctx.lake_root)
        live = spark.read.format("delta").load(live_path) if has_delta_log(spark, live_path) else None
        ignore = ("quarantined_at", "recorded_at") + REINGESTED
        done.diff, _ = diff_tables(live, shadow.read(spec), spec, limit=limit, ignore=ignore)
    return replayed


def swap(spark: SparkSession, ctx: FlowContext, shadow: Shadow, replayed: list[Replayed], *, flows=None) -> list[Replayed]:
    """Put each rebuilt table in place of the live one and reset its flow's checkpoint to resume after the replay."""
    from lakehouse.streaming.fingerprints import record_definition
    from lakehouse.streaming.positions import commit_metadata, reset_checkpoint

    versions: dict[str, int] = {}
    for done in replayed:
        flow = flow_for(done.table, flows)
        positions = dict(done.positions)
        for source in flow.sources:
            if source.name in versions:  # rebuilt and swapped just before: resume after the swap's commit
                positions[source.name] = {"version": versions[source.name] + 1}
        rows = shadow.read(flow.target)
        live_path = flow.target.path(ctx.lake_root)
        if rows is None:
            continue
        writer = (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                  .option("userMetadata", commit_metadata(flow.name, -1, positions)))
        if flow.target.partition_by:
            writer = writer.partitionBy(*flow.target.partition_by)
        writer.save(live_path)
        _move_state(spark, flow, shadow, ctx)
        reset_checkpoint(flow, ctx)
        record_definition(spark, flow, ctx)   # rebuilt as defined now: its stream runs again
        done.swapped_version = versions[flow.target.name] = table_version(spark, live_path)
        log.info("replay swapped %s in at version %d; flow %s resumes from %s", done.table, done.swapped_version,
                 flow.name, resume_text(positions) or "the offsets bronze holds")
    return replayed


def _move_state(spark: SparkSession, flow: Flow, shadow: Shadow, ctx: FlowContext) -> None:
    """A stateful gold flow's watermark and buffers, as the replay left them, in place of the live ones."""
    suffix = f"gold/_state/{flow.app_id}"
    for table in children(spark, f"{shadow.root}/{suffix}", folders_only=True):
        name = table.rsplit("/", 1)[-1]
        if name == WATERMARK_TABLE:
            continue   # below: the replay's newest watermark may be in its gold table's commit instead
        target = f"{ctx.lake_root.rstrip('/')}/{suffix}/{name}"
        (spark.read.format("delta").load(table)
         .write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(target))
    replayed = flow.batch_writer(shadow.ctx) if flow.output == "batch" else None
    if isinstance(replayed, EventTimeWriter) and (saved := replayed.saved_watermark(spark)) is not None:
        # The swap's overwrite of the live table records no watermark: the live flow reads this one.
        flow.batch_writer(ctx).adopt_watermark(spark, saved)


def resume_text(positions: dict[str, dict]) -> str:
    """Where a flow resumes, for a person: "silver_doors v1, silver_readings v2" (the next version it reads)."""
    return ", ".join(f"{name} v{pos['version']}" if "version" in pos else f"{name} {pos}"
                     for name, pos in sorted(positions.items()))
