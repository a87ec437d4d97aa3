"""Runs started from the CLI are runs of the code location's jobs: the UI lists them under the job and re-executes them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from lakehouse.infra.settings import Settings
from lakehouse.orchestration import runs
from lakehouse.orchestration.location import build_definitions
from tests.conftest import free_port
from tests.dagster_ui import lakehouse_env
from tests.unit.test_lake_at_load import FIELDS, _add, _commit, _metadata


LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
REPOSITORY = f"__repository__@{runs.LOCATION}"  # how Dagster labels the runs of the location's jobs




def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    body = json.load(urllib.request.urlopen(request, timeout=30))
    assert "errors" not in body, body
    return body["data"]


RUNS_OF_JOB = """
query ($job: String!, $repository: String!) {
  runsOrError(filter: {pipelineName: $job, tags: [{key: ".dagster/repository", value: $repository}]}) {
    ... on Runs { results { runId status parentRunId tags { key value } } }
  }
}"""
REEXECUTE = """
mutation ($runId: String!) {
  launchPipelineReexecution(reexecutionParams: {parentRunId: $runId, strategy: ALL_STEPS}) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


def test_a_cli_run_is_a_run_of_catch_up_that_the_ui_lists_and_reexecutes(broker, tmp_path):
    """`lakehouse run kafka/...` records a run of job catch_up with its command tag and materializations; the UI
    (`lakehouse ui`, a separate process) lists it under the job, and re-executing it there runs it again."""
    env = lakehouse_env(broker)
    ran = subprocess.run([str(LAKEHOUSE), "run", "kafka/shop_orders_v1"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]

    instance = runs.dagster_instance(broker)
    [record] = instance.get_run_records(dg.RunsFilter(job_name="catch_up"))
    run = record.dagster_run
    assert run.tags[runs.COMMAND_TAG] == "lakehouse run kafka/shop_orders_v1"
    assert run.tags_for_storage()[".dagster/repository"] == REPOSITORY
    assert run.remote_job_origin.location_name == runs.LOCATION and run.job_code_origin is not None
    assert f"run {run.run_id} of job catch_up" in ran.stdout
    materialized = instance.fetch_materializations(dg.AssetKey(["kafka", "shop_orders_v1"]), limit=5).records
    assert [m.run_id for m in materialized] == [run.run_id]
    assert materialized[0].asset_materialization.metadata["topic"].value == "shop.orders.v1"

    port = free_port()
    ui = subprocess.Popen([str(LAKEHOUSE), "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                          stderr=open(tmp_path / "ui.err", "w"))
    try:
        deadline, listed = time.monotonic() + 240, None
        while listed is None and time.monotonic() < deadline:
            assert ui.poll() is None, (tmp_path / "ui.err").read_text()[-2000:]
            try:
                listed = _graphql(port, RUNS_OF_JOB, {"job": "catch_up", "repository": REPOSITORY})
            except OSError:
                time.sleep(2)
        assert listed, "the UI did not answer in time"
        [shown] = listed["runsOrError"]["results"]
        assert shown["runId"] == run.run_id and shown["status"] == "SUCCESS"
        assert {"key": runs.COMMAND_TAG, "value": "lakehouse run kafka/shop_orders_v1"} in shown["tags"]

        launched = _graphql(port, REEXECUTE, {"runId": run.run_id})["launchPipelineReexecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        child = launched["run"]["runId"]
        deadline, status = time.monotonic() + 420, None
        while status not in ("SUCCESS", "FAILURE", "CANCELED") and time.monotonic() < deadline:
            time.sleep(3)
            results = _graphql(port, RUNS_OF_JOB, {"job": "catch_up", "repository": REPOSITORY})["runsOrError"]["results"]
            status = next((r["status"] for r in results if r["runId"] == child), None)
        assert status == "SUCCESS", status
        again = instance.get_run_by_id(child)
        assert again.parent_run_id == run.run_id and again.job_name == "catch_up"
        assert again.tags[runs.COMMAND_TAG] == "lakehouse run kafka/shop_orders_v1"  # the UI keeps the parent's tags
        materialized = instance.fetch_materializations(dg.AssetKey(["kafka", "shop_orders_v1"]), limit=5).records
        assert {m.run_id for m in materialized} == {run.run_id, child}
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=120)


def test_a_partition_range_is_one_run_with_dagster_range_tags(tmp_path):
    """partition_range becomes Dagster's asset partition range tags; a key the assets lack is one sentence."""
    settings = Settings(home=str(tmp_path / "home"))
    # The partitions start at the first day the lake holds: a silver file of 2026-11-20.
    _commit(Path(settings.lake_root, "silver/silver_orders"), 0, {"metaData": _metadata(FIELDS)},
            {"add": _add("o.parquet", "2026-11-20")})
    job = build_definitions(settings).resolve_job_def("backfill")
    keys = frozenset({dg.AssetKey("silver_orders")})
    instance = dg.DagsterInstance.ephemeral()
    assert runs._partition_tags(job, keys, ("2026-11-20", "2026-11-22"), instance) == {  # noqa: SLF001
        "dagster/asset_partition_range_start": "2026-11-20", "dagster/asset_partition_range_end": "2026-11-22",
    }
    with pytest.raises(runs.UnknownPartition, match=r"^The assets of job backfill have no partition 1999-01-01\.$"):
        runs._partition_tags(job, keys, ("1999-01-01", "2026-11-22"), instance)  # noqa: SLF001
    with pytest.raises(runs.UnknownJob, match=r"^There is no job named nope; jobs: .*catch_up.*\.$"):
        runs.run_job(settings, "nope")
    with pytest.raises(runs.UnknownAsset, match=r"^There is no asset named bronze_ordrs; assets: bronze_customers, "):
        runs.catch_up(settings, ["bronze_ordrs"], command="lakehouse run bronze_ordrs")
