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


def test_the_triggers_the_warning_proposes_are_a_valid_setting():
    from lakehouse.infra.settings import Settings
    from lakehouse.cli.stream import SIZED_TRIGGERS

    name, value = SIZED_TRIGGERS.split("=", 1)
    triggers = Settings.from_env({name: value.strip("'")}).stream_triggers
    assert dict(triggers) == {"bronze": "30 seconds", "silver": "30 seconds", "gold": "120 seconds"}
