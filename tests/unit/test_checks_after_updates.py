"""Table checks run after each materialization that changes their table, not only from the hand-run job."""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.location import build_definitions
from lakehouse.orchestration.quality_checks import AUTOMATION_SENSOR


def _requested(result) -> set[tuple[str, str]]:
    """(table, check) of every check Dagster's evaluation of the automation conditions requested."""
    return {(r.key.asset_key.to_user_string(), r.key.name) for r in result.results
            if isinstance(r.key, dg.AssetCheckKey) and r.true_subset.size}


def test_a_materialization_requests_its_tables_checks_and_only_those(tmp_path):
    defs = build_definitions(Settings(home=str(tmp_path)))
    assert defs.resolve_sensor_def(AUTOMATION_SENSOR).default_status == dg.DefaultSensorStatus.RUNNING
    instance = dg.DagsterInstance.ephemeral()
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert _requested(first) == set()          # nothing changed yet: no check is requested
    today = datetime.now(timezone.utc).date().isoformat()
    instance.report_runless_asset_event(dg.AssetMaterialization("silver_orders", partition=today))
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(after) == {("silver_orders", "accounting"), ("silver_orders", "freshness"),
                                 ("silver_orders", "matches_batch")}
    # Evaluated again with nothing new: not requested twice.
    again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=after.cursor)
    assert _requested(again) == set()


def test_the_catch_up_pins_each_expectations_result_to_the_materialization_it_follows(monkeypatch):
    """The `expectations` result is logged after the table's materialization (Dagster pins a check's result to the
    newest materialization), also by a run that had no new batch to validate: no "Not evaluated" beside it."""
    from lakehouse.orchestration import catch_up
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.flows import BY_NAME
    from lakehouse.streaming.parallel_runs import Outcome
    from lakehouse.streaming.runner import FlowRun

    flow = BY_NAME["dim_products"]
    caught = catch_up._Caught(FlowRun(flow=flow.name, table=flow.target.name), {"rows_written": 0}, None)
    monkeypatch.setattr(catch_up, "run_flows", lambda *a, **k: iter([Outcome(flow, run=caught)]))
    monkeypatch.setattr(catch_up, "side_events", lambda *a: [])

    @dg.op
    def step(context) -> None:
        catch_up._run_flows(context, None, FlowContext(lake_root="/nowhere", kafka_bootstrap="x:1"), [flow], {}, {},
                            [], checked={flow.target.name})

    @dg.job
    def run() -> None:
        step()

    result = run.execute_in_process()
    kinds = [e.event_type_value for e in result.all_events
             if e.event_type_value in ("ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION")]
    assert kinds == ["ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"]
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.check_name == "expectations" and check.asset_key == dg.AssetKey("dim_products")
