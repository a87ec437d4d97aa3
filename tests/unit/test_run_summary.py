"""`lakehouse run`'s closing summary: every table the run brought up to date, whatever event it was recorded as."""

from __future__ import annotations

import argparse

import dagster as dg

from lakehouse.cli import main as cli
from lakehouse.infra.settings import Settings
from lakehouse.orchestration import runs


@dg.op
def _caught_up(context) -> None:
    """Log what the catch_up op logs for a new source: bronze materialized, silver and gold on no partition."""
    context.log_event(dg.AssetMaterialization("bronze_flights", metadata={"rows_written": 12, "delta_version": 1}))
    for table, rows in (("silver_flights", 11), ("gold_flight_delays", 3)):
        context.log_event(dg.AssetObservation(asset_key=table, metadata={"rows_written": rows,
                                                                         "partitions_touched": "none"}))
    context.log_event(dg.AssetObservation(asset_key="quarantine", metadata={"dagster/row_count": 1}))


@dg.job
def _catch_up() -> None:
    """A stand-in run of catch_up with the events above."""
    _caught_up()


def test_the_summary_lists_every_table_the_run_brought_up_to_date(monkeypatch, capsys, tmp_path):
    """Tables recorded as observations (their rows fall on no daily partition) are in the summary with their
    figures; the shared tables' breakdowns, which carry no run figures, are not."""
    result = _catch_up.execute_in_process()
    monkeypatch.setattr(runs, "catch_up", lambda settings, selection, command: result)
    code = cli.cmd_run(Settings(home=str(tmp_path)), argparse.Namespace(assets=["bronze_flights", "silver_flights",
                                                                                 "gold_flight_delays"]))
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[:3] == ["bronze_flights: rows_written=12, delta_version=1",
                         "silver_flights: rows_written=11, partitions_touched=none",
                         "gold_flight_delays: rows_written=3, partitions_touched=none"]
    assert lines[3] == f"run {result.run_id} of job catch_up (lakehouse ui shows it)" and len(lines) == 4
