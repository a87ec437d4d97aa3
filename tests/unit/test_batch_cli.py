"""The batch lane's commands refuse mistakes in one sentence, and cover the tables downstream of the ones named."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lakehouse.batch.lineage import UnknownTable, batch_flows, with_downstream
from lakehouse.cli.main import main
from lakehouse.orchestration.location import reconcile_range
from lakehouse.streaming.flows import FLOWS


def test_downstream_of_silver_orders_is_every_table_that_reads_orders_in_run_order():
    names = [f.target.name for f in with_downstream(["silver_orders"])]
    readers = {f.target.name for f in FLOWS if "silver_orders" in {s.name for s in f.sources}}
    assert names[0] == "silver_orders" and set(names) == {"silver_orders"} | readers
    order = [f.target.name for f in FLOWS]
    assert names == sorted(names, key=order.index)


def test_downstream_of_a_dimension_includes_the_tables_that_look_it_up():
    names = {f.target.name for f in with_downstream(["silver_products"])}
    assert {"dim_products", "gold_category_revenue_per_minute", "gold_order_lines_enriched"} <= names


def test_every_batch_flow_reads_tables_not_kafka():
    assert all(f.target.layer != "bronze" for f in batch_flows(None))
    with pytest.raises(UnknownTable, match="bronze_orders is the log itself"):
        batch_flows(["bronze_orders"])
    with pytest.raises(UnknownTable, match="There is no table named gold_nope"):
        batch_flows(["gold_nope"])


def test_backfill_refuses_a_reversed_range_and_an_unknown_table(capsys):
    assert main(["backfill", "--from", "2026-11-22", "--to", "2026-11-20"]) == 2
    assert "--to 2026-11-20 comes before --from 2026-11-22" in capsys.readouterr().err
    assert main(["backfill", "--from", "2026-11-22", "--to", "2026-11-22", "--table", "gold_nope"]) == 2
    assert "There is no table named gold_nope" in capsys.readouterr().err
    assert main(["backfill", "--from", "22.11.2026", "--to", "2026-11-22"]) == 2
    assert "is not a date such as 2026-11-22" in capsys.readouterr().err


def test_replay_needs_exactly_one_starting_point(capsys):
    assert main(["replay", "silver_orders"]) == 2
    assert "one of the arguments" in capsys.readouterr().err
    assert main(["replay", "silver_orders", "--from-version", "3", "--from-offsets", "0=1"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    for bad in ("0:1", "0=-5", ","):
        assert main(["replay", "bronze_orders", "--from-offsets", bad]) == 2
        assert "is not partition=offset pairs" in capsys.readouterr().err


def test_nightly_reconciliation_covers_the_last_days_up_to_today():
    now = datetime(2026, 11, 22, 2, 30, tzinfo=timezone.utc)
    assert reconcile_range(now, 3) == ("2026-11-20", "2026-11-22")
    assert reconcile_range(now, 1) == ("2026-11-22", "2026-11-22")


def test_a_backfill_run_on_the_endpoint_moves_the_commands_progress_bar_and_writes_no_second_log_line(capsys):
    """The endpoint forwards the batch lane's lines of the step's own thread; the command hands them to its bar only."""
    import logging
    import threading

    from lakehouse.cli.batch import Bar
    from lakehouse.serving.remote_runs import _replay_record
    from lakehouse.serving.served_steps import _Forward

    sent: list[dict] = []
    batch_log = logging.getLogger("lakehouse.batch")
    forward, level = _Forward(sent.append), batch_log.level
    batch_log.addHandler(forward)
    batch_log.setLevel(logging.INFO)   # as the endpoint's logging is set up
    try:
        logging.getLogger("lakehouse.batch.backfill").info("backfill silver_orders 2026-11-22..2026-11-23: +0 ~0 -0 rows")
        other = threading.Thread(target=lambda: logging.getLogger("lakehouse.batch.backfill").info("another run's line"))
        other.start()
        other.join()
    finally:
        batch_log.removeHandler(forward)
        batch_log.setLevel(level)
    assert [m["record"][2] for m in sent] == ["backfill silver_orders 2026-11-22..2026-11-23: +0 ~0 -0 rows"]

    root_lines: list[str] = []
    root_handler = logging.Handler()
    root_handler.emit = lambda record: root_lines.append(record.getMessage())
    logging.getLogger().addHandler(root_handler)
    try:
        with Bar("lakehouse.batch.backfill", 2):
            for message in sent:
                _replay_record(*message["record"])
    finally:
        logging.getLogger().removeHandler(root_handler)
    assert "] 1/2 backfill silver_orders 2026-11-22..2026-11-23" in capsys.readouterr().err
    assert root_lines == []   # the endpoint wrote the line to the shared log file already
