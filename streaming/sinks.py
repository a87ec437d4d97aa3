"""Delta writes: idempotent appends through Delta's streaming sink, and per-micro-batch MERGE upserts."""

from __future__ import annotations

from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import DataFrame

from schemas.tables import TableSpec

BatchFunction = Callable[[DataFrame, int], None]


def ensure_table(batch_df: DataFrame, table: TableSpec, path: str) -> None:
    """Create the Delta table with the batch's schema if it does not exist yet."""
    builder = DeltaTable.createIfNotExists(batch_df.sparkSession).location(path).addColumns(batch_df.schema)
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    for key, value in table.properties.items():
        builder = builder.property(key, value)
    builder.execute()


def upsert_batch(table: TableSpec, path: str, *, app_id: str) -> BatchFunction:
    """A `(batch_df, batch_id)` function that MERGEs a batch into the table on its keys, once per batch id.

    The streaming lane passes it to foreachBatch; the batch lane calls it directly. Delta records
    (app_id, batch_id) in the commit, so a batch replayed after a crash is skipped, not applied twice.
    """
    condition = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in table.keys)

    def upsert(batch_df: DataFrame, batch_id: int) -> None:
        spark = batch_df.sparkSession
        ensure_table(batch_df, table, path)
        spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        spark.conf.set("spark.databricks.delta.write.txnVersion.autoReset.enabled", "true")
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(batch_df.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    return upsert


def append_once(df: DataFrame, path: str, *, app_id: str, batch_id: int, partition_by: tuple[str, ...] = ()) -> None:
    """Append a micro-batch's rows to a Delta table; Delta skips the write if (app_id, batch_id) already committed."""
    writer = (
        df.write.format("delta").mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(batch_id))
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
