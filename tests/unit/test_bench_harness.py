"""The benches' harness: its pure logic only (no broker, no Spark, no timings asserted)."""

from __future__ import annotations

import dataclasses

import pytest

from bench import harness, run


def test_round_order_swaps_two_sides_each_round():
    assert harness.round_order(["a", "b"], 0) == ["a", "b"]
    assert harness.round_order(["a", "b"], 1) == ["b", "a"]
    assert harness.round_order(["a", "b"], 2) == ["a", "b"]


def test_round_order_puts_each_of_three_sides_first_once_in_three_rounds():
    orders = [harness.round_order(["a", "b", "c"], r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert {o[0] for o in orders} == {"a", "b", "c"}
    assert harness.round_order([], 3) == []


def test_alternate_warms_up_each_side_then_rotates_the_first_side():
    calls = []

    def side(name):
        return lambda label: calls.append(label) or {"seconds": 1.0, "n": name}

    runs = harness.alternate({"a": side("a"), "b": side("b")}, 3)
    assert calls == ["warm-up-a", "warm-up-b", "round1-a", "round1-b", "round2-b", "round2-a", "round3-a", "round3-b"]
    assert [r["round"] for r in runs["a"]] == [1, 2, 3]
    assert [r["position"] for r in runs["a"]] == [1, 2, 1]
    assert all(r["seconds"] == 1.0 and r["n"] == "a" for r in runs["a"])


def test_alternate_times_a_side_that_does_not_time_itself():
    runs = harness.alternate({"a": lambda label: None}, 1, warm_up=False)
    assert runs["a"][0]["seconds"] == runs["a"][0]["wall_s"] >= 0


def test_median_ratio_is_the_median_of_the_rounds_ratios_not_the_ratio_of_medians():
    a, b = [10.0, 30.0, 100.0], [10.0, 10.0, 1000.0]      # ratios 1, 3, 0.1
    assert harness.median_ratio(a, b) == 1.0
    assert 30.0 / 10.0 != harness.median_ratio(a, b)      # what the ratio of the medians would say
    with pytest.raises(ValueError):
        harness.median_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        harness.median_ratio([], [])


def test_linear_fit_finds_slope_intercept_and_r2():
    fit = harness.linear_fit([100, 200, 400], [12.0, 22.0, 42.0])
    assert fit.slope == pytest.approx(0.1)
    assert fit.intercept == pytest.approx(2.0)
    assert fit.r2 == pytest.approx(1.0)
    assert all(abs(r) < 1e-9 for r in fit.residuals)
    assert fit.predict(1000) == pytest.approx(102.0)
    bent = harness.linear_fit([1, 2, 3], [1.0, 4.0, 9.0])
    assert bent.r2 < 1.0 and max(abs(r) for r in bent.residuals) > 0.1


def test_linear_fit_through_two_points_has_no_r2():
    fit = harness.linear_fit([1000, 4000], [5.0, 11.0])
    assert fit.r2 is None
    assert fit.as_dict()["slope_us_per_event"] == pytest.approx(2000.0)
    with pytest.raises(ValueError):
        harness.linear_fit([5, 5], [1.0, 2.0])


def test_docs_row_is_one_markdown_row_with_escaped_pipes():
    row = harness.docs_row("2026-11-23 10:00", "`python -m bench.ingest`", "a | b", "two\nlines")
    assert row == "| 2026-11-23 10:00 | `python -m bench.ingest` | a \\| b | two lines |\n"
    assert row.count(" | ") == 3


def test_publish_records_only_when_asked_and_prints_the_json_otherwise(capsys, monkeypatch):
    written = []
    monkeypatch.setattr(harness, "record", lambda name, result, row: written.append((name, row)))
    result = {"bench": "x", "figure": 1.5}
    harness.publish("x", result, "the summary", lambda r: f"| {r['figure']} |\n", keep=False)
    out = capsys.readouterr().out
    assert out.startswith("\nthe summary\n") and '"figure": 1.5' in out and written == []
    harness.publish("x", result, "the summary", lambda r: f"| {r['figure']} |\n", keep=True)
    assert written == [("x", "| 1.5 |\n")] and '"figure"' not in capsys.readouterr().out


def test_record_writes_the_json_in_the_state_folder_prints_the_row_and_leaves_the_docs_alone(tmp_path, monkeypatch,
                                                                                              capsys):
    import json

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    docs = harness.TABLE_MD.read_bytes()
    row = harness.docs_row("2026-11-29 10:00", "`python -m bench.x`", "setup", "before", "after", "1.5x", "here")
    path = harness.record("x", {"bench": "x", "figure": 1.5}, row)
    assert path == tmp_path / "home" / "bench" / "results" / "x.json"
    assert json.loads(path.read_text()) == {"bench": "x", "figure": 1.5}
    out = capsys.readouterr().out
    assert str(path) in out
    assert out.index(harness.HEADER) < out.index(row)             # the row, under the names of its columns
    assert harness.HEADER.splitlines()[0].count(" | ") == row.count(" | ")
    assert harness.TABLE_MD.read_bytes() == docs                  # docs/benchmarks.md is updated by hand only
    harness.record("x", {"bench": "x", "figure": 2.0}, row)
    assert json.loads(path.read_text())["figure"] == 2.0           # the latest run's, not an accumulation


def test_results_go_to_the_state_folder_by_default_not_into_the_checkouts_bench_folder(monkeypatch):
    from pathlib import Path

    from lakehouse.infra.settings import Settings

    monkeypatch.delenv("LAKEHOUSE_HOME", raising=False)
    found = harness.results_dir()
    assert found == Path(Settings.from_env().home) / "bench" / "results"
    assert harness.ROOT / "bench" not in (found, *found.parents)


def test_no_bench_writes_into_the_docs_or_a_results_folder_of_the_checkout():
    """The benches that write their JSON themselves (compaction) must not go back to the files git tracks."""
    import re
    from pathlib import Path

    for path in sorted(Path(harness.__file__).parent.glob("*.py")):
        text = path.read_text()
        assert not re.search(r'ROOT\s*/\s*"bench"\s*/\s*"results"', text), path.name
        assert not re.search(r"TABLE_MD\.(open|write_text|write_bytes)\(", text), path.name


def test_previous_reads_the_last_recorded_run_back_and_copes_with_none(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    assert harness.previous("x") is None                           # no run recorded on this machine yet
    path = harness.record("x", {"bench": "x", "figure": 1.5}, "| row |\n")
    assert harness.previous("x") == {"bench": "x", "figure": 1.5}
    path.write_text("{not json")
    assert harness.previous("x") is None


def test_freshness_keeps_the_other_scopes_of_the_last_recorded_run_when_there_is_one(tmp_path, monkeypatch):
    from bench import freshness

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    assert freshness.with_scope("floor", {"p99": 3.8}) == {"latest": "floor", "scopes": {"floor": {"p99": 3.8}}}
    harness.record(freshness.NAME, {"latest": "all", "scopes": {"all": {"p99": 172.8}, "floor": {"p99": 9.9}}},
                   "| row |\n")
    assert freshness.with_scope("floor", {"p99": 3.8}) == {
        "latest": "floor", "scopes": {"all": {"p99": 172.8}, "floor": {"p99": 3.8}}}
    (harness.results_dir() / f"{freshness.NAME}.json").write_text('{"latest": "all"}')     # no scopes in it
    assert freshness.with_scope("all", {"p99": 1.0}) == {"latest": "all", "scopes": {"all": {"p99": 1.0}}}


def test_bench_ports_are_the_benches_own():
    assert (harness.KAFKA_PORT, harness.KAFKA_CONTROLLER_PORT) == (19400, 19401)


def test_run_lists_the_benches_and_refuses_an_unknown_one(capsys):
    assert run.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("ingest", "pipeline", "growth"):
        assert name in out
    assert run.main(["nonesuch"]) == 2
    assert "nonesuch" in capsys.readouterr().err


def test_ingest_profile_reports_each_step_as_its_share_of_the_bronze_flows_time():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from bench import ingest

    orders = SimpleNamespace(name="shop.orders.v1", partitions=3)   # what summarize reads of the topic's spec
    seconds = {"bronze": [10.0, 12.0, 8.0], "bare": [8.0, 9.0, 6.0], "bare_capped": [9.0, 9.5, 7.0],
               "bare_headers": [8.5, 9.6, 6.4],
               "bronze_query": [9.0, 10.8, 7.0], "raw": [2.0, 2.0, 2.0]}
    runs = {side: [{"seconds": s, "in_batches_s": s - 1, "batches": 1, "records": 1000, "bytes": 10,
                    "peak_rss_mib": {"spark_driver": 1.0}} for s in times] for side, times in seconds.items()}
    result = ingest.summarize(runs, events=1000, rounds=3, topic=orders,
                              started_at=datetime(2026, 11, 23, tzinfo=timezone.utc), where="here", memory_method={})
    for side in ("bare_capped", "bare_headers", "bronze_query", "bare"):
        shares = [round(x / b, 3) for x, b in zip(seconds[side], seconds["bronze"])]
        assert result["profile"][side]["of_bronze_per_round"] == shares
        assert result["profile"][side]["median_of_bronze"] == round(sorted(shares)[1], 3)
    assert "(p2) bronze's query alone" in ingest.summary(result)
    assert "a/p0 0.875 (rounds [0.9, 0.792, 0.875])" in ingest.summary(result)
    assert "(p1) bare + headers" in ingest.docs_row({**result, "command": "python -m bench.ingest --profile"})
    runs = {side: runs[side] for side in ingest.SIDES}      # without --profile: no profile section
    assert "profile" not in ingest.summarize(runs, events=1000, rounds=3, topic=orders,
                                             started_at=datetime(2026, 11, 23, tzinfo=timezone.utc), where="here",
                                             memory_method={})


def test_a_lakehouse_process_a_bench_starts_imports_the_benchs_checkout_first():
    """A worktree's bench must measure the worktree's code, not the tree the venv was installed from."""
    import os
    import subprocess
    import sys

    env = harness.this_checkout({**os.environ, "PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(harness.ROOT), "/elsewhere"]
    # As the `lakehouse` script runs: its own folder first on sys.path, not the working directory.
    found = subprocess.run([sys.executable, "-c", "import sys; sys.path.pop(0); import streaming; print(streaming.__file__)"],
                           env=env, cwd="/", capture_output=True, text=True, check=True).stdout.strip()
    assert found == str(harness.ROOT / "streaming" / "__init__.py")


def test_freshness_keeps_the_first_lines_of_each_trace_in_the_stream_log():
    from bench.freshness import trace_heads

    log = "\n".join([
        "10:22:40 gold_sessions +200; Kafka lag 0 records",
        'Exception in thread "stream execution thread for silver_orders" java.lang.StackOverflowError',
        "\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:4898)",
        *["\tat java.base/java.util.regex.Pattern$GroupHead.match(Pattern.java:4789)"] * 50,
        "Caused by: java.io.IOException: gone",
        "\tat a.b.C.d(C.java:1)",
        "10:22:42 stopped after 551 s; every checkpoint is consistent",
    ])
    heads = trace_heads(log, lines=2)
    assert heads == [
        'Exception in thread "stream execution thread for silver_orders" java.lang.StackOverflowError\n'
        "\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:4898)",
        "Caused by: java.io.IOException: gone\n\tat a.b.C.d(C.java:1)",
    ]
    assert trace_heads("10:22:42 stopped after 551 s") == []


@pytest.mark.parametrize("argv, keeps", [
    ([], True), (["--quick"], False), (["--quick", "--record"], True), (["--no-record"], False),
    (["--quick", "--record", "--no-record"], False),
])
def test_a_bench_records_unless_told_not_to_and_a_smoke_run_only_when_asked(argv, keeps):
    import argparse

    parser = argparse.ArgumentParser()
    harness.recording_options(parser, quick="1 round")
    assert harness.keeps(parser.parse_args(argv)) is keeps
    plain = argparse.ArgumentParser()
    harness.recording_options(plain)   # a bench without a smoke form has --no-record only
    assert harness.keeps(plain.parse_args([])) is True
    assert harness.keeps(plain.parse_args(["--no-record"])) is False
    with pytest.raises(SystemExit):
        plain.parse_args(["--quick"])


def test_pipeline_gives_no_figure_at_1_6m_from_a_line_that_does_not_rise():
    """Two noisy sizes where the larger ran faster make no events/s figure at 1.6M; a rising line does."""
    from bench.pipeline import at_target_size

    flat, how = at_target_size({"events": 20_000, "events_per_s": 541}, harness.linear_fit([2_000, 20_000], [46.5, 37.0]))
    assert flat is None and how.startswith("not extrapolated")
    rising, how = at_target_size({"events": 20_000, "events_per_s": 425}, harness.linear_fit([2_000, 20_000], [38.0, 47.0]))
    assert (rising, how) == (round(1_600_000 / (38.0 + 9.0 / 18_000 * 1_598_000)), "extrapolated from the line")
    assert at_target_size({"events": 1_600_000, "events_per_s": 10_813}, harness.linear_fit([1, 2], [1, 2])) == \
        (10_813, "measured")


def test_pipeline_marginal_of_a_floor_is_its_gold_stage_round_by_round():
    """One more gold table in a floor is its gold stage with it minus without it, paired by round (median); the
    catch-up's is the whole run's seconds. The floor's other stages, which the table does not touch, do not count."""
    from bench.pipeline import marginal_at_size

    floor = lambda whole, gold: {"seconds": whole, "stages_s": {"bronze": whole - gold, "gold": gold}}  # noqa: E731
    with_it = [floor(20.0, 9.0), floor(14.0, 8.5), floor(30.0, 10.0)]
    without = [floor(12.0, 7.5), floor(25.0, 8.0), floor(13.0, 8.2)]
    m = marginal_at_size(without, with_it, 2_000, "gold_revenue_hopping")
    assert m["adds_per_round_s"] == [1.5, 0.5, 1.8] and m["adds_s"] == 1.5 and m["without_s"] == 8.0
    runs = marginal_at_size([{"seconds": 30.0}, {"seconds": 40.0}], [{"seconds": 34.0}, {"seconds": 41.0}], 2_000, "f")
    assert runs["adds_per_round_s"] == [4.0, 1.0] and runs["adds_s"] == 2.5


def test_pipeline_against_changes_one_setting_as_the_environment_would_and_refuses_others(tmp_path):
    """--against LAKEHOUSE_NAME=VALUE parses VALUE as that setting; an unknown name or bad value stops the bench."""
    from bench.pipeline import against_setting
    from lakehouse.infra.settings import Settings

    base = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    other = against_setting("LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS=500", base)
    assert other.kafka_fetch_max_wait_ms == 500 and base.kafka_fetch_max_wait_ms != 500
    assert dataclasses.replace(other, kafka_fetch_max_wait_ms=base.kafka_fetch_max_wait_ms) == base
    for bad in ("LAKEHOUSE_NO_SUCH_THING=1", "KAFKA_FETCH_MAX_WAIT_MS=500", "LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS=soon"):
        with pytest.raises(SystemExit, match="--against"):
            against_setting(bad, base)


def test_every_bench_that_records_a_result_can_be_run_by_name():
    """A bench/ module with a NAME (its results file) is in `lakehouse bench`'s list under that name."""
    import importlib
    from pathlib import Path

    named = {}
    for path in sorted(Path(run.__file__).parent.glob("*.py")):
        if "\nNAME = " in path.read_text():
            module = importlib.import_module(f"bench.{path.stem}")
            named[module.NAME] = module.__name__
    assert len(named) >= 8
    assert {name: run.BENCHES[name][0] for name in named if name in run.BENCHES} == named
