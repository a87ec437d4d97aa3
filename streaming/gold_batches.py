"""Stateful gold flows, one micro-batch at a time: the flow's own event-time watermark, late rows kept, state merged.

Spark's stateful operators (windowed aggregations, stream-stream joins, session windows) drop an
event behind the watermark with only a counter (`numRowsDroppedByWatermark`): the event vanishes
from that table without a trace. So a stateful gold flow here runs as one `(batch_df, batch_id)`
function, `EventTimeWriter`, that streaming passes to foreachBatch and the batch lane calls directly:

1. the watermark is the newest event time the flow accepted before this batch minus the flow's
   delay (`LAKEHOUSE_GOLD_WATERMARK`, or its own entry in `LAKEHOUSE_GOLD_WATERMARKS`), as Spark's;
2. rows behind it go to `late_arrivals` with the flow, the watermark and the Kafka coordinates;
3. the rest go to the flow's step, which merges them into its table (partial aggregates added to
   windows, sessions re-merged, join state matched and evicted) under the same watermark;
4. the new newest event time is saved with the batch's last write: in the commit of the step's MERGE
   when that is the step's only write (windows, sliding counts: the watermark is then committed with
   the rows it let through, in one commit), else in a one-row Delta table beside the flow's state,
   written last. A batch that ends inside a source commit (a byte cap splits its files, read in file
   order) saves it apart and keeps the watermark where it was until a batch ends on a commit
   boundary: a cap changes the batches, not which events are late.

Each write carries Delta's (txnAppId, txnVersion): a batch replayed after a crash writes nothing
twice and, because the watermark is saved last with the one the batch started from, sees the
watermark it saw the first time, even when it was replayed after saving it. Of the target's commit
and the watermark table's, the newer save wins (`EventTimeWriter.saved_watermark`). So every
silver event is either counted in each gold table it feeds or listed in `late_arrivals` for that table.
Each commit also records where the batch's sources stood (the watermark's commit marked final), so a
lost checkpoint can be rebuilt (streaming/positions.py); the flow's state folder is keyed by the flow
and its version only, so it outlives a checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas.tables import LATE_ARRIVALS, TableSpec
from lakehouse.streaming.context import BatchScope, FlowContext, QualityGate, iso_micros, timestamp_literal
from lakehouse.streaming.delta_log import Commit, last_commit, last_data_commit, newest_commits, txn_version
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.positions import BatchRecord, RecordsPositions, UserMetadata
from lakehouse.streaming.sinks import append_once, dml_once, ensure_table, merge_metrics
from lakehouse.streaming.transforms.silver import to_late_arrivals

if TYPE_CHECKING:
    from lakehouse.schemas.gold import Windowed

log = logging.getLogger(__name__)

_UNSET = object()
# The folder of a flow's state that holds its watermark table.
WATERMARK_TABLE = "watermark"
# The key of a watermark commit's userMetadata that holds the row it saved.
_SAVED = "saved"
# The watermark table's columns (besides saved_at), in the order _save_max writes them.
_WATERMARK_COLUMNS = (("max_event_micros", "BIGINT"), ("batch_id", "BIGINT"), ("seen_max_micros", "BIGINT"),
                      ("txn_app_id", "STRING"), ("before_max_micros", "BIGINT"), ("before_seen_micros", "BIGINT"))
# watermark_after while a new flow holds its first watermark (a split commit): no window or join closes.
_NOTHING_CLOSES = -(1 << 62)


class StaleGoldTable(RuntimeError):
    """A gold table holds rows from an earlier version of its flow, which a new version would count again."""


@dataclass
class GoldBatchStats:
    """What a stateful gold writer did over the life of one query, for the asset's metadata."""

    batches: int = 0
    input_rows: int = 0
    on_time: int = 0
    late: int = 0
    rows_written: int = 0                 # rows the step inserted or updated in its table
    watermark_micros: int | None = None   # after the last batch
    min_event_micros: int | None = None   # event-time range of the on-time rows this run
    max_event_micros: int | None = None
    state_rows: int | None = None         # rows the step keeps in state (join buffers), if any

    @property
    def watermark(self) -> str | None:
        return iso_micros(self.watermark_micros)


@dataclass(frozen=True)
class Step:
    """What a step gets besides its on-time rows: where to write, which batch, and the watermarks."""

    spark: SparkSession
    batch_id: int
    app_id: str
    lake_root: str
    target: TableSpec
    state_root: str
    watermark: int | None         # before this batch: rows behind it were routed to late arrivals
    watermark_after: int          # after this batch: what a join or a session may now close
    user_metadata: str | None = None   # recorded with each commit: the batch's source positions (positions.py)
    # For a MERGE that is the batch's last write: the positions marked final and the watermark after the batch.
    closing_metadata: str | None = None
    quality: QualityGate | None = None  # checks the rows each merge writes against the table's suite
    scope: BatchScope | None = None     # the batch those rows came from, for the quality results
    event_range: tuple[int, int] | None = None  # the earliest and latest event time of the step's rows (micros)

    @property
    def target_path(self) -> str:
        return self.target.path(self.lake_root)

    def merge(self, source: DataFrame, *, keys: tuple[str, ...], matched: Mapping[str, str] | None = None,
              delete_flag: str | None = None, key_range: tuple[str, int, int] | None = None,
              closes_batch: bool = False) -> int:
        """MERGE `source` into the target on `keys`, once per (flow, batch); returns rows inserted + updated + deleted.

        `matched` maps target columns to expressions over `t` (target) and `s` (source) for matched rows
        (default: take the source's values). A source row whose boolean `delete_flag` column is true
        deletes its match and is never inserted. `key_range` (a timestamp key, its least and greatest
        value in `source`, in micros) lets Delta skip the target's files outside it: key equality implies
        it, so the same rows match, and the MERGE reads the part of the table the batch reaches.
        `closes_batch`: this MERGE is the step's only write, so its commit records the batch as final and
        the watermark after it (`closing_metadata`), and the writer needs no commit of its own for them.
        """
        metadata = self.closing_metadata if closes_batch and self.closing_metadata else self.user_metadata
        on = on_keys(keys)
        if key_range is not None:
            column, lo, hi = key_range
            on += f" AND t.`{column}` >= {timestamp_literal(lo)} AND t.`{column}` <= {timestamp_literal(hi)}"
        if self.quality is None or self.scope is None:
            return self._merge(source, on=on, matched=matched, delete_flag=delete_flag, metadata=metadata)
        # Persisted so that validating and merging compute the step's output once.
        source = source.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            columns = [c for c in source.columns if c != delete_flag]
            kept = source.where(~F.col(delete_flag)) if delete_flag else source
            self.quality.validate(self.target, kept.select(*columns), self.scope)
            return self._merge(source, on=on, matched=matched, delete_flag=delete_flag, metadata=metadata)
        finally:
            source.unpersist()

    def _merge(self, source: DataFrame, *, on: str, matched: Mapping[str, str] | None,
               delete_flag: str | None, metadata: str | None) -> int:
        path = self.target_path
        columns = [c for c in source.columns if c != delete_flag]
        if ensure_table(source.select(*columns), self.target, path):
            # A table created for this batch holds no row and no txn id: the MERGE could only insert. An append
            # with the same txn id writes the same rows without the MERGE's scan and plan (docs/performance.md);
            # a replay finds the table and MERGEs, which Delta then skips by that txn id.
            rows = source.where(~F.col(delete_flag)) if delete_flag else source
            append_once(rows.select(*columns), path, app_id=self.app_id, batch_id=self.batch_id,
                        user_metadata=metadata)
            first = last_commit(self.spark, path)
            return int(first.metrics.get("numOutputRows", 0)) if first is not None and first.operation == "WRITE" else 0
        merge = DeltaTable.forPath(self.spark, path).alias("t").merge(source.alias("s"), on)
        if delete_flag:
            merge = merge.whenMatchedDelete(f"s.`{delete_flag}`")
        values = {c: f"s.`{c}`" for c in columns}
        merge = merge.whenMatchedUpdate(set=dict(matched or values))
        merge = merge.whenNotMatchedInsert(
            condition=f"NOT s.`{delete_flag}`" if delete_flag else None, values=values)
        with dml_once(self.spark, self.app_id, self.batch_id), UserMetadata(self.spark, metadata):
            metrics = merge_metrics(merge.execute())
        if metrics is None:
            return 0  # the batch had been merged before a crash: Delta skipped it
        return sum(int(metrics[k]) for k in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows"))

    def update(self, condition: str, set: Mapping[str, str]) -> None:
        """UPDATE the target where `condition` holds, once per (flow, batch)."""
        if has_delta_log(self.spark, self.target_path):
            with dml_once(self.spark, f"{self.app_id}-update", self.batch_id), \
                    UserMetadata(self.spark, self.user_metadata):
                DeltaTable.forPath(self.spark, self.target_path).update(condition, dict(set))

    def save_state(self, rows: DataFrame, name: str) -> None:
        """Replace the flow's state table `name` (a join's buffered rows), once per (flow, batch)."""
        writer = (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                  .option("txnAppId", f"{self.app_id}-{name}").option("txnVersion", str(self.batch_id)))
        if self.user_metadata is not None:
            writer = writer.option("userMetadata", self.user_metadata)
        writer.save(f"{self.state_root}/{name}")

    def read_state(self, name: str) -> DataFrame | None:
        path = f"{self.state_root}/{name}"
        if not has_delta_log(self.spark, path):
            return None
        return self.spark.read.format("delta").load(path)

    def read_target(self) -> DataFrame | None:
        if not has_delta_log(self.spark, self.target_path):
            return None
        return self.spark.read.format("delta").load(self.target_path)


def quality_of(ctx: FlowContext | None, flow: str, batch_id: int, batch: DataFrame,
               offsets: tuple[tuple[str, int, int, int], ...] | None = None) -> dict:
    """A Step's quality gate and batch scope (the Kafka offsets of the silver rows the batch read, if not given)."""
    if ctx is None or ctx.quality is None:
        return {}
    return {"quality": ctx.quality, "scope": ctx.batch_scope(flow, batch_id, batch, offsets=offsets)}


def _summary(batch: DataFrame, is_late: Column,
             micros: Column) -> tuple[dict, tuple[tuple[str, int, int, int], ...] | None]:
    """The batch's row counts and event-time bounds, and the Kafka offsets it covers, in one Spark action.

    The offsets (as `offsets_covered` gives them) are None when the rows carry no Kafka coordinates.
    """
    figures = [
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(is_late, 1)).alias("late"),
        F.max(micros).alias("max"),
        F.min(F.when(~is_late, micros)).alias("min_on_time"),
        F.max(F.when(~is_late, micros)).alias("max_on_time"),
    ]
    if not {"topic", "partition", "offset"} <= set(batch.columns):
        return batch.agg(*figures).first().asDict(), None
    found = batch.groupBy("topic", "partition").agg(*figures, F.min("offset").alias("a"), F.max("offset").alias("b"))
    found = found.collect()

    def over_partitions(name: str, pick: Callable) -> int | None:
        return pick((r[name] for r in found if r[name] is not None), default=None)

    row = {"rows": sum(r["rows"] for r in found), "late": sum(r["late"] for r in found),
           "max": over_partitions("max", max), "min_on_time": over_partitions("min_on_time", min),
           "max_on_time": over_partitions("max_on_time", max)}
    return row, tuple(sorted((r["topic"], r["partition"], r["a"], r["b"]) for r in found))


StepFunction = Callable[[DataFrame, Step], int]


def on_keys(keys: tuple[str, ...]) -> str:
    return " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)


def merge_partials(kind: "Windowed", keys: tuple[str, ...]) -> StepFunction:
    """A window flow's step: the batch's partial aggregates merged into its table as the declaration says
    (`merge_expressions`), in one MERGE that also commits the batch's watermark."""
    from lakehouse.streaming.transforms.windows import merge_expressions

    matched = merge_expressions(kind)

    def step(partials: DataFrame, at: Step) -> int:
        return at.merge(partials, keys=keys, matched=matched, closes_batch=True)

    return step


def _saved_in(commit: Commit) -> dict | None:
    """The watermark row a commit records in its userMetadata (`saved`), if it records one."""
    if not commit.user_metadata:
        return None
    try:
        saved = json.loads(commit.user_metadata).get(_SAVED)
    except (ValueError, AttributeError):
        return None
    return saved if isinstance(saved, dict) and {"max_event_micros", "txn_app_id"} <= saved.keys() else None


def saved_in_log(spark: SparkSession, path: str) -> tuple[int, dict] | None:
    """The newest watermark a stateful gold flow committed with its rows to the table at `path`: (commit ms, row).

    The newest commit that is not maintenance decides: it records one or it does not (an overwrite, a
    session's UPDATE, older code). OPTIMIZE and VACUUM commits in front of it are passed over; the
    copies they carry (`carried_watermark`) are read only when the log no longer holds that commit.
    """
    carried = None
    for commit in newest_commits(spark, path, limit=100_000):
        saved = _saved_in(commit)
        if not commit.maintenance:
            return None if saved is None else (commit.timestamp, saved)
        if carried is None and saved is not None:
            carried = (commit.timestamp, saved)
    return carried


def carried_watermark(spark: SparkSession, path: str) -> str | None:
    """The userMetadata with which a maintenance commit of a gold table carries the table's newest watermark forward.

    Log cleanup deletes commit files older than the log's retention; a table compacted for weeks with no
    batch of its flow would otherwise lose the commit that records its watermark.
    """
    found = saved_in_log(spark, path)
    return None if found is None else json.dumps({_SAVED: found[1]}, separators=(",", ":"))


class EventTimeWriter(RecordsPositions):
    """A `(batch_df, batch_id)` function for a stateful gold flow: own watermark, late rows kept, then the step."""

    def __init__(
        self, *, flow: str, target: TableSpec, lake_root: str, event_time: str, delay_micros: int, app_id: str,
        aggregate: Callable[[DataFrame], DataFrame], step: StepFunction,
        state_rows: Callable[[SparkSession, str], int] | None = None, ctx: FlowContext | None = None,
    ):
        self.ctx = ctx
        self.flow = flow
        self.target = target
        self.lake_root = lake_root
        self.event_time = event_time
        self.delay = delay_micros
        self.app_id = app_id
        self.aggregate = aggregate
        self.step = step
        self.count_state = state_rows
        # Keyed by the flow's base app id, not the query's: the watermark and buffers outlive a lost checkpoint.
        self.state_root = f"{lake_root.rstrip('/')}/gold/_state/{app_id}"
        self.watermark_path = f"{self.state_root}/{WATERMARK_TABLE}"
        self.late_path = LATE_ARRIVALS.path(lake_root)
        self.stats = GoldBatchStats()
        self._max: object = _UNSET    # the newest event time the watermark counts
        self._seen: int | None = None  # the newest event time accepted (ahead of _max while a commit is split)

    def _saved_max(self, spark: SparkSession, txn: str | None = None, batch_id: int | None = None) -> int | None:
        """The newest event time the watermark counts, as the last committed batch saved it (and sets `_seen`).

        If that batch is (txn, batch_id) itself, Spark had not recorded it when its process stopped and
        now replays it: Delta skips each of its writes, so it gets the watermark it started from, and
        routes its rows as it did the first time (none both merged and listed late). With no watermark
        saved yet, rows in the target are refused as an earlier version's, unless Delta holds them as
        this very batch's merge (its process stopped before the first watermark was saved).
        """
        saved = self.saved_watermark(spark)
        if saved is not None:
            if txn is not None and saved.get("txn_app_id") == txn and saved.get("batch_id") == batch_id:
                self._seen = saved["before_seen_micros"]
                return saved["before_max_micros"]
            # A batch that ended inside a source commit saved the newest event time it accepted apart.
            self._seen = saved.get("seen_max_micros") or saved["max_event_micros"]
            return saved["max_event_micros"]
        if has_delta_log(spark, self.watermark_path):
            return None
        target = self.target.path(self.lake_root)
        if txn is not None and batch_id is not None and txn_version(spark, target, txn) == batch_id:
            # This query's first batch merged its rows and its process stopped before the watermark was
            # saved: the replay is skipped by Delta and starts, as the first run did, with no watermark.
            self._seen = None
            return None
        if has_delta_log(spark, target) and spark.read.format("delta").load(target).limit(1).count():
            raise StaleGoldTable(
                f"{self.target.name} holds rows that an earlier version of flow {self.flow} wrote, and this version "
                f"would count them again; delete {target} (it is rebuilt from silver) and run again."
            )
        return None

    def settle(self, spark: SparkSession) -> None:
        """Fill in the watermark and state size for a run that had nothing new to read."""
        if self._max is _UNSET and self.saved_watermark(spark) is not None:
            self._max = self._saved_max(spark)
        if self.stats.watermark_micros is None and isinstance(self._max, int):
            self.stats.watermark_micros = self._max - self.delay
        if self.count_state is not None and self.stats.state_rows is None:
            self.stats.state_rows = self.count_state(spark, self.state_root)

    def _in_target(self, spark: SparkSession) -> tuple[int, dict] | None:
        """The newest watermark this version of the flow committed with its rows to its target (`saved_in_log`)."""
        found = saved_in_log(spark, self.target.path(self.lake_root))
        # Another version of the flow counted those rows: its watermark is not this one's (see StaleGoldTable).
        return found if found is not None and found[1].get("app") == self.app_id else None

    def _in_watermark_table(self, spark: SparkSession) -> tuple[int, dict] | None:
        """The watermark table's row: from its commit's userMetadata (`saved`) when that is the newest commit
        that wrote it, else by reading the table (a Spark job, 0.5-0.7 s on 2 cores; a table saved by older code)."""
        if not has_delta_log(spark, self.watermark_path):
            return None
        commit = last_data_commit(spark, self.watermark_path)
        at = commit.timestamp if commit is not None else 0
        if commit is not None and commit.operation == "WRITE" and (saved := _saved_in(commit)) is not None:
            return at, saved
        row = spark.read.format("delta").load(self.watermark_path).first()
        return None if row is None else (at, row.asDict())

    def saved_watermark(self, spark: SparkSession) -> dict | None:
        """The newest saved watermark row, of the target's commit and the watermark table's.

        Saved by one query, the later batch wins (a tie: the target's, the same row); else the later commit.
        """
        found = [f for f in (self._in_target(spark), self._in_watermark_table(spark)) if f is not None]
        if len(found) == 2 and found[0][1].get("txn_app_id") == found[1][1].get("txn_app_id"):
            return max((f[1] for f in found), key=lambda saved: saved.get("batch_id") or 0)
        return max(found, key=lambda f: f[0])[1] if found else None

    def adopt_watermark(self, spark: SparkSession, saved: dict) -> None:
        """Make `saved`, the watermark another lake's run of this flow left (a replay's shadow), this flow's own."""
        self._save_max(spark, saved, None, None, json.dumps({_SAVED: saved}, separators=(",", ":")))

    def _closed_in_target(self, spark: SparkSession, txn: str, batch_id: int) -> bool:
        """Whether the target's newest write is this batch's MERGE with its watermark (`Step.closing_metadata`)."""
        commit = last_data_commit(spark, self.target.path(self.lake_root))
        saved = None if commit is None else _saved_in(commit)
        return saved is not None and saved.get("txn_app_id") == txn and saved.get("batch_id") == batch_id

    def _saved(self, max_micros: int | None, seen_micros: int, batch_id: int, txn: str,
               before: tuple[int | None, int | None]) -> dict:
        """The watermark after this batch, and the one it started from (`before`: max, seen) for a replay."""
        values = (max_micros, batch_id, seen_micros, txn, *before)
        return {**dict(zip((name for name, _ in _WATERMARK_COLUMNS), values)), "app": self.app_id}

    @staticmethod
    def _saved_metadata(record: BatchRecord, saved: dict) -> str:
        """The userMetadata of the batch's final commit: its positions, marked final, and the watermark row."""
        return record.metadata(final=True, **{_SAVED: saved}) or json.dumps({_SAVED: saved}, separators=(",", ":"))

    def _save_max(self, spark: SparkSession, saved: dict, batch_id: int | None, txn: str | None,
                  user_metadata: str) -> None:
        """Save the watermark row in the flow's watermark table, once per batch (`txn`, `batch_id`) if given.

        The row's values also go into the commit's userMetadata (`saved`, beside the batch's positions), so
        the next run reads them from the Delta log instead of by a Spark job (`_in_watermark_table`).
        """
        row = spark.createDataFrame(
            [tuple(saved[name] for name, _ in _WATERMARK_COLUMNS)],
            ", ".join(f"{name} {kind}" for name, kind in _WATERMARK_COLUMNS),
        ).withColumn("saved_at", F.current_timestamp())
        # overwriteSchema: a watermark saved by an earlier version of this code lacks some columns.
        writer = row.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        if txn is not None:
            writer = writer.option("txnAppId", f"{txn}-watermark").option("txnVersion", str(batch_id))
        writer.option("userMetadata", user_metadata).save(self.watermark_path)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        record = self.batch_record(spark, batch_id)
        txn = record.txn_app_id
        if self._max is _UNSET:
            self._max = self._saved_max(spark, txn, batch_id)
        max_before: int | None = self._max  # type: ignore[assignment]
        watermark = None if max_before is None else max_before - self.delay
        hold = record.ends_inside_a_commit   # see BatchRecord.ends_inside_a_commit
        micros = F.unix_micros(F.col(self.event_time))
        is_late = F.lit(False) if watermark is None else micros < F.lit(watermark)

        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            row, offsets = _summary(batch, is_late, micros)
            rows, n_late, batch_max = row["rows"], row["late"], row["max"]
            if n_late:
                late = to_late_arrivals(batch.where(is_late), flow=self.flow, table=self.target.name,
                                        event_time=self.event_time, watermark_micros=watermark)
                append_once(late, self.late_path, app_id=f"{txn}-late", batch_id=batch_id,
                            user_metadata=record.metadata())
                log.warning("flow %s: %d events behind the watermark %s went to late_arrivals",
                            self.flow, n_late, iso_micros(watermark))
            seen = self._seen if self._seen is not None else max_before
            new_seen = batch_max if seen is None else max(seen, batch_max or seen)
            new_max = max_before if hold else new_seen
            saved = None if new_seen is None else self._saved(new_max, new_seen, batch_id, txn, (max_before, seen))
            written = 0
            if rows - n_late:
                at = Step(spark=spark, batch_id=batch_id, app_id=txn, lake_root=self.lake_root,
                          target=self.target, state_root=self.state_root, watermark=watermark,
                          watermark_after=_NOTHING_CLOSES if new_max is None else new_max - self.delay,
                          user_metadata=record.metadata(), event_range=(row["min_on_time"], row["max_on_time"]),
                          closing_metadata=None if saved is None else self._saved_metadata(record, saved),
                          **quality_of(self.ctx, self.flow, batch_id, batch, offsets))
                written = self.step(self.aggregate(batch.where(~is_late)), at)
        finally:
            batch.unpersist()
        if saved is not None:
            # Saved last: a batch replayed after a crash finds the watermark it saw the first time. Its
            # commit is the batch's final one: a lost checkpoint is rebuilt with this batch committed.
            # A step whose MERGE was its only write committed both already (Step.closing_metadata).
            if not (rows - n_late and self._closed_in_target(spark, txn, batch_id)):
                self._save_max(spark, saved, batch_id, txn, self._saved_metadata(record, saved))
            self._max, self._seen = new_max, new_seen

        stats = self.stats
        stats.batches += 1
        stats.input_rows += rows
        stats.late += n_late
        stats.on_time += rows - n_late
        stats.rows_written += written
        if new_max is not None:
            stats.watermark_micros = new_max - self.delay
        if row["min_on_time"] is not None:
            stats.min_event_micros = min(filter(None, (stats.min_event_micros, row["min_on_time"])))
            stats.max_event_micros = new_seen
        if self.count_state is not None:
            stats.state_rows = self.count_state(spark, self.state_root)


class RecomputeWriter(RecordsPositions):
    """A `(batch_df, batch_id)` function for a gold table of non-additive figures (percentiles) per time bucket.

    Percentiles cannot be merged from partials, so each batch recomputes the buckets it touches from
    the silver tables, which already hold the batch, and upserts them once per batch id. No event is
    late for such a table: a bucket is recomputed whenever an event for it arrives.
    """

    def __init__(self, *, target: TableSpec, lake_root: str, app_id: str, silver_paths: list[str],
                 narrow: Callable[..., DataFrame], compute: Callable[[DataFrame], DataFrame], keys: tuple[str, ...],
                 bucket: Callable[[DataFrame], DataFrame], bucket_time: tuple[str, str, int],
                 ctx: FlowContext | None = None):
        self.target, self.lake_root, self.app_id, self.ctx = target, lake_root, app_id, ctx
        self.silver_paths, self.narrow, self.compute, self.keys, self.bucket = silver_paths, narrow, compute, keys, bucket
        # (key, event time, width in micros): the key holds each event's time truncated to buckets of that width.
        self.bucket_time = bucket_time
        self.stats = GoldBatchStats()

    def settle(self, spark: SparkSession) -> None:
        """Nothing to fill in: the table has no watermark or state."""

    def within_buckets(self, starts: list[int]) -> Column:
        """Silver rows in the time range of the buckets that start at `starts` (micros).

        The day's other files are skipped by their statistics, so a batch does not read more of silver as
        the day goes on; the semi-join on the touched keys then keeps exactly the touched buckets' rows.
        """
        _, event_time, width = self.bucket_time
        return ((F.col(event_time) >= F.expr(timestamp_literal(min(starts))))
                & (F.col(event_time) < F.expr(timestamp_literal(max(starts) + width))))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        key = self.bucket_time[0]
        touched = self.bucket(batch).select(*self.keys, "event_date", F.unix_micros(key).alias("_bucket_micros")) \
            .distinct().collect()
        if not touched:
            return
        keys = F.broadcast(spark.createDataFrame(touched).drop("event_date", "_bucket_micros").distinct())
        dates = sorted({r["event_date"] for r in touched})
        starts = [r["_bucket_micros"] for r in touched]
        span = self.within_buckets(starts)
        silver = self.narrow(*[
            spark.read.format("delta").load(p).where(F.col("event_date").isin(dates) & span)
            for p in self.silver_paths if has_delta_log(spark, p)
        ])
        fresh = self.compute(self.bucket(silver).join(keys, list(self.keys), "left_semi"))
        record = self.batch_record(spark, batch_id)
        at = Step(spark=spark, batch_id=batch_id, app_id=record.txn_app_id, lake_root=self.lake_root,
                  target=self.target, state_root="", watermark=None, watermark_after=0,
                  user_metadata=record.metadata(final=True), **quality_of(self.ctx, self.target.name, batch_id, batch))
        written = at.merge(fresh, keys=self.keys, key_range=(key, min(starts), max(starts)))
        stats = self.stats
        stats.batches += 1
        stats.input_rows += batch.count()
        stats.on_time = stats.input_rows
        stats.rows_written += written


class UpsertWriter(RecordsPositions):
    """A `(batch_df, batch_id)` function for a stateless gold table: each batch's rows upserted on the keys, once."""

    def __init__(self, *, target: TableSpec, lake_root: str, app_id: str, compute: Callable[[DataFrame], DataFrame],
                 keys: tuple[str, ...], ctx: FlowContext | None = None):
        self.target, self.lake_root, self.app_id, self.compute, self.keys = target, lake_root, app_id, compute, keys
        self.ctx = ctx
        self.stats = GoldBatchStats()

    def settle(self, spark: SparkSession) -> None:
        """Nothing to fill in: the table has no watermark or state."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        record = self.batch_record(batch.sparkSession, batch_id)
        at = Step(spark=batch.sparkSession, batch_id=batch_id, app_id=record.txn_app_id, lake_root=self.lake_root,
                  target=self.target, state_root="", watermark=None, watermark_after=0,
                  user_metadata=record.metadata(final=True), **quality_of(self.ctx, self.target.name, batch_id, batch))
        written = at.merge(self.compute(batch), keys=self.keys)
        self.stats.batches += 1
        self.stats.rows_written += written
