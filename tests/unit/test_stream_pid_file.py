"""`lakehouse status` finds the running stream and the flows it runs from the stream's PID file."""

from __future__ import annotations

import os

from lakehouse.infra.settings import Settings
from lakehouse.cli.stream import pid_file, running_stream, streamed_flows, streamed_triggers


def test_the_pid_file_names_the_process_and_its_flows(tmp_path):
    settings = Settings(home=str(tmp_path))
    pid_file(settings).write_text(f"{os.getpid()}\nbronze_orders silver_orders\n")
    assert running_stream(settings) == os.getpid()
    assert streamed_flows(settings) == ["bronze_orders", "silver_orders"] and streamed_triggers(settings) == {}
    # Since the triggers are sized, the third line has each flow's, for `lakehouse status`'s freshness.
    pid_file(settings).write_text(f"{os.getpid()}\nbronze_orders silver_orders\nbronze_orders=30 silver_orders=2.5\n")
    assert streamed_flows(settings) == ["bronze_orders", "silver_orders"]
    assert streamed_triggers(settings) == {"bronze_orders": 30.0, "silver_orders": 2.5}
    pid_file(settings).write_text(f"{os.getpid()}\nbronze_orders\nbronze_orders=soon\n")
    assert streamed_triggers(settings) == {} and streamed_flows(settings) == ["bronze_orders"]


def test_a_pid_file_of_the_older_form_or_a_dead_process_reads_as_no_flows_or_no_stream(tmp_path):
    settings = Settings(home=str(tmp_path))
    assert running_stream(settings) is None and streamed_flows(settings) == []
    pid_file(settings).write_text(str(os.getpid()))
    assert running_stream(settings) == os.getpid() and streamed_flows(settings) == []
    pid_file(settings).write_text("")
    assert running_stream(settings) is None
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    pid_file(settings).write_text(f"{dead}\nbronze_orders\n")
    assert running_stream(settings) is None
