"""A lost or corrupt checkpoint: the flow resumes from the positions recorded with its Delta commits.

Two tests. The first runs a flow of the test's own over a plain Delta table (no Kafka), where every
micro-batch boundary is under control: a checkpoint lost after a batch that ended inside Delta's
initial snapshot, after a batch that stopped half way (its side table written, its target not),
a corrupt one, a replayed batch with the checkpoint intact, and a reset after a batch-lane swap.
The second runs the real bronze, silver and gold flows against the real broker, loses and corrupts
their checkpoints between two rounds of produced events, and compares every layer with plain Python.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.schemas import sources, tables, topics
from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import last_commit
from lakehouse.streaming.flows import BY_NAME, Flow
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.gold_steps import join_state_rows
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.positions import (
    REPLAY_FILE, RecordsPositions, commit_metadata, recorded_positions, reset_checkpoint,
)
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.streaming.sinks import append_once
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------- a flow of the test's own, over Delta

SRC = TableSpec("cp_source", "silver", "The test flow's source: ids appended in versions of several files.", ("id",))
MAIN = TableSpec("cp_main", "gold", "Every id the test flow read, appended once per batch.", ("id",))
SIDE = TableSpec("cp_side", "gold", "The even ids, appended before MAIN in each batch.", ("id",))
FILES = 4          # files per source version
PER_VERSION = 20   # ids per source version
CRASH: dict[str, int] = {}   # "before" or "between" -> the batch id in which the writer fails


class TwoTables(RecordsPositions):
    """Appends a batch's even ids to SIDE, then all its ids to MAIN (the batch's final write), once each."""

    def __init__(self, flow: Flow, ctx: FlowContext):
        self.app_id = flow.app_id
        self.main, self.side = MAIN.path(ctx.lake_root), SIDE.path(ctx.lake_root)
        self.stats = SimpleNamespace(rows_written=0)

    def __call__(self, batch, batch_id: int) -> None:
        if CRASH.get("before") == batch_id:
            raise RuntimeError(f"crash before batch {batch_id}")
        record = self.batch_record(batch.sparkSession, batch_id)
        append_once(batch.where("id % 2 = 0"), self.side, app_id=f"{record.txn_app_id}-side", batch_id=batch_id,
                    user_metadata=record.metadata())
        if CRASH.get("between") == batch_id:
            raise RuntimeError(f"crash in batch {batch_id}, after its side table")
        append_once(batch, self.main, app_id=record.txn_app_id, batch_id=batch_id,
                    user_metadata=record.metadata(final=True))


FLOW = Flow("cp_flow", SRC, MAIN, lambda df: df.select("id"), output="batch", writer=TwoTables, also_writes=(SIDE,))


def add_version(spark, ctx, version: int) -> None:
    ids = spark.range(version * PER_VERSION, (version + 1) * PER_VERSION).repartition(FILES)
    ids.write.format("delta").mode("append").save(SRC.path(ctx.lake_root))


def ids(spark, ctx, spec) -> list[int]:
    return [r.id for r in spark.read.format("delta").load(spec.path(ctx.lake_root)).select("id").collect()]


def assert_exact(spark, ctx, versions: int) -> None:
    main, side = ids(spark, ctx, MAIN), ids(spark, ctx, SIDE)
    assert len(main) == len(set(main)), "an id was written twice to the target"
    assert len(side) == len(set(side)), "an id was written twice to the side table"
    assert set(main) == set(range(versions * PER_VERSION))
    assert set(side) == {i for i in range(versions * PER_VERSION) if i % 2 == 0}


def position(spark, ctx) -> dict:
    found = recorded_positions(spark, MAIN.path(ctx.lake_root), FLOW.name)
    assert found is not None
    return found


def said(caplog, *words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and all(w in r.getMessage() for w in words)]


def test_a_flow_resumes_exactly_from_its_recorded_positions(spark, tmp_path, caplog):
    """Snapshot and mid-version positions, a half-written batch, a corrupt and a reset checkpoint: nothing twice, nothing lost."""
    caplog.set_level(logging.WARNING)
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap="127.0.0.1:1", max_files_per_trigger=2)
    checkpoint = Path(FLOW.checkpoint(ctx))
    for v in range(3):
        add_version(spark, ctx, v)
    CRASH.clear()

    # 1. The first run reads the table's initial snapshot, two files a batch; it fails before its third batch.
    CRASH["before"] = 2
    with pytest.raises(Exception, match="crash before batch 2"):
        run_flow(spark, FLOW, ctx)
    CRASH.clear()
    recorded = position(spark, ctx)
    assert recorded["batch"] == 1 and recorded["final"]
    pos = recorded["sources"][SRC.name]
    assert (pos["version"], pos["index"], pos["snapshot"]) == (2, 3, True)   # inside the snapshot: no startingVersion
    shutil.rmtree(checkpoint)
    run_flow(spark, FLOW, ctx)
    assert_exact(spark, ctx, 3)
    assert said(caplog, f"checkpoint of flow {FLOW.name} at {checkpoint} was missing", "resuming from the positions "
                "recorded in cp_main version", "file 3 of its snapshot at version 2")

    # 2. A batch ends inside a version; the next one writes its side table and fails before its target.
    add_version(spark, ctx, 3)
    first = position(spark, ctx)["batch"] + 1
    CRASH["between"] = first + 1
    with pytest.raises(Exception, match="after its side table"):
        run_flow(spark, FLOW, ctx)
    CRASH.clear()
    recorded = position(spark, ctx)
    assert recorded["batch"] == first and recorded["sources"][SRC.name]["index"] == 1   # files 0..1 of version 3
    shutil.rmtree(checkpoint)
    caplog.clear()
    run_flow(spark, FLOW, ctx)
    assert_exact(spark, ctx, 4)
    assert said(caplog, "was missing", f"batch {first + 1} did not record its last write, so it runs again")

    # 3. With the checkpoint intact, a batch that failed half way runs again and its side write is skipped.
    add_version(spark, ctx, 4)
    CRASH["between"] = position(spark, ctx)["batch"] + 1
    with pytest.raises(Exception, match="after its side table"):
        run_flow(spark, FLOW, ctx)
    CRASH.clear()
    run_flow(spark, FLOW, ctx)
    assert_exact(spark, ctx, 5)

    # 4. Garbage in the checkpoint's metadata: moved aside, rebuilt from the recorded positions.
    add_version(spark, ctx, 5)
    (checkpoint / "metadata").write_text("\x00garbage{")
    caplog.clear()
    run_flow(spark, FLOW, ctx)
    assert_exact(spark, ctx, 6)
    assert said(caplog, f"checkpoint of flow {FLOW.name} at {checkpoint} was corrupt", "moved it aside to")
    assert said(caplog, "was corrupt; resuming from the positions recorded in")
    assert list(checkpoint.parent.glob(f"{checkpoint.name}.corrupt-*"))

    # 4b. Garbage in the file that names the query a rebuilt checkpoint replays under: the same.
    (checkpoint / REPLAY_FILE).write_text("\x00garbage{")
    caplog.clear()
    run_flow(spark, FLOW, ctx)
    assert_exact(spark, ctx, 6)
    assert said(caplog, "was corrupt", f"its {REPLAY_FILE} file holds no batch number and query id", "moved it aside")

    # 5. The batch lane rewrites the target, records where the source stands and resets the checkpoint:
    #    a new checkpoint, whose batch ids restart at 0 under new txn app ids (else Delta would skip them).
    src_version = DeltaTable.forPath(spark, SRC.path(ctx.lake_root)).history(1).collect()[0]["version"]
    main = spark.read.format("delta").load(MAIN.path(ctx.lake_root)).localCheckpoint()
    (main.write.format("delta").mode("overwrite")
     .option("userMetadata", commit_metadata(FLOW.name, -1, {SRC.name: {"version": src_version + 1}}))
     .save(MAIN.path(ctx.lake_root)))
    assert reset_checkpoint(FLOW, ctx, spark)
    add_version(spark, ctx, 6)
    caplog.clear()
    run = run_flow(spark, FLOW, ctx)
    assert run.batches == 2
    assert_exact(spark, ctx, 7)
    assert said(caplog, "was missing", f"from version {src_version + 1}", "(a new checkpoint)")
    assert list(checkpoint.parent.glob(f"{checkpoint.name}.reset-*"))


# ---------------------------------------------------------------- the real flows, against the real broker

START = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
ROUND_ONE, ROUND_TWO = 450, 250
NAMES = ("bronze_orders", "bronze_payments", "silver_orders", "silver_payments", "gold_revenue_per_minute",
         "gold_order_payments")


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).replace(tzinfo=None)


def test_lost_and_corrupt_checkpoints_of_the_real_flows(spark, broker, tmp_path, caplog):
    """Bronze offsets exact, silver ids unique, gold equal to plain Python after checkpoints are deleted and corrupted."""
    caplog.set_level(logging.WARNING)
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    records = generate(ROUND_ONE + ROUND_TWO, seed=11, start=START, events_per_second=0.5, customers=20, products=10,
                       mix=Mix(duplicate=0.05, malformed=0.04))
    # Nothing is ever behind a watermark here, so gold does not depend on where the micro-batches end.
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap,
                      max_offsets_per_trigger=40, max_files_per_trigger=3, silver_dedup_watermark="1 day",
                      gold_watermark="1 day")
    flows = [BY_NAME[name] for name in NAMES]

    first = produce(records[:ROUND_ONE], bootstrap=broker.kafka_bootstrap)
    assert first.delivered == ROUND_ONE
    runs = {flow.name: run_flow(spark, flow, ctx) for flow in flows}
    assert runs["bronze_orders"].batches > 1 and runs["silver_orders"].batches > 1

    # Lose three checkpoints and corrupt two (metadata; the latest offsets file). As after a crash, the revenue
    # flow's last batch never happened (its one commit, the MERGE that also records its watermark, is gone), and
    # the join's last batch is unfinished (its final write, the watermark saved after its MERGE and state, is).
    for name in ("bronze_orders", "silver_orders", "gold_revenue_per_minute"):
        shutil.rmtree(BY_NAME[name].checkpoint(ctx))
    Path(BY_NAME["bronze_payments"].checkpoint(ctx), "metadata").write_text("not json")
    offsets = Path(BY_NAME["gold_order_payments"].checkpoint(ctx), "offsets")
    latest = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    latest.write_text("v1\n{garbage")
    revenue, join = BY_NAME["gold_revenue_per_minute"], BY_NAME["gold_order_payments"]
    for table in (revenue.target.path(ctx.lake_root), f"{ctx.lake_root}/gold/_state/{join.app_id}/watermark"):
        last = last_commit(spark, table)
        assert '"final":true' in last.user_metadata, f"{table}'s newest commit is not a batch's final write"
        log_dir = Path(table, "_delta_log")
        assert not list(log_dir.glob(f"{last.version:020d}.checkpoint*"))
        for name in (f"{last.version:020d}.json", f".{last.version:020d}.json.crc"):
            (log_dir / name).unlink(missing_ok=True)

    second = produce(records[ROUND_ONE:], bootstrap=broker.kafka_bootstrap)
    assert second.delivered == ROUND_TWO
    # A checkpoint holds offsets, not batch sizes: the second round reads what is new in one batch.
    whole = dataclasses.replace(ctx, max_offsets_per_trigger=0, max_files_per_trigger=0)
    for flow in flows:
        run_flow(spark, flow, whole)

    # The log says which flows resumed from where.
    for name, lost in (("bronze_orders", "missing"), ("silver_orders", "missing"),
                       ("gold_revenue_per_minute", "missing"), ("bronze_payments", "corrupt"),
                       ("gold_order_payments", "corrupt")):
        where = BY_NAME[name].checkpoint(ctx)
        assert said(caplog, f"checkpoint of flow {name} at {where} was {lost}; resuming from the positions recorded "
                    "in "), f"{name}: no resume in the log"
    assert said(caplog, "checkpoint of flow bronze_orders", "recorded in bronze_orders version", "partition 0 at offset")
    assert said(caplog, "checkpoint of flow gold_order_payments", "did not record its last write")

    deliveries = {**first.deliveries, **second.deliveries}
    by_index = {r.index: r for r in records}
    for entity in ("orders", "payments"):
        source = getattr(shop, entity.upper())
        topic = source.topic

        # Bronze: every produced record's Kafka coordinates, exactly once.
        got = [(r.topic, r.partition, r.offset) for r in spark.read.format("delta")
               .load(source.bronze_table.path(ctx.lake_root)).select("topic", "partition", "offset").collect()]
        want = {(d.topic, d.partition, d.offset) for d in deliveries.values() if d.topic == topic}
        assert len(got) == len(set(got)) and set(got) == want, f"bronze_{entity} is not the topic exactly once"

        # Silver: every valid event once; quarantine: every malformed record once.
        silver = [r.event_id for r in spark.read.format("delta")
                  .load(source.silver_table.path(ctx.lake_root)).select("event_id").collect()]
        valid = {r.event["event_id"] for r in records if r.kind == "valid" and r.topic == topic}
        assert len(silver) == len(set(silver)) and set(silver) == valid, f"silver_{entity} ids differ"
        quarantined = [(r.topic, r.partition, r.offset) for r in spark.read.format("delta")
                       .load(tables.QUARANTINE.path(ctx.lake_root)).where(F.col("topic") == topic)
                       .select("topic", "partition", "offset").collect()]
        malformed = {(d.topic, d.partition, d.offset) for i, d in deliveries.items()
                     if d.topic == topic and by_index[i].kind == "malformed"}
        assert len(quarantined) == len(set(quarantined)) and set(quarantined) == malformed

    # Gold: revenue per minute and currency over the valid orders, and the orders-payments join.
    orders = {r.event["event_id"]: r.event for r in records if r.kind == "valid" and r.topic == shop.ORDERS.topic}
    payments = {r.event["event_id"]: r.event for r in records
                if r.kind == "valid" and r.topic == shop.PAYMENTS.topic}
    revenue = defaultdict(lambda: [0, 0, 0])
    for o in orders.values():
        acc = revenue[(_ts(o["occurred_at"]).replace(second=0, microsecond=0), o["currency"])]
        acc[0] += o["total_cents"]
        acc[1] += 1
        acc[2] += sum(line["quantity"] for line in o["lines"])
    got = {(r.window_start, r.currency): [r.revenue_cents, r.orders, r.items] for r in spark.read.format("delta")
           .load(shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)).collect()}
    assert got == dict(revenue)

    pairs = {(o["order_id"], p["payment_id"]) for o in orders.values() for p in payments.values()
             if p["order_id"] == o["order_id"]
             and _ts(o["occurred_at"]) <= _ts(p["occurred_at"]) <= _ts(o["occurred_at"]) + timedelta(minutes=30)}
    joined = [(r.outcome, r.order_id, r.payment_id) for r in spark.read.format("delta")
              .load(shop.GOLD_ORDER_PAYMENTS.path(ctx.lake_root)).collect()]
    assert len(joined) == len(set(joined))
    assert {(o, p) for outcome, o, p in joined if outcome == "matched"} == pairs and pairs
    assert {outcome for outcome, _, _ in joined} == {"matched"}   # nothing expires under a one-day watermark
    state = f"{ctx.lake_root}/gold/_state/{BY_NAME['gold_order_payments'].app_id}"
    assert join_state_rows(spark, state) == len(orders) + len(payments)   # every side buffered once

    late = tables.LATE_ARRIVALS.path(ctx.lake_root)
    if DeltaTable.isDeltaTable(spark, late):
        assert spark.read.format("delta").load(late).count() == 0
