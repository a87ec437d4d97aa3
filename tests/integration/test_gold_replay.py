"""A stateful gold batch replayed after it saved its watermark (a crash before Spark's commit) routes its rows as before."""

from datetime import datetime, timedelta, timezone

from schemas.tables import GOLD_REVENUE_PER_MINUTE, LATE_ARRIVALS
from streaming.context import FlowContext
from streaming.flows import BY_NAME
from streaming.lake_files import has_delta_log

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
SCHEMA = "event_id string, occurred_at timestamp, currency string, total_cents bigint, item_count int, " \
         "topic string, partition int, offset bigint, appended_at timestamp, ingested_at timestamp"


def orders(spark, *rows):
    """Silver order rows (event id, minutes after T0, cents), at Kafka offsets 0, 1, ..."""
    return spark.createDataFrame([
        (event_id, T0 + timedelta(minutes=minutes), "EUR", cents, 1, "shop.orders.v1", 0, offset, T0, T0)
        for offset, (event_id, minutes, cents) in enumerate(rows)
    ], SCHEMA)


def revenue(spark, lake: str) -> dict:
    table = spark.read.format("delta").load(GOLD_REVENUE_PER_MINUTE.path(lake))
    return {(r["window_start"].astimezone(timezone.utc), r["currency"]): (r["revenue_cents"], r["orders"])
            for r in table.collect()}


def test_a_batch_replayed_after_its_watermark_was_saved_counts_and_lists_nothing_twice(spark, tmp_path):
    """The first run of batch 0 merged every row; its replay, by a new writer, must not find them late."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    # Batch 0 spans 40 minutes: with no watermark before it, every row is on time.
    batch = orders(spark, ("o1", 0, 100), ("o2", 5, 200), ("o3", 40, 400))
    flow.batch_writer(ctx)(flow.apply(batch, ctx=ctx), 0)
    expected = {(T0, "EUR"): (100, 1), (T0 + timedelta(minutes=5), "EUR"): (200, 1),
                (T0 + timedelta(minutes=40), "EUR"): (400, 1)}
    assert revenue(spark, lake) == expected

    # The process dies before Spark records batch 0; a new one replays it after the watermark moved to 09:30.
    replay = flow.batch_writer(ctx)
    replay(flow.apply(batch, ctx=ctx), 0)
    assert revenue(spark, lake) == expected
    late = LATE_ARRIVALS.path(lake)
    assert not has_delta_log(spark, late) or spark.read.format("delta").load(late).count() == 0

    # The next batch sees the watermark batch 0 left: 40 - 10 = 30 minutes; a row at 20 minutes is late.
    replay(flow.apply(orders(spark, ("o4", 20, 50), ("o5", 41, 10)), ctx=ctx), 1)
    expected[(T0 + timedelta(minutes=41), "EUR")] = (10, 1)
    assert revenue(spark, lake) == expected
    assert [r["event_id"] for r in spark.read.format("delta").load(late).collect()] == ["o4"]
