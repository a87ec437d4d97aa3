"""Expectations where data moves: planted bad batches through the real broker and flows, and GX as the referee.

Expected figures come from the records the tests send (their Kafka coordinates as the broker acknowledged
them) and, for the evaluator, from Great Expectations' own validation of the same rows.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import timedelta

import great_expectations as gx
import great_expectations.expectations as gxe
import pytest
from pyspark.sql import Row

from lakehouse.quality.evaluate import evaluate
from lakehouse.quality.gate import Gate
from lakehouse.quality.report import build_data_docs, summarize
from lakehouse.quality.suites import Expectation, Suite, build_suites
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.runner import QualityStopped
from tests.integration.test_bad_input import START, encode, kafka, order, rows, run, send  # noqa: F401 - fixture
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

WARN_BIG = Expectation(gxe.ExpectColumnValuesToBeBetween(column="total_cents", max_value=100_000), "warn")
FAIL_BIG = Expectation(gxe.ExpectColumnValuesToBeBetween(column="total_cents", max_value=100_000), "fail")
ID_RULE = "expect_column_values_to_match_regex(order_id)"


def gated(tmp_path, kafka_bootstrap: str, *extra: Expectation) -> FlowContext:
    """A context whose gate checks silver_orders with the shop's suite plus `extra`."""
    suites = build_suites()
    shop = suites["silver_orders"]
    suites["silver_orders"] = Suite(shop.name, shop.table, (*shop.expectations, *extra))
    lake = str(tmp_path / "lake")
    gate = Gate(tables.QUALITY_RESULTS.path(lake), str(tmp_path / "quality"), suites=suites)
    return FlowContext(lake_root=lake, kafka_bootstrap=kafka_bootstrap, quality=gate)


def ranges(coords) -> str:
    """`topic/partition:first-last; ...` over the given coordinates: what the results table must say."""
    seen = defaultdict(list)
    for topic, partition, offset in coords:
        seen[(topic, partition)].append(offset)
    return "; ".join(f"{t}/{p}:{min(o)}-{max(o)}" for (t, p), o in sorted(seen.items()))


def results(spark, ctx, table: str) -> dict[str, Row]:
    found = spark.read.format("delta").load(tables.QUALITY_RESULTS.path(ctx.lake_root)).where(f"table = '{table}'")
    return {r.expectation: r for r in found.collect()}


def test_drop_rows_go_to_quarantine_named_after_the_rule_and_warn_rows_pass(spark, kafka, tmp_path):
    """One micro-batch: the odd id is quarantined under its rule, big orders pass with a recorded warning."""
    ctx = gated(tmp_path, kafka.kafka_bootstrap, WARN_BIG)
    good = [order(f"g-{i}", START + timedelta(seconds=i)) for i in range(10)]
    big = [order(f"big-{i}", START + timedelta(seconds=20 + i), lines=[
        {"product_id": "p-1", "quantity": 1, "unit_price_cents": 500_000}]) for i in range(2)]
    odd = order("odd", START + timedelta(seconds=30))
    odd["order_id"] = "X-17"
    coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in good + big + [odd]])
    run(spark, ctx, "bronze_orders", "silver_orders")

    quarantined = {(r.topic, r.partition, r.offset): (r.reason, r.detail)
                   for r in rows(spark, ctx, tables.QUARANTINE, "topic", "partition", "offset", "reason", "detail")}
    assert quarantined == {coords[-1]: (ID_RULE, f"breaks {ID_RULE}: order_id=X-17")}
    assert {r.event_id for r in rows(spark, ctx, shop.ORDERS.silver_table, "event_id")} == {p["event_id"] for p in good + big}

    found = results(spark, ctx, "silver_orders")
    assert set(found) == {e.name for e in build_suites()["silver_orders"].expectations} | {WARN_BIG.name}
    assert {name for name, r in found.items() if not r.success} == {ID_RULE, WARN_BIG.name}
    assert (found[ID_RULE].dropped, found[ID_RULE].unexpected_count) == (1, 1)
    assert (found[WARN_BIG.name].unexpected_count, found[WARN_BIG.name].element_count) == (2, 12)
    assert {r.offsets for r in found.values()} == {ranges(coords)}
    assert {(r.lane, r.batch_id, r.flow) for r in found.values()} == {("stream", 0, "silver_orders")}

    # The report: a summary row per table, and Data Docs that name the table and the failing rules.
    [summary] = summarize(spark, tables.QUALITY_RESULTS.path(ctx.lake_root))
    assert (summary.table, summary.batches, summary.failed_warn, summary.failed_fail, summary.dropped) == \
        ("silver_orders", 1, 1, 0, 1)
    index = build_data_docs(str(tmp_path / "quality"))
    assert index is not None and index.exists()
    pages = [p.read_text() for p in index.parent.rglob("validations/**/*.html")]
    assert len(pages) == 1
    assert "silver_orders" in pages[0] and "X-17" in pages[0]
    assert "expect_column_values_to_match_regex" in pages[0] or "match this regular expression" in pages[0]


def test_a_fail_rule_stops_the_query_before_the_batch_is_written(spark, kafka, tmp_path):
    """The breach names the rule and the batch's offsets; silver keeps only the earlier batch; the result is kept."""
    ctx = gated(tmp_path, kafka.kafka_bootstrap, FAIL_BIG)
    send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name,
                 [encode(order(f"ok-{i}", START + timedelta(seconds=i))) for i in range(5)])
    run(spark, ctx, "bronze_orders", "silver_orders")
    bad = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [
        encode(order("fine", START + timedelta(seconds=40))),
        encode(order("huge", START + timedelta(seconds=41), lines=[
            {"product_id": "p-1", "quantity": 3, "unit_price_cents": 90_000}])),
    ])
    run(spark, ctx, "bronze_orders")
    with pytest.raises(QualityStopped) as stopped:
        run(spark, ctx, "silver_orders")
    message = str(stopped.value)
    assert message.startswith(f"silver_orders: {FAIL_BIG.name} failed for 1 of 2 rows")
    assert "micro-batch 1 of flow silver_orders" in message and "nothing of this batch was written" in message
    for topic, partition, offset in bad:
        assert re.search(rf"{re.escape(topic)} partition {partition} offsets \d+-{offset}\b", message) or \
            re.search(rf"{re.escape(topic)} partition {partition} offsets {offset}-\d+", message), message
    assert {r.event_id for r in rows(spark, ctx, shop.ORDERS.silver_table, "event_id")} == {f"ok-{i}" for i in range(5)}
    failing = spark.read.format("delta").load(tables.QUALITY_RESULTS.path(ctx.lake_root)) \
        .where("NOT success").collect()
    assert [(r.expectation, r.batch_id, r.unexpected_count, r.offsets) for r in failing] == \
        [(FAIL_BIG.name, 1, 1, ranges(bad))]


def test_the_evaluator_agrees_with_great_expectations_own_validation(spark):
    """Nulls, duplicates, out-of-range values and a row condition: the same counts and verdicts as GX's engine."""
    data = [("a", 5, "EUR", 1, 2), ("b", None, "USD", 2, 2), ("b", 250, "XXX", 3, 1), (None, 7, None, 4, 9),
            ("c", -1, "EUR", None, 0), ("d", 40, "GBP", 5, 5), ("e", 41, "EUR", 6, None)]
    df = spark.createDataFrame(data, "id string, amount long, currency string, a long, b long")
    expectations = (
        Expectation(gxe.ExpectColumnValuesToNotBeNull(column="id"), "fail"),
        Expectation(gxe.ExpectColumnValuesToBeUnique(column="id"), "fail"),
        Expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=["id", "b"]), "warn"),
        Expectation(gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=100), "drop"),
        Expectation(gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=100, mostly=0.5), "warn"),
        Expectation(gxe.ExpectColumnValuesToBeInSet(column="currency", value_set=["EUR", "USD", "GBP"]), "warn"),
        Expectation(gxe.ExpectColumnValuesToMatchRegex(column="id", regex="^[a-c]$"), "warn"),
        Expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="a", column_B="b", or_equal=True), "warn"),
        Expectation(gxe.ExpectColumnValuesToNotBeNull(column="currency", row_condition="amount > 10",
                                                      condition_parser="spark"), "warn"),
    )
    suite = Suite("probe", "probe", expectations, row_level=True)
    ours = evaluate(df, suite)

    context = gx.get_context(mode="ephemeral")
    batch = context.data_sources.add_spark("probe").add_dataframe_asset("probe") \
        .add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    theirs = batch.validate(gx.ExpectationSuite("probe", expectations=[e.gx.copy() for e in expectations]),
                            result_format="SUMMARY")
    def same(ref, mine) -> bool:
        wanted = mine.expectation.gx.configuration
        theirs_kw = {k: v for k, v in ref.expectation_config.kwargs.items() if k != "batch_id"}
        return ref.expectation_config.type == wanted.type and \
            json.dumps(theirs_kw, sort_keys=True, default=str) == json.dumps(wanted.kwargs, sort_keys=True, default=str)

    assert len(theirs.results) == len(ours)
    for mine in ours:
        [ref] = [r for r in theirs.results if same(r, mine)]
        assert (mine.success, mine.unexpected_count) == (ref.success, ref.result["unexpected_count"]), \
            (mine.expectation.name, ref.result)
    assert any(not o.success for o in ours) and any(o.success for o in ours)


def test_gold_batches_are_validated_with_their_kafka_offsets(spark, kafka, tmp_path):
    """A gold flow's merge rows are checked per batch; a replayed gold run records what the silver rows covered."""
    ctx = gated(tmp_path, kafka.kafka_bootstrap)
    coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name,
                  [encode(order(f"r-{i}", START + timedelta(seconds=10 * i))) for i in range(6)])
    run(spark, ctx, "bronze_orders", "silver_orders", "gold_revenue_per_minute")
    found = results(spark, ctx, "gold_revenue_per_minute")
    assert set(found) == {e.name for e in build_suites()["gold_revenue_per_minute"].expectations}
    assert all(r.success for r in found.values())
    assert {r.offsets for r in found.values()} == {ranges(coords)}
    # One row per (window, currency) of the batch: six orders 10 s apart from 09:00:00 fill one minute.
    assert {r.element_count for r in found.values()} == {1}


def test_whole_table_rules_find_a_lost_record_an_orphan_payment_and_stale_data(spark, kafka, tmp_path):
    """Accounting holds after a run and breaks when a silver row vanishes; an orphan payment warns; freshness by age."""
    from delta.tables import DeltaTable

    from lakehouse.quality.table_checks import freshness, gold_accounting, references, silver_accounting

    ctx = gated(tmp_path, kafka.kafka_bootstrap)
    orders = [order(f"a-{i}", START + timedelta(seconds=i)) for i in range(6)]
    send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in orders + orders[:2]] + [b"{not json"])
    payment = {"event_id": "pay-1", "occurred_at": "2026-11-22T09:01:00Z", "sent_at": "2026-11-22T09:01:00Z",
               "payment_id": "pay-1", "order_id": "o-nowhere", "customer_id": "c-00001", "amount_cents": 300,
               "currency": "EUR", "status": "succeeded"}
    send(kafka.kafka_bootstrap, shop.PAYMENTS.topic, [encode(payment)])
    run(spark, ctx, "bronze_orders", "silver_orders", "bronze_payments", "silver_payments", "gold_revenue_per_minute")
    lake = ctx.lake_root

    before = silver_accounting(spark, shop.ORDERS, lake)
    assert before.passed, before.description
    assert {k: before.figures[k] for k in ("bronze", "silver", "quarantine", "duplicates", "unaccounted")} == \
        {"bronze": 9, "silver": 6, "quarantine": 1, "duplicates": 2, "unaccounted": 0}
    assert gold_accounting(spark, "gold_revenue_per_minute", lake).passed

    [rule] = shop.PIPELINE.references
    refs = references(spark, rule, lake)
    assert (refs.passed, refs.figures["orphans"], refs.figures["rows"], refs.severity) == (False, 1, 1, "warn")
    assert refs.description == "1 of 1 rows of silver_payments refer to a order_id silver_orders does not hold, e.g. pay-1"

    DeltaTable.forPath(spark, shop.ORDERS.silver_table.path(lake)).delete("event_id = 'a-3'")
    after = silver_accounting(spark, shop.ORDERS, lake)
    assert (after.passed, after.figures["unaccounted"]) == (False, 1)
    gold = gold_accounting(spark, "gold_revenue_per_minute", lake)
    assert (gold.passed, gold.figures["silver"], gold.figures["counted"]) == (False, 5, 6)

    assert freshness(spark, shop.ORDERS.silver_table, lake, 3600, now=START + timedelta(minutes=30)).passed
    assert not freshness(spark, shop.ORDERS.silver_table, lake, 3600, now=START + timedelta(hours=3)).passed


def test_a_backfill_checks_each_daily_partition_it_writes(spark, kafka, tmp_path):
    """The batch lane's results: one validation per event date the backfill writes, named by the date."""

    from lakehouse.batch.backfill import backfill_flow
    from lakehouse.streaming.flows import BY_NAME

    ctx = gated(tmp_path, kafka.kafka_bootstrap)
    days = [START, START + timedelta(days=1)]
    sent = [order(f"d{n}-{i}", day + timedelta(seconds=i)) for n, day in enumerate(days) for i in range(3)]
    coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in sent])
    run(spark, ctx, "bronze_orders")
    backfill_flow(spark, BY_NAME["silver_orders"], ctx, (START.date(), (START + timedelta(days=1)).date()))

    found = spark.read.format("delta").load(tables.QUALITY_RESULTS.path(ctx.lake_root)) \
        .where("lane = 'backfill' AND scope != 'whole table' AND scope IS NOT NULL").collect()
    by_day = defaultdict(set)
    for r in found:
        by_day[r.scope].add((r.expectation, r.element_count, r.offsets))
    assert set(by_day) == {d.date().isoformat() for d in days}
    per_day = {d.date().isoformat(): [c for p, c in zip(sent, coords) if p["occurred_at"][:10] == d.date().isoformat()]
               for d in days}
    for day, rules in by_day.items():
        assert {name for name, _, _ in rules} == {e.name for e in build_suites()["silver_orders"].expectations}
        assert {(n, o) for _, n, o in rules} == {(3, ranges(per_day[day]))}, day
    assert all(r.success for r in found)
