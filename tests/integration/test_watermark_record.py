"""A stateful gold flow finds its saved watermark in the Delta log, and still in the table when the log does not hold it.

Each watermark commit records the row it saved in its userMetadata (`saved`), so a new writer reads
it from the newest commit file instead of by a Spark job over the table. A watermark saved by earlier
code (no `saved` in its commit) is read from the table as before.
"""

from datetime import datetime, timedelta, timezone
from pathlib import Path

from schemas.tables import GOLD_REVENUE_PER_MINUTE, LATE_ARRIVALS
from streaming.context import FlowContext
from streaming.flows import BY_NAME

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
SCHEMA = "event_id string, occurred_at timestamp, currency string, total_cents bigint, item_count int, " \
         "topic string, partition int, offset bigint, appended_at timestamp, ingested_at timestamp"


def orders(spark, first_offset: int, *rows):
    """Silver order rows (event id, minutes after T0, cents), at Kafka offsets from `first_offset`."""
    return spark.createDataFrame([
        (event_id, T0 + timedelta(minutes=minutes), "EUR", cents, 1, "shop.orders.v1", 0, first_offset + i, T0, T0)
        for i, (event_id, minutes, cents) in enumerate(rows)
    ], SCHEMA)


def late_ids(spark, lake: str) -> list[str]:
    return sorted(r["event_id"] for r in spark.read.format("delta").load(LATE_ARRIVALS.path(lake)).collect())


def revenue(spark, lake: str) -> dict:
    table = spark.read.format("delta").load(GOLD_REVENUE_PER_MINUTE.path(lake))
    return {r["window_start"].astimezone(timezone.utc): r["revenue_cents"] for r in table.collect()}


def two_batches(spark, lake: str) -> tuple:
    """Batch 0 (orders at 0, 5 and 40 minutes), then a new writer's batch 1 (at 20 and 41 minutes)."""
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    first = flow.batch_writer(ctx)
    first(flow.apply(orders(spark, 0, ("o1", 0, 100), ("o2", 5, 200), ("o3", 40, 400)), ctx=ctx), 0)
    return flow, ctx, first


def test_the_watermark_is_read_from_its_commit_even_with_the_table_s_files_gone(spark, tmp_path):
    """With the watermark table's data files deleted, only the commit's record can give the watermark."""
    lake = str(tmp_path / "lake")
    flow, ctx, first = two_batches(spark, lake)
    data_files = list(Path(first.watermark_path).glob("*.parquet"))
    assert data_files
    for path in data_files:
        path.unlink()

    second = flow.batch_writer(ctx)
    # The watermark batch 0 left: 40 - 10 = 30 minutes; the order at 20 minutes is late, the one at 41 is not.
    second(flow.apply(orders(spark, 3, ("o4", 20, 50), ("o5", 41, 10)), ctx=ctx), 1)
    assert late_ids(spark, lake) == ["o4"]
    expected = {T0 + timedelta(minutes=m): c for m, c in ((0, 100), (5, 200), (40, 400), (41, 10))}
    assert revenue(spark, lake) == expected
    assert second.stats.watermark_micros == int((T0 + timedelta(minutes=41 - 10)).timestamp()) * 1_000_000


def test_a_watermark_saved_without_its_record_is_read_from_the_table(spark, tmp_path):
    """A watermark committed by earlier code (no record in its commit) still holds: the table is read."""
    lake = str(tmp_path / "lake")
    flow, ctx, first = two_batches(spark, lake)
    saved = spark.read.format("delta").load(first.watermark_path)
    # Rewrite the same row as earlier code did: no userMetadata on the commit.
    saved.localCheckpoint().write.format("delta").mode("overwrite").save(first.watermark_path)

    second = flow.batch_writer(ctx)
    second(flow.apply(orders(spark, 3, ("o4", 20, 50), ("o5", 41, 10)), ctx=ctx), 1)
    assert late_ids(spark, lake) == ["o4"]
    assert revenue(spark, lake)[T0 + timedelta(minutes=41)] == 10
