"""A recomputed gold batch reads the part of silver and of its table near its own event times, not the whole day.

The test builds silver and gold_processing_delay with an early hour and a later one in separate files,
removes the early hour's data files from disk (the tables' logs still list them), and runs a batch of
later events: it can only succeed if the batch skips the early files, and its figures must still equal
plain Python's.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from urllib.parse import urlparse

from pyspark.sql import functions as F

from lakehouse.pipelines.shop import GOLD_PROCESSING_DELAY, SILVER_ORDERS
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.transforms import to_delay_events
from lakehouse.pipelines import shop

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=timezone.utc)
DELAYS = "topic string, event_id string, occurred_at timestamp, sent_at timestamp, appended_at timestamp, " \
         "ingested_at timestamp, event_date date"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def remove_files_before(spark, path: str, column: str, before: datetime) -> int:
    """Delete from disk every data file of the table whose rows all have `column` before `before`."""
    files = (spark.read.format("delta").load(path).groupBy(F.input_file_name().alias("file"))
             .agg(F.max(column).alias("newest")).collect())
    gone = [r["file"] for r in files if r["newest"].replace(tzinfo=timezone.utc) < before]
    for file in gone:
        os.remove(urlparse(file).path)
    return len(gone)


def test_a_recomputed_minute_reads_only_the_silver_rows_of_its_own_minutes(spark, tmp_path):
    """Processing delay: silver's hour 0 is gone from disk; a batch at hour 5 recomputes its minutes from hour 5's rows."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_processing_delay"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1")
    writer = flow.batch_writer(ctx)
    silver = SILVER_ORDERS.path(lake)

    def events(rows):   # (event id, minutes after T0, ms from event to send); append 20 ms, ingest 100 ms later
        out = []
        for event_id, minutes, to_send in rows:
            sent = at(minutes) + timedelta(milliseconds=to_send)
            out.append(("shop.orders.v1", event_id, at(minutes), sent, sent + timedelta(milliseconds=20),
                        sent + timedelta(milliseconds=120), at(minutes).date()))
        return spark.createDataFrame(out, DELAYS)

    batches = [[("a1", 0.2, 10), ("a2", 0.4, 30)], [("b1", 300.2, 40), ("b2", 301.3, 50)],
               [("c1", 300.6, 70), ("c2", 300.9, 90)]]
    for batch_id, rows in enumerate(batches):
        batch = events(rows)
        batch.write.format("delta").mode("append").save(silver)   # silver holds a batch before gold reads it
        if batch_id == 2:
            assert remove_files_before(spark, silver, "occurred_at", at(60)) >= 1
            assert remove_files_before(spark, GOLD_PROCESSING_DELAY.path(lake), "minute", at(60)) >= 1
        writer(to_delay_events(batch), batch_id)

    got = {r["minute"].replace(tzinfo=timezone.utc): r for r in spark.read.format("delta")
           .load(GOLD_PROCESSING_DELAY.path(lake)).where(F.col("minute") >= F.lit(at(60))).collect()}
    by_minute = defaultdict(list)
    for _, minutes, to_send in (r for rows in batches[1:] for r in rows):
        by_minute[at(minutes).replace(second=0, microsecond=0)].append(to_send)
    assert {m: r["events"] for m, r in got.items()} == {m: len(v) for m, v in by_minute.items()}
    assert {m: r["event_to_send_max_ms"] for m, r in got.items()} == {m: max(v) for m, v in by_minute.items()}
    # Minute 5:00 was recomputed from b1, c1 and c2: its median is c1's 70 ms.
    assert got[at(300)]["event_to_send_p50_ms"] == 70
