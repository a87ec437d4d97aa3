"""A failed run's error is the product's one sentence; Spark's own error stays in the failure's metadata."""

from __future__ import annotations

import dagster as dg
import pytest

from lakehouse.orchestration import assets, runs
from lakehouse.streaming import runner
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.fingerprints import DefinitionChanged
from lakehouse.streaming.flows import BY_NAME

SPARK = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: assertion failed: There are [3] "
         "sources in the checkpoint offsets and now there are [2] sources requested by the query. Cannot continue.\n"
         "\tat scala.Predef$.assert(Predef.scala:279)")


def test_a_checkpoint_with_another_number_of_sources_is_a_changed_definition():
    flow = BY_NAME["gold_revenue_per_minute"]
    with pytest.raises(DefinitionChanged) as caught:
        runner._raise_if_sources_changed(flow, RuntimeError(SPARK))  # noqa: SLF001
    assert caught.value.table == "gold_revenue_per_minute"
    assert "its checkpoint reads 3 sources, the flow now reads 2" in str(caught.value)
    assert "lakehouse refresh gold_revenue_per_minute" in str(caught.value) and caught.value.raw == SPARK
    runner._raise_if_sources_changed(flow, RuntimeError("something else"))  # noqa: SLF001 - not this error: no raise


def _failed_step(monkeypatch, error: Exception) -> dg.ExecuteInProcessResult:
    """A run whose table step meets `error` from the flow, as the table asset's step handles it."""
    flow = BY_NAME["silver_orders"]

    def failing(*_):
        raise error

    monkeypatch.setattr(assets, "run_flow", failing)

    @dg.op
    def step(context) -> None:
        assets.catch_up_table(context, None, flow, FlowContext(lake_root="/nowhere", kafka_bootstrap="x:1"), {}, False)

    @dg.job
    def run() -> None:
        step()

    return run.execute_in_process(raise_on_error=False)


def _failure_metadata(result: dg.ExecuteInProcessResult) -> dict:
    [event] = [e for e in result.all_events if e.is_step_failure]
    return {k: v.value for k, v in event.step_failure_data.user_failure_data.metadata.items()}


def test_a_spark_error_fails_the_run_with_one_sentence_and_keeps_the_raw_error(monkeypatch):
    result = _failed_step(monkeypatch, RuntimeError("An error occurred while calling o1.awaitTermination.\n"
                                                    "org.apache.spark.SparkException: Job aborted: disk full\n\tat x"))
    assert runs.failure_message(result) == \
        "step step failed: flow silver_orders failed: SparkException: Job aborted: disk full"
    assert "\tat x" in _failure_metadata(result)["error"]


def test_a_backfills_spark_error_is_one_sentence_too(monkeypatch):
    """The batch lane's step (a partition range from the UI) fails the same way."""
    from datetime import date

    def failing(*_, **__):
        raise RuntimeError("An error occurred while calling o9.save.\norg.apache.spark.SparkException: no space\n\tat y")

    monkeypatch.setattr(assets, "backfill_flow", failing)

    @dg.op
    def step(context) -> None:
        assets.backfill_table(context, None, BY_NAME["silver_orders"], FlowContext(lake_root="/nowhere",
                              kafka_bootstrap="x:1"), (date(2026, 11, 22), date(2026, 11, 22)), "r", False)

    @dg.job
    def run() -> None:
        step()

    result = run.execute_in_process(raise_on_error=False)
    assert runs.failure_message(result) == "step step failed: flow silver_orders failed: SparkException: no space"
    assert "\tat y" in _failure_metadata(result)["error"]


def test_a_changed_checkpoint_fails_the_run_with_the_refresh_sentence(monkeypatch):
    changed = DefinitionChanged("silver_orders", ["its checkpoint reads 3 sources, the flow now reads 2"])
    changed.raw = SPARK
    result = _failed_step(monkeypatch, changed)
    assert runs.failure_message(result) == f"step step failed: {changed}"
    assert "There are [3]" not in runs.failure_message(result)
    assert _failure_metadata(result)["error"] == SPARK
