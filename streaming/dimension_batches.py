"""A dimension's per-micro-batch step: a batch of change events MERGEd into its SCD2 table, once.

The streaming lane passes a `DimensionWriter` to foreachBatch (the dimension flow reads silver as a
stream); the batch lane calls it directly. For the keys in a batch it reads their versions already in the
table, adds the new ones, recomputes every interval (`scd2_versions`: valid_to is the next version's
valid_from, so a change that arrives out of order lands between two versions and closes the earlier one
at its time), and MERGEs on (key, valid_from, event_id): an interval that changed is updated, a new version
inserted. The MERGE carries Delta's (txnAppId, txnVersion), so a batch replayed after a crash is skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType, TimestampType

from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.positions import BatchRecord, RecordsPositions, UserMetadata
from lakehouse.streaming.sinks import append_once, dml_once, ensure_table, merge_metrics, nullable
from lakehouse.streaming.transforms.dimensions import LINEAGE, scd2_versions

log = logging.getLogger(__name__)


@dataclass
class DimensionBatchStats:
    """What the writer did over the life of one query, for the asset's metadata."""

    batches: int = 0
    input_rows: int = 0
    versions_inserted: int = 0
    versions_closed: int = 0     # existing versions whose valid_to was set or moved
    skipped_batches: int = 0     # replayed batch ids Delta had already committed

    @property
    def rows_written(self) -> int:
        return self.versions_inserted + self.versions_closed


class DimensionWriter(RecordsPositions):
    """A `(changes_batch, batch_id)` function that applies one batch of dimension versions to the SCD2 table."""

    def __init__(
        self, *, table: TableSpec, lake_root: str, key: str, attributes: Sequence[str], app_id: str,
        schema: StructType | None = None, ctx: FlowContext | None = None,
    ):
        self.ctx = ctx
        self.table = table
        self.path = table.path(lake_root)
        self.key = key
        self.attributes = tuple(attributes)
        self.app_id = app_id
        self.schema = schema           # the table's columns with descriptions; else the first batch's
        self.stats = DimensionBatchStats()

    def _table_schema(self, changes: DataFrame) -> StructType:
        """The declared columns, or the change batch's columns with valid_to and is_current added."""
        if self.schema is not None:
            return self.schema
        by_name = {f.name: f for f in changes.schema.fields}
        return StructType([
            *(by_name[c] for c in (self.key, *self.attributes, "valid_from")),
            StructField("valid_to", TimestampType(), True),
            StructField("is_current", BooleanType(), True),
            *(by_name[c] for c in LINEAGE),
        ])

    def __call__(self, changes: DataFrame, batch_id: int) -> None:
        spark = changes.sparkSession
        changes = changes.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n = changes.count()
            self.stats.batches += 1
            self.stats.input_rows += n
            if not n:
                return
            created = ensure_table(changes, self.table, self.path, schema=nullable(self._table_schema(changes)))
            target = DeltaTable.forPath(spark, self.path)
            keys = changes.select(self.key).distinct()
            existing = target.toDF().join(F.broadcast(keys), self.key, "left_semi")
            versions = scd2_versions(existing, changes, key=self.key, attributes=self.attributes)
            versions = versions.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                count = versions.count()   # read the table's versions before the MERGE changes them
                if self.ctx is not None and self.ctx.quality is not None:
                    self.ctx.quality.validate(self.table, versions, self.ctx.batch_scope(
                        self.table.name, batch_id, changes))
                record = self.batch_record(spark, batch_id)
                if created:
                    # A new table: the MERGE could only insert (see gold_batches.Step._merge); the same txn id.
                    append_once(versions, self.path, app_id=record.txn_app_id, batch_id=batch_id,
                                user_metadata=record.metadata(final=True))
                    metrics = {"num_inserted_rows": count, "num_updated_rows": 0}
                else:
                    metrics = self._merge(spark, target, versions, batch_id, record)
            finally:
                versions.unpersist()
        finally:
            changes.unpersist()
        if metrics is None:
            self.stats.skipped_batches += 1
            log.info("dimension %s: batch %d was already applied (app id %s); skipped", self.table.name, batch_id,
                     self.app_id)
            return
        self.stats.versions_inserted += int(metrics["num_inserted_rows"])
        self.stats.versions_closed += int(metrics["num_updated_rows"])

    def _merge(self, spark: SparkSession, target: DeltaTable, versions: DataFrame, batch_id: int,
               record: BatchRecord) -> dict[str, int] | None:
        key = self.key
        condition = f"t.`{key}` <=> s.`{key}` AND t.valid_from = s.valid_from AND t.event_id = s.event_id"
        changed = "NOT (t.valid_to <=> s.valid_to) OR NOT (t.is_current <=> s.is_current)"
        # The batch's one write, so its final one: it records where the batch's source stood (positions.py).
        with dml_once(spark, record.txn_app_id, batch_id), UserMetadata(spark, record.metadata(final=True)):
            return merge_metrics(
                target.alias("t")
                .merge(versions.alias("s"), condition)
                .whenMatchedUpdate(condition=changed, set={"valid_to": "s.valid_to", "is_current": "s.is_current"})
                .whenNotMatchedInsertAll()
                .execute()
            )
