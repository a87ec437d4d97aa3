"""Pipeline declarations: refused in one sentence when they cannot work, loaded by module path, parameters typed once."""

from __future__ import annotations

import sys
import textwrap

import pytest

from lakehouse.schemas.gold import (
    Aggregate, Gold, IntervalJoin, Sessions, Sliding, Windowed, avg_of, count, max_of, min_of, sum_of,
)
from lakehouse.schemas.pipeline import Param, Pipeline, PipelineError, load_pipeline
from lakehouse.streaming.transforms.windows import merge_expressions

SOURCE = object()


def windowed(**aggregates: Aggregate) -> Gold:
    return Gold("gold_x", "X per minute.", "How many X?", reads=(SOURCE,),
                kind=Windowed(size="1 minute", by=("zone",), aggregates=aggregates))


@pytest.mark.parametrize("function", ["count_distinct", "percentile", "median", "first", "collect_list"])
def test_an_aggregate_that_cannot_merge_is_refused_in_one_sentence(function):
    with pytest.raises(PipelineError) as refused:
        windowed(n=count(), odd=Aggregate(function, "device_id"))
    assert str(refused.value) == (
        f"gold table gold_x: aggregate odd = {function}(device_id) cannot be merged exactly across micro-batches; use "
        "one of count, count_if, sum, min, max, avg, or declare the table as Recomputed.")


def test_a_windowed_table_keys_on_its_window_and_groups():
    gold = windowed(n=count(), mean=avg_of("celsius"))
    assert gold.spec.keys == ("window_start", "zone")
    assert gold.spec.time_range == ("window_start", "window_end")


def test_partials_merge_as_each_aggregate_requires():
    """Counts and sums add (NULL-aware), min and max take least and greatest, an average adds sum and count."""
    found = merge_expressions(windowed(n=count(), total=sum_of("x"), low=min_of("x"), high=max_of("x"),
                                       mean=avg_of("x")).kind)
    assert found["n"] == "coalesce(t.`n` + s.`n`, t.`n`, s.`n`)"
    assert found["total"] == "coalesce(t.`total` + s.`total`, t.`total`, s.`total`)"
    assert found["low"] == "least(t.`low`, s.`low`)" and found["high"] == "greatest(t.`high`, s.`high`)"
    assert found["_mean_count"] == "t.`_mean_count` + s.`_mean_count`"
    assert "/ CASE WHEN t.`_mean_count` + s.`_mean_count` > 0" in found["mean"]


def test_a_gold_table_reading_several_sources_must_say_how_they_become_one_stream():
    with pytest.raises(PipelineError, match="reads 2 sources: declare `rows`"):
        Gold("gold_y", "Y.", "Y?", reads=(SOURCE, SOURCE), kind=Windowed(size="1 minute", aggregates={"n": count()}))


def test_the_sequence_kinds_key_their_tables_and_name_their_parameters():
    """Sessions key on their groups and start; a sliding count needs the key of a row; a join reads two sources."""
    gap, look_back = Param("gap", "30 minutes", "Gap."), Param("look_back", "1 hour", "Look-back.")
    sessions = Gold("gold_visits", "Visits.", "How long?", reads=(SOURCE,),
                    kind=Sessions(gap=gap, by=("visitor",), counts={"views": "true"}))
    assert sessions.spec.keys == ("visitor", "session_start")
    assert sessions.spec.time_range == ("session_start", "session_end")
    assert sessions.params() == (gap,)
    sliding = Gold("gold_bursts", "Bursts.", "Who?", reads=(SOURCE,), keys=("id",),
                   kind=Sliding(window=look_back, by=("device",), flag_at=Param("burst", 5, "Burst.", kind="int")))
    assert [p.name for p in sliding.params()] == ["look_back", "burst"]
    with pytest.raises(PipelineError, match="gold table gold_bursts: a sliding count is one row per input row"):
        Gold("gold_bursts", "Bursts.", "Who?", reads=(SOURCE,), kind=Sliding(window="1 hour", by=("device",)))
    with pytest.raises(PipelineError, match="an interval join reads two sources, the left first; it reads 1"):
        Gold("gold_pairs", "Pairs.", "Which?", reads=(SOURCE,), keys=("a",),
             kind=IntervalJoin(on=("a",), within="1 hour", columns={"a": "l.a"}))
    pair = Gold("gold_pairs", "Pairs.", "Which?", reads=(SOURCE, SOURCE), keys=("a", "b"),
                kind=IntervalJoin(on=("a",), within=look_back, columns={"a": "l.a", "b": "r.b"}))
    assert pair.params() == (look_back,)


def test_parameters_are_typed_once_and_read_from_the_environment():
    hop = Param("hop", "10 minutes", "Hop.")
    pipeline = Pipeline("p", "P.", sources=(), gold=(), params=(hop, Param("limit", 3, "Limit.", kind="int")))
    assert pipeline.param_values({}) == {"hop": "10 minutes", "limit": 3}
    assert pipeline.param_values({"LAKEHOUSE_HOP": "1 hour", "LAKEHOUSE_LIMIT": "7"}) == {"hop": "1 hour", "limit": 7}
    with pytest.raises(PipelineError, match="LAKEHOUSE_HOP='soon' is not valid; use a Spark interval"):
        pipeline.param_values({"LAKEHOUSE_HOP": "soon"})
    with pytest.raises(PipelineError, match="LAKEHOUSE_LIMIT='0' is not valid; use an integer from 1"):
        pipeline.param_values({"LAKEHOUSE_LIMIT": "0"})


def test_a_pipeline_module_is_loaded_by_its_path_or_refused_in_one_sentence(tmp_path, monkeypatch):
    (tmp_path / "tiny_pipeline.py").write_text(textwrap.dedent('''
        from lakehouse.schemas.pipeline import Pipeline
        PIPELINE = Pipeline("tiny", "Tiny.", sources=())
    '''))
    (tmp_path / "no_pipeline.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_pipeline("tiny_pipeline").name == "tiny"
    with pytest.raises(PipelineError, match=r"LAKEHOUSE_PIPELINE='not_there': no module of that name can be imported"):
        load_pipeline("not_there")
    with pytest.raises(PipelineError, match=r"the module has no PIPELINE = Pipeline\(...\); declare one"):
        load_pipeline("no_pipeline")
    sys.modules.pop("tiny_pipeline", None)


def test_the_cli_names_a_pipeline_that_cannot_load_in_one_line(tmp_path, monkeypatch, capsys):
    from lakehouse.cli import main as cli

    for name in [k for k in __import__("os").environ if k.startswith("LAKEHOUSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_PIPELINE", "not_there")
    assert cli.main(["settings"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: LAKEHOUSE_PIPELINE='not_there': no module of that name can be imported; install the "
                   "pipeline's package or put its folder on PYTHONPATH."]
