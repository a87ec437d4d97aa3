"""`lakehouse stream`'s triggers: a flow's own, else its layer's, else the stream's; unknown names are one sentence."""

from __future__ import annotations

import argparse

import pytest

from lakehouse.infra.settings import Settings, SettingsError
from lakehouse.cli.stream import cmd_stream
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.continuous import Supervisor
from lakehouse.streaming.flows import FLOWS


def test_a_flow_takes_its_own_trigger_else_its_layers_else_the_streams(tmp_path):
    ctx = FlowContext(lake_root=str(tmp_path), kafka_bootstrap="127.0.0.1:1")
    triggers = {"gold": "5 seconds", "silver": "3 seconds", "bronze_orders": "2 seconds", "gold_sessions": "1 minute"}
    supervisor = Supervisor(None, FLOWS, ctx, trigger="1 second", triggers=triggers, record_metrics=False)
    got = {f.name: supervisor.trigger_of(f) for f in FLOWS}
    for flow in FLOWS:
        expected = triggers.get(flow.name) or triggers.get(flow.target.layer) or "1 second"
        assert got[flow.name] == expected, flow.name
    # Each kind of answer occurs, so the rule above is not met by one value for all.
    assert {got["bronze_orders"], got["bronze_customers"], got["silver_orders"], got["gold_revenue_per_minute"],
            got["gold_sessions"]} == {"2 seconds", "1 second", "3 seconds", "5 seconds", "1 minute"}


def test_triggers_are_read_from_the_environment_and_a_bad_one_is_refused():
    assert Settings.from_env({"LAKEHOUSE_STREAM_TRIGGERS": "gold=5 seconds; bronze_orders=2 seconds"}).stream_triggers \
        == {"gold": "5 seconds", "bronze_orders": "2 seconds"}
    with pytest.raises(SettingsError, match="LAKEHOUSE_STREAM_TRIGGERS"):
        Settings.from_env({"LAKEHOUSE_STREAM_TRIGGERS": "gold=soon"})


def test_a_trigger_for_no_layer_or_flow_stops_the_command_before_spark_starts(tmp_path, capsys):
    settings = Settings(home=str(tmp_path), stream_triggers={"golden": "5 seconds"})
    assert cmd_stream(settings, argparse.Namespace(tables=[], no_dagster=True)) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: LAKEHOUSE_STREAM_TRIGGERS names golden, which is neither a layer") and "\n" == out[-1:]


def test_a_stream_with_more_queries_than_a_local_master_serves_is_told_so_in_one_sentence(monkeypatch):
    from lakehouse.cli.stream import QUERIES_PER_CORE, crowded, local_cores
    from lakehouse.streaming.continuous import query_count

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert [local_cores(m) for m in ("local", "local[3]", "local[*]", "local[4,2]", "spark://h:7077")] == \
        [1, 3, 2, 4, None]
    warning = crowded("local[*]", len(FLOWS))
    assert warning is not None and warning.startswith(f"{len(FLOWS)} queries share 2 cores (local[*])")
    assert warning.count(". ") == 0 and warning.endswith(".")
    # The orders path (3 flows) on the same two cores, a cluster, and the limit itself: nothing to say.
    assert crowded("local[*]", 3) is None
    assert crowded("spark://h:7077", len(FLOWS)) is None
    assert crowded("local[2]", 2 * QUERIES_PER_CORE) is None and crowded("local[2]", 2 * QUERIES_PER_CORE + 1)
    # With one query per topic the shop's 22 flows are 8 queries: what the cores serve, not the flows.
    assert query_count(FLOWS, False) == len(FLOWS) and query_count(FLOWS, True) == 8
    assert crowded("local[2]", query_count(FLOWS, True), len(FLOWS)) is None
    assert crowded("local[1]", 8, len(FLOWS)).startswith(f"8 queries (for {len(FLOWS)} flows) share 1 core (local[1])")


def test_auto_sizes_the_shop_on_two_cores_as_measured_and_shortens_triggers_with_more_cores():
    from lakehouse.streaming.continuous import stream_queries
    from lakehouse.streaming.trigger_sizing import QUERY_SHARE, fixed_cores, size_triggers

    per_flow = stream_queries(FLOWS, False)
    two = size_triggers(per_flow, cores=2, topics=5)
    # The triggers that kept all 22 flows up at 250 events/s on two cores (docs/performance.md, "Knobs").
    assert dict(two.layer_s) == {"bronze": 30, "silver": 30, "gold": 120} and two.fits
    assert two.fixed_cores <= QUERY_SHARE * 2 and two.events_per_s > 250
    # The next rung down would ask more than the share: the sizing took the shortest that fits.
    assert fixed_cores(per_flow, {"bronze": 20, "silver": 20, "gold": 80}) > QUERY_SHARE * 2
    wider = [size_triggers(per_flow, cores=c, topics=5) for c in (4, 8, 64)]
    assert [w.layer_s["silver"] for w in wider] == sorted((w.layer_s["silver"] for w in wider), reverse=True)
    assert wider[-1].layer_s == {"bronze": 1, "silver": 1, "gold": 4}
    assert [w.events_per_s for w in (two, *wider)] == sorted(w.events_per_s for w in (two, *wider))
    # The orders path alone: three queries on two cores.
    orders = size_triggers(stream_queries([f for f in FLOWS if f.name in (
        "bronze_orders", "silver_orders", "gold_revenue_per_minute")], False), cores=2, topics=1)
    assert dict(orders.layer_s) == {"bronze": 5, "silver": 5, "gold": 20} and orders.queries == 3


def test_one_query_per_topic_is_sized_by_the_flows_each_batch_writes():
    from lakehouse.streaming.continuous import stream_queries
    from lakehouse.streaming.trigger_sizing import size_triggers

    fused = stream_queries(FLOWS, True)
    assert len(fused) == 8 and sum(q.flows for q in fused) == len(FLOWS)
    sized = size_triggers(fused, cores=2, topics=5)
    assert sized.fits and sized.queries == 8 and sized.layer_s["silver"] >= 30


def test_a_trigger_set_by_hand_is_kept_and_counted_and_one_too_fast_is_said_to_fall_behind():
    from lakehouse.streaming.continuous import stream_queries
    from lakehouse.streaming.trigger_sizing import resolve

    set_by_hand = {"gold": "10 minutes", "silver": "10 minutes"}
    trigger, triggers, sizing = resolve("auto", set_by_hand, stream_queries(FLOWS, False, set_by_hand), 2, 5)
    assert triggers["gold"] == triggers["silver"] == "10 minutes" and set(sizing.layer_s) == {"bronze"}
    assert sizing.fits and sizing.layer_s["bronze"] < 30      # the slower layers leave room for bronze
    assert trigger == triggers["bronze"] == f"{sizing.layer_s['bronze']} seconds"
    assert sizing.sentence().startswith("triggers sized for 2 cores and 22 queries: bronze every")
    assert "sustains about" in sizing.sentence() and ". " not in sizing.sentence()
    fast = {"gold": "1 second"}
    _, triggers, sizing = resolve("AUTO", fast, stream_queries(FLOWS, False, fast), 2, 5)
    assert not sizing.fits and triggers["gold"] == "1 second"
    assert sizing.layer_s == {"bronze": 30, "silver": 30}      # sized as if gold were not there, not slowest
    assert "the stream will fall behind" in sizing.sentence() and sizing.events_per_s == 0
    # A duration is every flow's trigger, as before: nothing is sized.
    assert resolve("1 second", fast, stream_queries(FLOWS, False, fast), 2, 5) == ("1 second", fast, None)


def test_the_trigger_setting_takes_auto_or_a_duration():
    assert Settings.from_env({}).stream_trigger == "auto"
    assert Settings.from_env({"LAKEHOUSE_STREAM_TRIGGER": "2 seconds"}).stream_trigger == "2 seconds"
    with pytest.raises(SettingsError, match="use auto, or a Spark interval"):
        Settings.from_env({"LAKEHOUSE_STREAM_TRIGGER": "fast"})
