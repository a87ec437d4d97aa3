"""A silver batch looks for duplicates in the part of silver within its dedup watermark, not in the whole day.

The test writes silver_orders in two batches hours apart (same date), removes the early batch's data
files from disk (silver's log still lists them) and runs a third batch with a re-sent event, new events
and a late one: it can only succeed if the batch skips the early files, and where each event went must
equal what plain Python says of it.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import functions as F

from lakehouse.schemas.tables import LATE_ARRIVALS

from lakehouse.pipelines.shop import SILVER_ORDERS
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from tests.integration.test_gold_pruning import remove_files_before
from tests.integration.test_replayed_batch import T0, bronze_orders


def test_a_silver_batch_reads_only_the_silver_files_within_its_dedup_watermark(spark, tmp_path):
    """Silver's 09:00 hour is gone from disk; a batch at 14:00 still drops its re-sent event and keeps the new ones."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["silver_orders"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", silver_dedup_watermark="1 hour")
    writer = flow.batch_writer(ctx)
    silver = SILVER_ORDERS.path(lake)
    batches = [
        [("e1", 1), ("e2", 2), ("e3", 3)],                 # 09:01-09:03
        [("f1", 300.5), ("f2", 301)],                       # 14:00: the watermark moves to 13:01
        [("f1", 300.5), ("g1", 302), ("g2", 250), ("h1", 100)],   # a re-sent f1, two new, one 3 h behind
    ]
    offset = 0
    for batch_id, rows in enumerate(batches):
        if batch_id == 2:
            assert remove_files_before(spark, silver, "occurred_at", T0 + timedelta(hours=1)) >= 1
        writer(flow.apply(bronze_orders(spark, *rows, first_offset=offset), ctx=ctx), batch_id)
        offset += len(rows)

    # Plain Python: the watermark before batch 2 is the newest event time silver held minus the delay.
    held = {event_id: minutes for rows in batches[:2] for event_id, minutes in rows}
    watermark = max(held.values()) - 60
    last = batches[2]
    late = {e for e, m in last if m < watermark}
    duplicates = {e for e, m in last if m >= watermark and e in held}
    new = {e for e, m in last if m >= watermark and e not in held}
    assert (late, duplicates, new) == ({"h1"}, {"f1"}, {"g1", "g2"})   # the batch holds one of each kind

    later = spark.read.format("delta").load(silver).where(F.col("occurred_at") >= F.lit(T0 + timedelta(hours=1)))
    assert sorted(r["event_id"] for r in later.collect()) == sorted({"f1", "f2"} | new)
    assert {r["event_id"] for r in spark.read.format("delta").load(LATE_ARRIVALS.path(lake)).collect()} == late
    stats = writer.stats
    assert (stats.silver, stats.duplicates, stats.late) == (3 + 2 + len(new), len(duplicates), len(late))
