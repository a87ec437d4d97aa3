"""The batch lane against the stream: backfill, verify and reconciliation over one real log that crosses midnight.

Two waves of shop events go to the real broker; after each, every flow catches up. The first wave has
no gold-late events (each gold flow reads it in one batch); the second sends events stamped 15-40
minutes back, behind the gold watermark that the first wave moved, so gold flows send them to
late_arrivals. Results are checked against plain Python over the produced events where a figure has
an independent definition (silver ids, revenue per minute), and against the stream's own tables for
"a backfill changes nothing that was right" (a second backfill after the reconciliation).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timezone
from itertools import islice

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.batch.backfill import backfill, backfill_flow
from lakehouse.batch.lineage import batch_flows
from lakehouse.batch.verify import verify
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import FLOWS
from lakehouse.pipelines.shop.generator import Mix, ShopGenerator
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 23, 50, tzinfo=timezone.utc)   # the log crosses midnight: two daily partitions
DAYS = (date(2026, 11, 22), date(2026, 11, 23))
WAVE = 500
PARALLEL = 3    # flows at once, as the project's default catch-up and `lakehouse verify` run them


def _minute(iso_ts: str) -> datetime:
    ts = datetime.fromisoformat(iso_ts.replace("Z", "+00:00")).astimezone(timezone.utc).replace(tzinfo=None)
    return ts.replace(second=0, microsecond=0)


def _catch_up(spark, ctx):
    outcomes = list(run_flows(spark, FLOWS, ctx, parallel=PARALLEL, one_query_per_topic=True))   # as a catch-up does
    assert not [o for o in outcomes if o.error], [(o.flow.name, o.error) for o in outcomes if o.error]
    return {o.flow.name: o.run for o in outcomes}


def _versions(spark, ctx):
    return {f.target.name: DeltaTable.forPath(spark, f.target.path(ctx.lake_root)).history(1).first()["version"]
            for f in batch_flows(None) if DeltaTable.isDeltaTable(spark, f.target.path(ctx.lake_root))}


@pytest.fixture(scope="module")
def lane(spark, broker, tmp_path_factory):
    """Wave one, caught up; the test module drives the rest in order."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    shop = ShopGenerator(seed=5, start=START, events_per_second=0.6, dimension_changes=0.02,
                         mix=Mix(late=0.0, duplicate=0.03, malformed=0.03, out_of_order=0.03))
    gen = iter(shop)
    ctx = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap,
                      max_offsets_per_trigger=150)
    first = list(islice(gen, WAVE))
    assert produce(first, bootstrap=broker.kafka_bootstrap).failed == 0
    _catch_up(spark, ctx)
    return {"ctx": ctx, "gen": gen, "shop": shop, "records": first}


def test_verify_explains_every_late_difference_and_reconciliation_removes_them(spark, broker, lane):
    """After a wave with late events: verify names late arrivals as the cause; a backfill folds them in; verify is clean."""
    ctx, gen = lane["ctx"], lane["gen"]
    lane["shop"].mix = Mix(late=0.08, duplicate=0.03, malformed=0.03, out_of_order=0.03)
    second = list(islice(gen, WAVE))
    assert produce(second, bootstrap=broker.kafka_bootstrap).failed == 0
    _catch_up(spark, ctx)
    records = lane["records"] + second

    late = spark.read.format("delta").load(tables.LATE_ARRIVALS.path(ctx.lake_root))
    late_flows = {r["flow"] for r in late.select("flow").distinct().collect()}
    assert "gold_revenue_per_minute" in late_flows

    verdicts = {v.table: v for v in verify(spark, ctx, parallel=PARALLEL)}
    assert not [v for v in verdicts.values() if v.status == "discrepant"], \
        {t: v.discrepancies.samples[:3] for t, v in verdicts.items() if v.status == "discrepant"}
    revenue = verdicts["gold_revenue_per_minute"]
    assert revenue.status == "explained" and revenue.explained > 0 and revenue.late_events > 0
    for v in verdicts.values():
        if v.status == "explained":
            assert v.late_events > 0 and v.explained == v.diff.differences

    # Each table's verdict after the backfill comes from the same recomputation (a separate verify gives the same
    # verdict: the last test of this module), which saves recomputing all 22 flows a second time.
    changes = {c.table: c for c in backfill(spark, ctx, DAYS, run_id="nightly", catch_up=False, parallel=PARALLEL,
                                            verify=True)}
    assert changes["gold_revenue_per_minute"].late_absorbed == revenue.late_events
    assert changes["gold_revenue_per_minute"].changed + changes["gold_revenue_per_minute"].added > 0

    after = [c.verdict for c in changes.values()]
    assert set(changes) == set(verdicts) and all(v is not None for v in after)
    assert len([c for c in changes.values() if c.version is not None]) >= 15, sorted(changes)
    assert all(v.status == "clean" for v in after), [(v.table, v.status) for v in after if v.status != "clean"]

    # Independently of the code under test: revenue per minute now counts every valid order, late ones too.
    expected: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    seen = set()
    for r in records:
        if r.topic != shop.ORDERS.topic_spec.name or r.kind not in ("valid",) or r.event is None:
            continue
        e = r.event
        if e["event_id"] in seen:
            continue
        seen.add(e["event_id"])
        key = (_minute(e["occurred_at"]), e["currency"])
        expected[key][0] += e["total_cents"]
        expected[key][1] += 1
    got = {(r["window_start"], r["currency"]): [r["revenue_cents"], r["orders"]]
           for r in spark.read.format("delta").load(shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)).collect()}
    assert got == dict(expected)

    # Run twice, same tables: the second backfill (orders, a dimension and every table that reads them) finds each
    # equal to its recomputation and writes nothing.
    versions = _versions(spark, ctx)
    again = backfill(spark, ctx, DAYS, ["silver_orders", "dim_products"], run_id="again", catch_up=False,
                     parallel=PARALLEL)
    assert {"silver_orders", "dim_products", "gold_revenue_per_minute", "gold_order_lines_enriched"} <= \
        {c.table for c in again}
    assert all((c.added, c.changed, c.removed, c.late_absorbed) == (0, 0, 0, 0) and not c.rewritten for c in again)
    assert _versions(spark, ctx) == versions


def test_verify_reports_a_planted_difference_row_by_row(spark, lane):
    """A gold row changed behind the stream's back is a real discrepancy, named with its key and both values."""
    ctx = lane["ctx"]
    path = shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)
    target = spark.read.format("delta").load(path).orderBy("window_start").first()
    DeltaTable.forPath(spark, path).update(
        (F.col("window_start") == F.lit(target["window_start"])) & (F.col("currency") == target["currency"]),
        {"revenue_cents": F.col("revenue_cents") + 1})
    [verdict] = verify(spark, ctx, ["gold_revenue_per_minute"])
    assert verdict.status == "discrepant" and verdict.real == 1
    [row] = verdict.discrepancies.samples
    assert row["kind"] == "changed" and row["columns"] == ["revenue_cents"]
    assert row["stream"]["revenue_cents"] == target["revenue_cents"] + 1
    assert row["batch"]["revenue_cents"] == target["revenue_cents"]

    # Backfilling only the planted row's day puts it right and leaves the other day's partition alone.
    day = target["window_start"].date()
    other = [d for d in DAYS if d != day][0]
    untouched = spark.read.format("delta").load(path).where(F.to_date("window_start") == F.lit(other)).collect()
    [change] = [c for c in backfill(spark, ctx, (day, day), ["gold_revenue_per_minute"], run_id="fix", catch_up=False)]
    assert (change.changed, change.added, change.removed) == (1, 0, 0)
    assert spark.read.format("delta").load(path).where(F.to_date("window_start") == F.lit(other)).collect() == untouched
    [verdict] = verify(spark, ctx, ["gold_revenue_per_minute"])
    assert verdict.status == "clean"


def test_a_backfill_asked_to_verify_gives_the_verdict_a_separate_verify_gives_after_it(spark, lane):
    """The verdict a backfill computes from its own recomputation covers the whole table after its write."""
    ctx = lane["ctx"]
    [flow] = [f for f in FLOWS if f.target.name == "gold_revenue_per_minute"]
    path = flow.target.path(ctx.lake_root)
    rows = spark.read.format("delta").load(path).orderBy("window_start").collect()
    planted = {day: next(r for r in rows if r["window_start"].date() == day) for day in DAYS}
    for row in planted.values():
        DeltaTable.forPath(spark, path).update(
            (F.col("window_start") == F.lit(row["window_start"])) & (F.col("currency") == row["currency"]),
            {"orders": F.col("orders") + 7})
    fixed, left = DAYS

    change = backfill_flow(spark, flow, ctx, (fixed, fixed), run_id="fix-one", catch_up=False, verify=True)
    assert (change.changed, change.added, change.removed) == (1, 0, 0)
    # After the write the fixed day matches; the other day's planted row is still a real discrepancy.
    verdict = change.verdict
    assert verdict is not None and verdict.status == "discrepant" and verdict.real == 1
    [sample] = verdict.discrepancies.samples
    assert sample["key"] == {"window_start": planted[left]["window_start"].isoformat(), "currency": planted[left]["currency"]}
    assert sample["stream"]["orders"] == planted[left]["orders"] + 7 and sample["batch"]["orders"] == planted[left]["orders"]

    [separate] = verify(spark, ctx, ["gold_revenue_per_minute"])
    assert (separate.status, separate.real, separate.explained, separate.late_events) == \
        (verdict.status, verdict.real, verdict.explained, verdict.late_events)
    assert (separate.diff.differences, separate.diff.stream_rows, separate.diff.batch_rows) == \
        (verdict.diff.differences, verdict.diff.stream_rows, verdict.diff.batch_rows)

    again = backfill_flow(spark, flow, ctx, (left, left), run_id="fix-other", catch_up=False, verify=True)
    assert again.changed == 1 and again.verdict.status == "clean"
