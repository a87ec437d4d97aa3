"""A batch replayed after its last write (its process stopped before Spark recorded it) routes its rows as before.

Delta skips each write such a batch made, by its txn id. What it has not written the first time (late
rows, when it had none) it writes, so it must find the watermark it started from, not the one it left.

A stateful gold flow finds that watermark in the Delta log: the commit that saves it records the row in
its userMetadata (`saved`), so a new writer reads it from a commit file instead of by a Spark job. A
window flow saves it in its MERGE's own commit; a batch with no MERGE, in the flow's watermark table. A
watermark saved by earlier code (no `saved` in its commit) is read from the table as before.
"""

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lakehouse.batch.maintenance import compact_table
from lakehouse.schemas import topics
from lakehouse.schemas.tables import LATE_ARRIVALS
from lakehouse.pipelines.shop import GOLD_REVENUE_PER_MINUTE, SILVER_ORDERS
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import last_commit
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import generate, iso
from lakehouse.streaming.gold_batches import StaleGoldTable
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.transforms.bronze import to_bronze
from lakehouse.pipelines import shop

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
SCHEMA = "event_id string, occurred_at timestamp, currency string, total_cents bigint, item_count int, " \
         "topic string, partition int, offset bigint, appended_at timestamp, ingested_at timestamp"


def orders(spark, *rows, first_offset=0):
    """Silver order rows (event id, minutes after T0, cents), at Kafka offsets first_offset, first_offset + 1, ..."""
    return spark.createDataFrame([
        (event_id, T0 + timedelta(minutes=minutes), "EUR", cents, 1, "shop.orders.v1", 0, offset, T0, T0)
        for offset, (event_id, minutes, cents) in enumerate(rows, start=first_offset)
    ], SCHEMA)


def revenue(spark, lake: str) -> dict:
    table = spark.read.format("delta").load(GOLD_REVENUE_PER_MINUTE.path(lake))
    return {(r["window_start"].astimezone(timezone.utc), r["currency"]): (r["revenue_cents"], r["orders"])
            for r in table.collect()}


def test_a_batch_replayed_after_its_watermark_was_saved_counts_and_lists_nothing_twice(spark, tmp_path):
    """The first run of batch 0 wrote every row; its replay, by a new writer, must not find them late."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    # Batch 0 spans 40 minutes: with no watermark before it, every row is on time.
    batch = orders(spark, ("o1", 0, 100), ("o2", 5, 200), ("o3", 40, 400))
    first = flow.batch_writer(ctx)
    first(flow.apply(batch, ctx=ctx), 0)
    expected = {(T0, "EUR"): (100, 1), (T0 + timedelta(minutes=5), "EUR"): (200, 1),
                (T0 + timedelta(minutes=40), "EUR"): (400, 1)}
    assert revenue(spark, lake) == expected
    # The table was new, so nothing could match: batch 0 was appended, and that commit holds the watermark (the
    # batch made no commit of its own for it).
    appended = last_commit(spark, GOLD_REVENUE_PER_MINUTE.path(lake))
    assert appended.operation == "WRITE" and appended.metrics["numOutputRows"] == "3"
    assert not has_delta_log(spark, first.watermark_path)

    # The process dies before Spark records batch 0; a new one replays it after the watermark moved to 09:30.
    replay = flow.batch_writer(ctx)
    replay(flow.apply(batch, ctx=ctx), 0)
    assert revenue(spark, lake) == expected
    assert last_commit(spark, GOLD_REVENUE_PER_MINUTE.path(lake)).version == appended.version   # MERGE skipped by txn id
    late = LATE_ARRIVALS.path(lake)
    assert not has_delta_log(spark, late) or spark.read.format("delta").load(late).count() == 0

    # The next batch sees the watermark batch 0 left: 40 - 10 = 30 minutes; a row at 20 minutes is late.
    replay(flow.apply(orders(spark, ("o4", 20, 50), ("o5", 41, 10)), ctx=ctx), 1)
    expected[(T0 + timedelta(minutes=41), "EUR")] = (10, 1)
    assert revenue(spark, lake) == expected
    assert [r["event_id"] for r in spark.read.format("delta").load(late).collect()] == ["o4"]


def test_a_first_batch_replayed_before_its_watermark_was_saved_counts_nothing_twice(spark, tmp_path):
    """Killed between batch 0's merge and its first watermark: the replay is skipped, not refused as a stale table."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    batch = orders(spark, ("o1", 0, 100), ("o2", 40, 400))
    first = flow.batch_writer(ctx)
    first(flow.apply(batch, ctx=ctx), 0)
    # The state a kill left with earlier code, which saved the watermark apart after the MERGE (as a session
    # or join flow still does): the merge committed without it, the watermark (written last) never was.
    as_earlier_code(GOLD_REVENUE_PER_MINUTE.path(lake))
    assert not has_delta_log(spark, first.watermark_path)
    expected = {(T0, "EUR"): (100, 1), (T0 + timedelta(minutes=40), "EUR"): (400, 1)}

    # Any other batch finding those rows would count them again: refused, with what to do.
    with pytest.raises(StaleGoldTable, match="delete .* and run again"):
        flow.batch_writer(ctx)(flow.apply(orders(spark, ("o9", 41, 1)), ctx=ctx), 1)

    replay = flow.batch_writer(ctx)
    replay(flow.apply(batch, ctx=ctx), 0)
    assert revenue(spark, lake) == expected
    # It saved the watermark the first run would have: 40 - 10 = 30 minutes; a row at 20 minutes is late.
    replay(flow.apply(orders(spark, ("o3", 20, 50), ("o4", 41, 10)), ctx=ctx), 1)
    expected[(T0 + timedelta(minutes=41), "EUR")] = (10, 1)
    assert revenue(spark, lake) == expected
    late = spark.read.format("delta").load(LATE_ARRIVALS.path(lake))
    assert [r["event_id"] for r in late.collect()] == ["o3"]


def as_earlier_code(table: str) -> None:
    """Rewrite the table's newest commit as earlier code made it: no watermark (`saved`) in its userMetadata."""
    log_dir = Path(table, "_delta_log")
    newest = max(log_dir.glob("*.json"), key=lambda p: int(p.stem))
    lines = newest.read_text().splitlines()
    for n, line in enumerate(lines):
        action = json.loads(line)
        if "commitInfo" in action:
            record = json.loads(action["commitInfo"]["userMetadata"])
            assert record.pop("saved")
            action["commitInfo"]["userMetadata"] = json.dumps(record)
            lines[n] = json.dumps(action)
    newest.write_text("\n".join(lines) + "\n")
    (log_dir / f".{newest.name}.crc").unlink(missing_ok=True)   # the local file system's checksum of the old text


def late_ids(spark, lake: str) -> list[str]:
    return sorted(r["event_id"] for r in spark.read.format("delta").load(LATE_ARRIVALS.path(lake)).collect())


def cents_by_minute(spark, lake: str) -> dict:
    return {window: cents for (window, _currency), (cents, _orders) in revenue(spark, lake).items()}


def first_batches(spark, lake: str) -> tuple:
    """gold_revenue_per_minute's batch 0 (orders at 0, 5 and 40 minutes) and batch 1, all late (an order at 20).

    Batch 1 has nothing to MERGE, so it saves the watermark in the flow's watermark table, after batch 0
    saved it in the MERGE's commit. Returns the flow, its context and the writer.
    """
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    first = flow.batch_writer(ctx)
    first(flow.apply(orders(spark, ("o1", 0, 100), ("o2", 5, 200), ("o3", 40, 400)), ctx=ctx), 0)
    assert not has_delta_log(spark, first.watermark_path)
    first(flow.apply(orders(spark, ("o4", 20, 50), first_offset=3), ctx=ctx), 1)
    assert has_delta_log(spark, first.watermark_path)
    assert late_ids(spark, lake) == ["o4"]
    return flow, ctx, first


def test_the_watermark_is_read_from_its_commit_even_with_the_table_s_files_gone(spark, tmp_path):
    """With the watermark table's data files deleted, only the commit's record can give the watermark."""
    lake = str(tmp_path / "lake")
    flow, ctx, first = first_batches(spark, lake)
    data_files = list(Path(first.watermark_path).glob("*.parquet"))
    assert data_files
    for path in data_files:
        path.unlink()

    second = flow.batch_writer(ctx)
    # The watermark batch 1 left: 40 - 10 = 30 minutes; the order at 25 minutes is late, the one at 41 is not.
    second(flow.apply(orders(spark, ("o6", 25, 50), ("o5", 41, 10), first_offset=4), ctx=ctx), 2)
    assert late_ids(spark, lake) == ["o4", "o6"]
    expected = {T0 + timedelta(minutes=m): c for m, c in ((0, 100), (5, 200), (40, 400), (41, 10))}
    assert cents_by_minute(spark, lake) == expected
    assert second.stats.watermark_micros == int((T0 + timedelta(minutes=41 - 10)).timestamp()) * 1_000_000


def test_a_watermark_saved_without_its_record_is_read_from_the_table(spark, tmp_path):
    """A watermark committed by earlier code (no record in its commit) still holds: the table is read."""
    lake = str(tmp_path / "lake")
    flow, ctx, first = first_batches(spark, lake)
    saved = spark.read.format("delta").load(first.watermark_path)
    # Rewrite the same row as earlier code did: no userMetadata on the commit.
    saved.localCheckpoint().write.format("delta").mode("overwrite").save(first.watermark_path)

    second = flow.batch_writer(ctx)
    second(flow.apply(orders(spark, ("o6", 25, 50), ("o5", 41, 10), first_offset=4), ctx=ctx), 2)
    assert late_ids(spark, lake) == ["o4", "o6"]
    assert cents_by_minute(spark, lake)[T0 + timedelta(minutes=41)] == 10


def test_the_watermark_in_a_merge_s_commit_outlives_compaction(spark, tmp_path):
    """OPTIMIZE commits on top of the MERGE that holds the watermark: it is still found, and carried forward."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    first = flow.batch_writer(ctx)
    first(flow.apply(orders(spark, ("o1", 0, 100), ("o2", 5, 200)), ctx=ctx), 0)
    first(flow.apply(orders(spark, ("o3", 40, 400), first_offset=2), ctx=ctx), 1)
    target = GOLD_REVENUE_PER_MINUTE.path(lake)
    assert compact_table(spark, GOLD_REVENUE_PER_MINUTE, lake).status == "compacted"
    optimize = last_commit(spark, target)
    assert optimize.operation == "OPTIMIZE"
    assert json.loads(optimize.user_metadata)["saved"]["max_event_micros"] == int((T0 + timedelta(minutes=40)).timestamp()) * 10**6

    second = flow.batch_writer(ctx)
    # 40 - 10 = 30 minutes: the order at 25 minutes is late, the one at 41 is not.
    second(flow.apply(orders(spark, ("o4", 25, 50), ("o5", 41, 10), first_offset=3), ctx=ctx), 2)
    assert late_ids(spark, lake) == ["o4"]
    assert cents_by_minute(spark, lake) == {T0 + timedelta(minutes=m): c for m, c in ((0, 100), (5, 200), (40, 400), (41, 10))}
    assert not has_delta_log(spark, second.watermark_path)


def test_a_new_version_of_a_flow_does_not_take_the_watermark_of_the_rows_it_would_count_again(spark, tmp_path):
    """The old version's MERGE holds a watermark; a new version finds the old rows and refuses them, as before."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["gold_revenue_per_minute"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", gold_watermark="10 minutes")
    flow.batch_writer(ctx)(flow.apply(orders(spark, ("o1", 0, 100)), ctx=ctx), 0)
    newer = dataclasses.replace(flow, version=flow.version + 1)
    assert newer.app_id != flow.app_id
    with pytest.raises(StaleGoldTable, match="delete .* and run again"):
        newer.batch_writer(ctx)(newer.apply(orders(spark, ("o2", 1, 5), first_offset=1), ctx=ctx), 0)


BRONZE = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, partition int, "
          "offset long, timestamp timestamp, timestampType int")


def bronze_orders(spark, *rows, first_offset=0):
    """Bronze rows of valid orders (event id, minutes after T0), each sent when it occurred."""
    template = next(r for r in generate(2000, seed=5) if r.topic == shop.ORDERS.topic_spec.name and r.kind == "valid")
    out = []
    for offset, (event_id, minutes) in enumerate(rows, start=first_offset):
        at = T0 + timedelta(minutes=minutes)
        record = dataclasses.replace(template, event={**template.event, "event_id": event_id, "occurred_at": iso(at)})
        out.append((record.key, record.encode(at), [("schema", shop.ORDERS.topic_spec.name.encode())], record.topic, 0, offset,
                    at, 0))
    return to_bronze(spark.createDataFrame(out, BRONZE))


@pytest.fixture
def auto_compaction(spark):
    """Delta's auto compaction after every write of this session, however few files a table has."""
    keys = ("spark.databricks.delta.autoCompact.enabled", "spark.databricks.delta.autoCompact.minNumFiles")
    before = {k: spark.conf.get(k, None) for k in keys}
    spark.conf.set(keys[0], "true")
    spark.conf.set(keys[1], "1")
    yield
    for key, value in before.items():
        spark.conf.unset(key) if value is None else spark.conf.set(key, value)


@pytest.mark.parametrize("maintenance", [None, "nightly OPTIMIZE", "auto compaction"])
def test_a_silver_batch_replayed_after_its_append_lists_nothing_late_that_silver_holds(spark, tmp_path, request,
                                                                                      maintenance):
    """The first run of batch 0 appended every order to silver; its replay, by a new writer, must not find them late,
    also when silver was compacted in between (the nightly OPTIMIZE, or Delta's auto compaction after the append)."""
    lake = str(tmp_path / "lake")
    flow = BY_NAME["silver_orders"]
    ctx = FlowContext(lake_root=lake, kafka_bootstrap="unused:1", silver_dedup_watermark="10 minutes")
    if maintenance == "auto compaction":
        request.getfixturevalue("auto_compaction")

    def writer():   # as a stream's: each commit records the batch (streaming/positions.py)
        return flow.batch_writer(ctx).record_positions(flow.name, {"bronze_orders": 1})

    batch = bronze_orders(spark, ("o1", 0), ("o2", 5), ("o3", 40)).repartition(3)   # three files to compact
    writer()(flow.apply(batch, ctx=ctx), 0)

    def silver():   # read again each time: a loaded Delta DataFrame keeps the version it was loaded at
        return sorted(r["event_id"] for r in spark.read.format("delta").load(SILVER_ORDERS.path(lake)).collect())

    assert silver() == ["o1", "o2", "o3"]
    if maintenance == "nightly OPTIMIZE":
        assert compact_table(spark, SILVER_ORDERS, lake).status == "compacted"
    if maintenance is not None:
        assert last_commit(spark, SILVER_ORDERS.path(lake)).operation == "OPTIMIZE"   # silver's newest commit

    replay = writer()
    replay(flow.apply(batch, ctx=ctx), 0)
    late = LATE_ARRIVALS.path(lake)
    assert not has_delta_log(spark, late) or spark.read.format("delta").load(late).count() == 0
    assert silver() == ["o1", "o2", "o3"]

    # The next batch sees the watermark batch 0 left: 40 - 10 = 30 minutes; an order at 20 minutes is late.
    replay(flow.apply(bronze_orders(spark, ("o4", 20), ("o5", 41), first_offset=3), ctx=ctx), 1)
    assert silver() == ["o1", "o2", "o3", "o5"]
    assert [r["event_id"] for r in spark.read.format("delta").load(late).collect()] == ["o4"]
