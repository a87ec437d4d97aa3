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


def append_once(df: DataFrame, path: str, *, app_id: str, batch_id: int, partition_by: tuple[str, ...] = (),
                user_metadata: str | None = None) -> None:
    """Append a micro-batch's rows to a Delta table; Delta skips the write if (app_id, batch_id) already committed.

    `user_metadata` goes into the commit's userMetadata (the source positions, streaming/positions.py).
    """
    writer = (
        df.write.format("delta").mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(batch_id))
    )
    if user_metadata is not None:
        writer = writer.option("userMetadata", user_metadata)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
