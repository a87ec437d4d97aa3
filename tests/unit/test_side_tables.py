"""Quarantine and late arrivals show materializations: a run that adds rows to them records one."""

from __future__ import annotations

import dagster as dg

from lakehouse.orchestration import assets
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.streaming.gold_batches import GoldBatchStats
from lakehouse.streaming.runner import FlowRun
from lakehouse.streaming.silver_batches import SilverBatchStats


CTX = FlowContext(lake_root="/nowhere", kafka_bootstrap="x:1")


def _run(flow: str, silver: SilverBatchStats | None = None, gold: GoldBatchStats | None = None) -> FlowRun:
    run = FlowRun(flow=flow, table=flow)
    run.silver, run.gold = silver, gold
    return run


def test_a_run_that_added_rows_to_a_shared_table_materializes_it_and_one_that_did_not_observes_it(monkeypatch):
    monkeypatch.setattr(assets, "_side_table_metadata", lambda spark, table, root: {"dagster/row_count": 7})
    flows = [BY_NAME["silver_orders"], BY_NAME["gold_revenue_per_minute"]]
    quiet = [_run("silver_orders", SilverBatchStats(silver=5)), _run("gold_revenue_per_minute", gold=GoldBatchStats())]
    kinds = {e.asset_key.to_user_string(): type(e) for e in assets.side_events(None, flows, CTX, quiet)}
    assert kinds == {"quarantine": dg.AssetObservation, "late_arrivals": dg.AssetObservation}
    bad = [_run("silver_orders", SilverBatchStats(quarantined=2)), _run("gold_revenue_per_minute", gold=GoldBatchStats())]
    kinds = {e.asset_key.to_user_string(): type(e) for e in assets.side_events(None, flows, CTX, bad)}
    assert kinds == {"quarantine": dg.AssetMaterialization, "late_arrivals": dg.AssetObservation}
    late = [_run("gold_revenue_per_minute", gold=GoldBatchStats(late=1))]
    assert assets.written_sides(late) == {"late_arrivals"}
    assert assets.written_sides([_run("silver_orders", SilverBatchStats(late=1, quarantined=1))]) == {
        "late_arrivals", "quarantine"}


def test_a_streams_report_materializes_quarantine_and_late_arrivals_with_the_rows_each_flow_added():
    """`lakehouse stream`'s reports give quarantine and late_arrivals a materialization when a flow added rows."""
    from lakehouse.orchestration.streams import DagsterReporter
    from lakehouse.streaming.continuous import TableReport

    reports = [TableReport("silver_orders", "silver_orders", rows_written=9, quarantined=3, late=1),
               TableReport("gold_revenue_per_minute", "gold_revenue_per_minute", rows_written=2, late=2),
               TableReport("silver_payments", "silver_payments")]
    with dg.DagsterInstance.ephemeral() as instance:
        DagsterReporter(instance)(reports)
        newest = {name: instance.get_latest_materialization_event(dg.AssetKey(name))
                  for name in ("quarantine", "late_arrivals", "silver_payments")}
        assert newest["silver_payments"] is None          # caught up: observed, not materialized
        quarantine = newest["quarantine"].asset_materialization.metadata
        late = newest["late_arrivals"].asset_materialization.metadata
    assert quarantine["rows_written"].value == 3 and quarantine["by_flow"].value == {"silver_orders": 3}
    assert late["rows_written"].value == 3
    assert late["by_flow"].value == {"silver_orders": 1, "gold_revenue_per_minute": 2}
    # Nothing added: no event for either.
    with dg.DagsterInstance.ephemeral() as instance:
        DagsterReporter(instance)([TableReport("silver_orders", "silver_orders", rows_written=4)])
        assert instance.get_latest_materialization_event(dg.AssetKey("quarantine")) is None
