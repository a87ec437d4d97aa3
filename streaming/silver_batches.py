"""Silver's per-micro-batch step: one parsed batch is split into silver, quarantine and late arrivals, once.

The streaming lane passes a `SilverWriter` to foreachBatch; the batch lane calls it directly. Within a
batch every record goes to exactly one place:

- quarantine: it failed parsing or its contract (`reason` is set);
- late_arrivals: it is valid but its event time is behind the dedup watermark, the newest event time
  silver has accepted before this batch minus the dedup delay: silver no longer remembers which ids it
  has seen that far back, so it cannot tell a duplicate from a new event. The batch lane folds these in;
- dropped as a duplicate: its event id is already in silver (within the watermark) or earlier in the batch;
- silver: the rest.

Spark's own `dropDuplicatesWithinWatermark` drops the late rows with only a counter, which is why this
step keeps its own watermark. It is derived from silver itself (max event time at start, read from
silver's newest commit when this writer made it, then from each batch it writes), and silver is
written last in each batch, so a batch replayed after a crash sees the watermark it saw the first
time. A batch that ends inside a source commit (a byte cap splits a commit's
files, which Delta reads in file order, not event time order) holds the watermark where it was, and its
silver commit says so (`held`, `held_max_micros`); the watermark moves on at the next commit boundary. So a cap
changes the batches, not which events are late. Each table is appended with Delta's (txnAppId, txnVersion), so a
replayed batch is never written twice; each commit also records where the batch's source stood, the
last one marked final, so that a lost checkpoint can be rebuilt (streaming/positions.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.tables import LATE_ARRIVALS, QUARANTINE, TableSpec
from lakehouse.streaming.context import FlowContext, QualityGate, instant_of, iso_micros, timestamp_literal
from lakehouse.streaming.delta_log import last_data_commit, table_version
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.positions import RecordsPositions, parse_metadata
from lakehouse.streaming.sinks import StateWarmer, append_once
from lakehouse.streaming.transforms.silver import to_late_arrivals, to_quarantine, to_silver

log = logging.getLogger(__name__)

_UNSET = object()


@dataclass
class SilverBatchStats:
    """What the writer did over the life of one query, for the asset's metadata."""

    batches: int = 0
    input_rows: int = 0
    silver: int = 0
    quarantined: int = 0
    late: int = 0
    duplicates: int = 0
    watermark_micros: int | None = None
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def watermark(self) -> str | None:
        return iso_micros(self.watermark_micros)


class SilverWriter(RecordsPositions):
    """A `(parsed_batch, batch_id)` function that writes one parsed micro-batch to silver, quarantine and late arrivals."""

    def __init__(
        self, *, flow: str, schema: EventSchema, silver: TableSpec, lake_root: str, dedup_delay_micros: int,
        app_id: str, ctx: FlowContext | None = None,
    ):
        self.ctx = ctx
        self.flow = flow
        self.schema = schema
        self.silver = silver
        self.silver_path = silver.path(lake_root)
        self.quarantine_path = QUARANTINE.path(lake_root)
        self.late_path = LATE_ARRIVALS.path(lake_root)
        self.delay = dedup_delay_micros
        self.app_id = app_id
        self.stats = SilverBatchStats()
        self._max_micros: object = _UNSET   # the newest event time the watermark counts (see below)
        self._seen_micros: int | None = None  # the newest event time silver holds
        self._replayed_seen: int | None = None  # after a replayed batch: silver's newest event time its append recorded
        # Called with the rows a batch appended to silver and the batch id, right after the append, while they
        # are still cached: a topic's query feeds its gold flows with them (streaming/topic_query.py).
        self.then: Callable[[DataFrame, int], None] | None = None

    def _start(self, spark: SparkSession, txn: str, batch_id: int) -> None:
        """Where the watermark stood when this query started: silver's newest event time, or the one held.

        Each silver append records silver's newest event time after it (`seen_max_micros`); when that
        append is still the newest commit that wrote silver's rows (compactions on top change none), the
        number is taken from there instead of from a scan of the whole table, whose cost grows with it.

        A batch that ended inside a source commit held the watermark (`BatchRecord.ends_inside_a_commit`)
        and its silver commit says at what (`held`, and `held_max_micros` unless it had none yet): a query
        restarted there holds it too.

        When that append is this very batch's (same txn app id and batch id), its process stopped before
        Spark recorded the batch, which now runs again: Delta skips each of its writes, so it starts from
        the watermark it started from the first time (`started`), and routes each row as it did then.
        """
        self._max_micros = self._seen_micros = None
        if not has_delta_log(spark, self.silver_path):
            return
        newest = last_data_commit(spark, self.silver_path)
        last = None if newest is None else parse_metadata(newest.user_metadata)
        mine = last is not None and last.get("flow") == self.flow
        started = last.get("started") if mine else None
        if isinstance(started, dict) and started.get("txn") == txn and last.get("batch") == batch_id:
            self._max_micros, self._seen_micros = started.get("max_micros"), started.get("seen_micros")
            self._replayed_seen = last.get("seen_max_micros")   # silver holds what the first run appended
            return
        if mine and isinstance(last.get("seen_max_micros"), int):
            # This writer's own append is the newest write, so nothing has changed silver's rows since it counted.
            self._seen_micros = last["seen_max_micros"]
        else:
            # Anything else wrote last (a backfill, a replay's swap, a user's DELETE): read silver.
            self._seen_micros = (spark.read.format("delta").load(self.silver_path)
                                 .agg(F.max(F.unix_micros(self.schema.event_time))).first()[0])
        self._max_micros = last.get("held_max_micros") if mine and last.get("held") else self._seen_micros

    def __call__(self, parsed: DataFrame, batch_id: int) -> None:
        spark = parsed.sparkSession
        batch = self.batch_record(spark, batch_id)
        txn = batch.txn_app_id
        if self._max_micros is _UNSET:
            self._start(spark, txn, batch_id)
        max_micros = self._max_micros
        hold = batch.ends_inside_a_commit
        watermark = None if max_micros is None else max_micros - self.delay
        event_time = F.col(self.schema.event_time)
        is_late = F.lit(False) if watermark is None else F.unix_micros(event_time) < watermark
        gate = self.ctx.quality if self.ctx is not None else None
        if gate is not None:
            # Valid rows that break a drop-severity expectation become quarantine rows named after it.
            parsed = gate.screen(self.silver, parsed)

        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        fresh = None
        # Quarantine gets rows in most batches, silver in nearly all: their states are computed meanwhile.
        warmer = StateWarmer(spark, [self.silver_path, self.quarantine_path])
        try:
            valid = to_silver(parsed, schema=self.schema)
            fresh = self._first_copies(valid.where(~is_late))
            if self._seen_micros is not None:
                fresh = self._not_in_silver(spark, fresh, watermark)
            fresh = fresh.persist(StorageLevel.MEMORY_AND_DISK)
            by_kind, offsets, figures = self._summary(parsed, fresh, is_late, gate)
            n_late = by_kind.pop("_late", 0)
            n_valid = by_kind.pop("_valid", 0)
            n_quarantined = sum(by_kind.values())
            n_new, new_max = figures["_rows"], figures["_new_max"]
            # Silver's newest event time once this batch is in: recorded with its append, kept after it.
            seen = self._seen_micros if new_max is None else (
                new_max if self._seen_micros is None else max(self._seen_micros, new_max))
            if self._replayed_seen is not None:   # a replay: silver holds what its first run appended
                seen = self._replayed_seen if seen is None else max(seen, self._replayed_seen)
            warmer.join()
            if gate is not None:
                # Before any write: a fail-severity breach must leave nothing of this batch behind.
                gate.validate(self.silver, fresh, self.ctx.batch_scope(self.flow, batch_id, offsets=offsets),
                              dropped=by_kind, screened=parsed, figures=figures)
            # Each write records the batch's source positions; the last one is marked final (positions.py).
            last = "silver" if n_new else "late" if n_late else "quarantine"
            if n_quarantined:
                append_once(to_quarantine(parsed, schema=self.schema), self.quarantine_path,
                            app_id=f"{txn}-quarantine", batch_id=batch_id,
                            user_metadata=batch.metadata(final=last == "quarantine"))
            if n_late:
                late = to_late_arrivals(valid.where(is_late), flow=self.flow, table=self.silver.name,
                                        event_time=self.schema.event_time, watermark_micros=watermark)
                append_once(late, self.late_path, app_id=f"{txn}-late", batch_id=batch_id,
                            user_metadata=batch.metadata(final=last == "late"))
            if n_new:
                # Written last: see the module docstring for why the order matters.
                held = {"held": True, "held_max_micros": max_micros} if hold else {}
                started = {"txn": txn, "max_micros": max_micros, "seen_micros": self._seen_micros}
                append_once(fresh, self.silver_path, app_id=txn, batch_id=batch_id,
                            partition_by=self.silver.partition_by,
                            user_metadata=batch.metadata(final=True, seen_max_micros=seen, started=started, **held))
                if self.then is not None:
                    self.then(fresh, batch_id)
        finally:
            warmer.join()
            if fresh is not None:
                fresh.unpersist()
            parsed.unpersist()

        self._seen_micros, self._replayed_seen = seen, None
        if not hold:
            self._max_micros = self._seen_micros
        rows = n_quarantined + n_late + n_valid
        stats = self.stats
        stats.batches += 1
        stats.input_rows += rows
        stats.quarantined += n_quarantined
        stats.late += n_late
        stats.silver += n_new
        stats.duplicates += n_valid - n_new
        stats.watermark_micros = watermark
        for reason, n in by_kind.items():
            stats.reasons[reason] = stats.reasons.get(reason, 0) + n
        if n_late:
            log.warning("flow %s: %d events behind the watermark %s went to late_arrivals",
                        self.flow, n_late, stats.watermark)

    def _summary(self, parsed: DataFrame, fresh: DataFrame, is_late: Column, gate: QualityGate | None) -> tuple[
            dict[str, int], tuple[tuple[str, int, int, int], ...], dict[str, object]]:
        """What the batch must know before it writes, in one Spark action (each action is a few small jobs).

        Returns the batch's rows by kind (a quarantine reason, `_late` or `_valid`), the Kafka offsets it
        covers per (topic, partition), and over the fresh rows their count (`_rows`), newest event time
        (`_new_max`) and the quality gate's figures.
        """
        kind = F.coalesce("reason", F.when(is_late, "_late").otherwise("_valid"))
        placed = parsed.groupBy(kind.alias("_kind"), "topic", "partition").agg(
            F.count(F.lit(1)).alias("_n"), F.min("offset").alias("_first"), F.max("offset").alias("_last"))
        checks = (gate.totals(self.silver) if gate is not None else []) or [F.count(F.lit(1)).alias("_rows")]
        new = fresh.agg(F.max(F.unix_micros(self.schema.event_time)).alias("_new_max"), *checks)
        rows = placed.unionByName(new.withColumn("_kind", F.lit(None).cast("string")), allowMissingColumns=True).collect()
        by_kind: dict[str, int] = {}
        spans: dict[tuple[str, int], tuple[int, int]] = {}
        figures: dict[str, object] = {}
        for row in rows:
            if row["_kind"] is None:
                figures = {k: v for k, v in row.asDict().items() if k not in placed.columns}
                continue
            by_kind[row["_kind"]] = by_kind.get(row["_kind"], 0) + row["_n"]
            key = (row["topic"], row["partition"])
            first, last = spans.get(key, (row["_first"], row["_last"]))
            spans[key] = (min(first, row["_first"]), max(last, row["_last"]))
        return by_kind, tuple(sorted((t, p, a, b) for (t, p), (a, b) in spans.items())), figures

    def _first_copies(self, valid: DataFrame) -> DataFrame:
        """One row per event id: the copy at the lowest Kafka coordinates, so a replay picks the same one."""
        columns = valid.columns
        first = valid.groupBy("event_id").agg(
            F.min_by(F.struct(*columns), F.struct("topic", "partition", "offset")).alias("_row")
        )
        return first.select("_row.*")

    def _not_in_silver(self, spark: SparkSession, fresh: DataFrame, watermark: int | None) -> DataFrame:
        """Rows whose event id silver already holds within the watermark are dropped; only that part of silver is read.

        A fresh row is not late, so its event time is at or after the watermark, and so is that of any
        copy of it (a re-sent event keeps its time). Silver's files are skipped by their partition
        (`event_date`) and by their event-time statistics: a stream's batch reads the last dedup delay's
        files, not the whole day's, however long the day has run.
        """
        # Pinned to the version it is now: Spark refreshes every cached plan that reads a table's latest
        # version after an append to it, and `fresh` is cached through the silver append (0.3 s a batch).
        version = table_version(spark, self.silver_path)
        seen = spark.read.format("delta").option("versionAsOf", version).load(self.silver_path)
        if watermark is not None:
            seen = seen.where((F.col("event_date") >= F.lit(instant_of(watermark).date()))
                              & (F.col(self.schema.event_time) >= F.expr(timestamp_literal(watermark))))
        return fresh.join(seen.select("event_id"), "event_id", "left_anti")
