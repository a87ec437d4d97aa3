"""A changelog's per-micro-batch step: a batch of a database's change records applied once, as SCD1 or SCD2.

Both lanes call `ChangelogWriter` with bronze records of a changelog topic (Debezium's envelope): the stream
from foreachBatch, the batch lane directly. A changelog source has two such flows, one per table it keeps (each
table has one flow, so that the batch lane recomputes and compares it like any other). One batch makes up to
three writes, each under Delta's (txnAppId, txnVersion) so that a replayed batch writes nothing twice, and each
idempotent by the changes' log positions anyway:

1. envelopes that are not a change this table can apply go to quarantine with a reason and their coordinates
   (the current state's flow only, so that each is quarantined once);
2. the deleted keys the flow remembers (`<table>_deletes`: key, log position, commit time) get the batch's
   deletes, and forget those older than the retention;
3. current state (SCD1): each key's newest change by log position, if newer than the row's, replaces it or (a
   delete) removes it; a change older than a remembered delete is not applied. Or history (SCD2): the affected
   keys' versions rebuilt in log order and MERGEd on (key, log position).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType, TimestampType, IntegerType, StringType

from lakehouse.schemas.tables import QUARANTINE, TableSpec
from lakehouse.streaming.positions import BatchRecord, RecordsPositions, UserMetadata
from lakehouse.streaming.sinks import append_once, dml_once, ensure_table, merge_metrics
from lakehouse.streaming.transforms.changelog import parse_changes, scd1_latest, scd2_history, unique_changes

log = logging.getLogger(__name__)

_LINEAGE = [StructField("topic", StringType()), StructField("partition", IntegerType()),
            StructField("offset", LongType())]


@dataclass
class ChangelogStats:
    """What the writer did over the life of one query, for the asset's metadata."""

    batches: int = 0
    changes: int = 0              # change records that applied (after removing ones delivered twice)
    quarantined: int = 0
    current_upserts: int = 0
    current_deletes: int = 0
    versions_written: int = 0     # SCD2 rows inserted or updated

    @property
    def rows_written(self) -> int:
        return self.current_upserts + self.current_deletes + self.versions_written


class ChangelogWriter(RecordsPositions):
    """A `(records_batch, batch_id)` function that applies one batch of a database changelog to its current state
    (`kind` "current", SCD1) or its history ("history", SCD2)."""

    def __init__(self, *, topic: str, key: str, columns: StructType, table: TableSpec, kind: str,
                 deletes: TableSpec, lake_root: str, app_id: str, remember_deletes: str = "7 days"):
        assert kind in ("current", "history"), kind
        self.topic, self.key, self.columns, self.kind = topic, key, columns, kind
        self.attributes: Sequence[str] = [f.name for f in columns.fields if f.name != key]
        self.table, self.deletes = table, deletes
        self.paths = {t.name: t.path(lake_root) for t in (table, deletes)}
        self.quarantine_path = QUARANTINE.path(lake_root)
        self.app_id = app_id
        self.remember_deletes = remember_deletes
        self.stats = ChangelogStats()

    # -- the tables' columns
    def _current_schema(self) -> StructType:
        return StructType([*self.columns.fields, StructField("_lsn", LongType()), StructField("_order", LongType()),
                           StructField("_changed_at", TimestampType()), *_LINEAGE])

    def _history_schema(self) -> StructType:
        by_name = {f.name: f for f in self.columns.fields}
        return StructType([
            by_name[self.key], *(by_name[a] for a in self.attributes),
            StructField("valid_from", TimestampType()), StructField("valid_to", TimestampType()),
            StructField("is_current", BooleanType()), StructField("_lsn", LongType()),
            StructField("_order", LongType()), StructField("_end_lsn", LongType()), StructField("_end_order", LongType()),
            StructField("_closed_by_delete", BooleanType()), *_LINEAGE])

    def _deletes_schema(self) -> StructType:
        by_name = {f.name: f for f in self.columns.fields}
        return StructType([by_name[self.key], StructField("_lsn", LongType()), StructField("_order", LongType()),
                           StructField("_changed_at", TimestampType())])

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        spark = records.sparkSession
        batch = self.batch_record(spark, batch_id)
        parsed = parse_changes(records, key=self.key, columns=self.columns).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            bad = parsed.where(F.col("reason").isNotNull())
            changes = unique_changes(
                parsed.where(F.col("reason").isNull()).select(
                    *self.columns.fieldNames(), "_op", "_lsn", "_order", "_changed_at", "topic", "partition", "offset"),
                key=self.key).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                n_bad, n_changes = bad.count(), changes.count()
                self.stats.batches += 1
                self.stats.quarantined += n_bad
                self.stats.changes += n_changes
                # Each write records the batch's source positions; the last one is marked final (positions.py).
                if n_bad and self.kind == "current":
                    append_once(self._quarantine_rows(bad), self.quarantine_path,
                                app_id=f"{batch.txn_app_id}-quarantine", batch_id=batch_id,
                                user_metadata=batch.metadata(final=not n_changes))
                if n_changes:
                    self._apply(spark, changes, batch_id, batch)
            finally:
                changes.unpersist()
        finally:
            parsed.unpersist()

    def _quarantine_rows(self, bad: DataFrame) -> DataFrame:
        return bad.select("topic", "partition", "offset", "key", "value", "headers", "appended_at", "ingested_at",
                          F.lit(self.topic).alias("schema"), "reason", "detail",
                          F.current_timestamp().alias("quarantined_at"))

    def _apply(self, spark, changes: DataFrame, batch_id: int, batch: BatchRecord) -> None:
        key = self.key
        schema = self._current_schema() if self.kind == "current" else self._history_schema()
        for table, columns in ((self.deletes, self._deletes_schema()), (self.table, schema)):
            ensure_table(changes, table, self.paths[table.name], schema=columns)
        deletes = DeltaTable.forPath(spark, self.paths[self.deletes.name])
        new_deletes = changes.where("_op = 'd'").select(key, "_lsn", "_order", "_changed_at")
        forget = f"t._changed_at < current_timestamp() - INTERVAL {self.remember_deletes}"
        with dml_once(spark, f"{batch.txn_app_id}-deletes", batch_id), UserMetadata(spark, batch.metadata()):
            deletes.alias("t").merge(new_deletes.alias("s"), f"t.`{key}` = s.`{key}` AND t._order = s._order") \
                .whenNotMatchedInsertAll().whenNotMatchedBySourceDelete(condition=forget).execute()
        target = DeltaTable.forPath(spark, self.paths[self.table.name])
        if self.kind == "current":
            self._current(spark, target, changes, deletes.toDF(), batch_id, batch)
        else:
            self._history(spark, target, changes, deletes.toDF(), batch_id, batch)

    def _current(self, spark, current: DeltaTable, changes: DataFrame, deletes: DataFrame, batch_id: int,
                 batch: BatchRecord) -> None:
        key = self.key
        latest = scd1_latest(changes, deletes, key=key)
        columns = [*self.columns.fieldNames(), "_lsn", "_order", "_changed_at", "topic", "partition", "offset"]
        values = {c: f"s.`{c}`" for c in columns}
        # The batch's last write: it records where the batch's source stood (positions.py).
        with dml_once(spark, batch.txn_app_id, batch_id), UserMetadata(spark, batch.metadata(final=True)):
            metrics = merge_metrics(
                current.alias("t").merge(latest.alias("s"), f"t.`{key}` = s.`{key}`")
                .whenMatchedDelete(condition="s._order > t._order AND s._op = 'd'")
                .whenMatchedUpdate(condition="s._order > t._order", set=values)
                .whenNotMatchedInsert(condition="s._op <> 'd'", values=values)
                .execute())
        if metrics:
            self.stats.current_deletes += int(metrics.get("num_deleted_rows", 0))
            self.stats.current_upserts += int(metrics.get("num_updated_rows", 0)) + \
                int(metrics.get("num_inserted_rows", 0))

    def _history(self, spark, history: DeltaTable, changes: DataFrame, deletes: DataFrame, batch_id: int,
                 batch: BatchRecord) -> None:
        key = self.key
        versions = scd2_history(history.toDF(), deletes, changes, key=key, attributes=self.attributes) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        try:
            versions.count()      # read the table's versions before the MERGE changes them
            changed = ("NOT (t.valid_to <=> s.valid_to) OR NOT (t.is_current <=> s.is_current) "
                       "OR NOT (t._closed_by_delete <=> s._closed_by_delete)")
            with dml_once(spark, batch.txn_app_id, batch_id), UserMetadata(spark, batch.metadata(final=True)):
                metrics = merge_metrics(
                    history.alias("t").merge(versions.alias("s"), f"t.`{key}` = s.`{key}` AND t._order = s._order")
                    .whenMatchedUpdate(condition=changed, set={
                        c: f"s.{c}" for c in ("valid_to", "is_current", "_end_lsn", "_end_order", "_closed_by_delete")})
                    .whenNotMatchedInsertAll()
                    .execute())
        finally:
            versions.unpersist()
        if metrics:
            self.stats.versions_written += int(metrics.get("num_updated_rows", 0)) + \
                int(metrics.get("num_inserted_rows", 0))
