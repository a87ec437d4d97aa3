"""`lakehouse stream`'s triggers: a flow's own, else its layer's, else the stream's; unknown names are one sentence."""

from __future__ import annotations

import argparse

import pytest

from infra.settings import Settings, SettingsError
from orchestration.stream_cli import cmd_stream
from streaming.context import FlowContext
from streaming.continuous import Supervisor
from streaming.flows import FLOWS


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
