"""Delta writes: idempotent appends through Delta's streaming sink, and per-micro-batch MERGE upserts."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator

from delta.tables import DeltaTable
from pyspark import InheritableThread
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.lake_files import has_delta_log

log = logging.getLogger(__name__)

BatchFunction = Callable[[DataFrame, int], None]


def nullable(data_type: T.DataType) -> T.DataType:
    """`data_type` with every field, nested ones too, nullable: as a DataFrame append leaves a new table's columns."""
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def ensure_table(batch_df: DataFrame, table: TableSpec, path: str, schema: T.StructType | None = None) -> bool:
    """Create the Delta table with `schema` (by default the batch's) if it does not exist yet; True if this call
    created it."""
    # Looking at the log folder first: createIfNotExists resolves the table's snapshot even when it exists,
    # 0.06-0.11 s on each MERGE batch here against 0.003 s.
    if has_delta_log(batch_df.sparkSession, path):
        return False
    builder = DeltaTable.createIfNotExists(batch_df.sparkSession).location(path).addColumns(schema or batch_df.schema)
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    for key, value in table.properties.items():
        builder = builder.property(key, value)
    builder.execute()
    return True


@contextmanager
def dml_once(spark: SparkSession, app_id: str, batch_id: int) -> Iterator[None]:
    """Make the DML (MERGE, UPDATE) run inside the block idempotent: Delta skips it if (app_id, batch_id) committed.

    A DML takes these as session settings, not write options. They are cleared afterwards: a DML that
    changed nothing commits nothing, and would leave them for the session's next, unrelated write
    (which Delta then refuses, or skips).
    """
    conf = spark.conf
    conf.set("spark.databricks.delta.write.txnAppId", app_id)
    conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    conf.set("spark.databricks.delta.write.txnVersion.autoReset.enabled", "true")
    try:
        yield
    finally:
        for key in ("txnAppId", "txnVersion"):
            conf.unset(f"spark.databricks.delta.write.{key}")


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
    save_racing_creation(lambda: writer.save(path))


class StateWarmer:
    """Computes the state of Delta tables in a background thread, while the batch computes what it will write.

    An append with a txn id asks its snapshot which txn versions committed, and Delta 4.4 answers that by
    computing the snapshot's whole state with Spark jobs: 0.41 s for a 10-row append against 0.15 s
    without a txn id, on 2 cores. `DeltaTable.detail()` computes the same state of the same (latest)
    snapshot, which the append then reuses if no commit came in between. Only the time moves, so run
    this beside work that leaves the cores idle between small jobs. In a stream that keeps every core
    busy it moves CPU from the other queries to this one: done in gold's writer too, it made gold's
    batch 15% shorter and silver's 14% longer, and neither p99 better (docs/performance.md, "Tried and
    not kept"). A failure here costs only the time saved: the append computes the state itself.
    """

    def __init__(self, spark: SparkSession, paths: list[str]):
        self._thread = InheritableThread(target=self._warm, args=(spark, paths), name="delta-state", daemon=True)
        self._thread.start()

    @staticmethod
    def _warm(spark: SparkSession, paths: list[str]) -> None:
        for path in paths:
            try:
                if has_delta_log(spark, path):
                    DeltaTable.forPath(spark, path).detail().collect()
            except Exception as exc:  # noqa: BLE001 - an optimisation only; the append does the work itself
                log.debug("could not compute the state of %s ahead of its append: %s", path, exc)

    def join(self) -> None:
        """Wait for it, before the appends: they would wait for the same state anyway."""
        self._thread.join()


# Two queries appending first to one new table (several silver flows to quarantine) race to create it;
# the loser's commit fails although an append never conflicts with an append. Once the table exists, retry.
_CREATION_RACE = ("DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED", "ProtocolChangedException",
                  "MetadataChangedException")


def save_racing_creation(save: Callable[[], None], attempts: int = 3) -> None:
    """Run a Delta append, again if it lost the race to create the table (the append is idempotent)."""
    for attempt in range(1, attempts + 1):
        try:
            save()
            return
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is the creation race
            if attempt == attempts or not any(marker in str(exc) for marker in _CREATION_RACE):
                raise


def merge_metrics(result: DataFrame) -> dict[str, int] | None:
    """What a MERGE's execute() returned: its row counts, or None when Delta skipped it (its txn had committed).

    The MERGE returns them itself; reading the table's history afterwards for them costs 0.4-0.9 s a batch.
    """
    rows = result.collect()
    return rows[0].asDict() if rows else None
