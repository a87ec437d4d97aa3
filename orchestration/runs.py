"""Runs of the code location's jobs, started from the CLI, executed in this process, recorded in the project's instance.

`lakehouse ui` serves the code location `lakehouse.orchestration.definitions` (`dg dev -m lakehouse.orchestration.definitions`).
A run started here is created the way Dagster creates one for that location (as `dagster job launch` and the
webserver do): from the location's job snapshot and execution plan, with the job's remote origin, so the UI lists
it under its job (`catch_up`, ...), on the overview timeline, and can re-execute it. It then runs synchronously
in this process (as Dagster's run worker would), with resources built from the settings it was given.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.errors import DagsterUnknownPartitionError
from dagster._core.execution.api import execute_run
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.remote_representation.code_location import CodeLocation
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.utils import make_new_run_id
from dagster._utils.merger import deep_merge_dicts
from dagster._utils.tags import normalize_tags

from lakehouse.infra.settings import Settings

log = logging.getLogger("lakehouse")

TOPICS = dg.AssetSelection.groups("kafka")
TABLES = dg.AssetSelection.groups("bronze", "silver", "gold")

# The code location `lakehouse ui` serves: `dg dev -m lakehouse.orchestration.definitions` names it after the module.
LOCATION = "lakehouse.orchestration.definitions"
COMMAND_TAG = "lakehouse/command"  # the command line that started a run
_PROJECT_ROOT = Path(__file__).resolve().parents[1]

# The run's events, stack traces included, go to the instance (and the UI); the terminal gets the one-line
# summary the caller prints from failure_message().
QUIET_CONSOLE: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """The instance in `settings.dagster_home` (SQLite), the same one `lakehouse ui` opens."""
    home = Path(settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.get()


class UnknownAsset(ValueError):
    """An asset name the definitions do not have."""


class UnknownJob(ValueError):
    """A job name the code location does not have."""


class UnknownPartition(ValueError):
    """A partition key the selected assets do not have."""


@contextmanager
def code_location(instance: dg.DagsterInstance) -> Iterator[CodeLocation]:
    """The code location `lakehouse ui` serves, loaded in this process under the same name."""
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(
            executable_path=sys.executable, module_name=LOCATION, working_directory=str(_PROJECT_ROOT)
        ),
        location_name=LOCATION,
    )
    with origin.create_location(instance) as location:
        yield location


def _selected(
    selection: dg.AssetSelection | list[str], graph: BaseAssetGraph, where: str
) -> frozenset[dg.AssetKey]:
    """The selected keys among the graph's executable assets; a name it does not have is an UnknownAsset.

    Quarantine and late_arrivals are not among them: the silver and gold assets' runs write them.
    """
    executable = graph.executable_asset_keys
    if isinstance(selection, dg.AssetSelection):
        keys = frozenset(selection.resolve(graph) & executable)
    else:
        known = sorted(k.to_user_string() for k in executable)
        unknown = [name for name in selection if name not in known]
        if unknown:
            raise UnknownAsset(f"There is no asset named {', '.join(unknown)}; assets: {', '.join(known)}.")
        keys = frozenset(dg.AssetKey.from_user_string(name) for name in selection)
    if not keys:
        raise UnknownAsset(f"The selection matches no asset {where}.")
    return keys


def _asset_keys(
    selection: dg.AssetSelection | list[str] | None, job: dg.JobDefinition
) -> frozenset[dg.AssetKey] | None:
    """The asset keys a run of an asset job materializes (None: all of the job's)."""
    if selection is None:
        return None
    if not job.asset_layer.selected_asset_keys:
        raise ValueError(f"Job {job.name} runs ops, not assets: it takes what to do from its run config.")
    return _selected(selection, job.asset_layer.asset_graph, f"of job {job.name}")


def _partition_tags(
    job: dg.JobDefinition, keys: frozenset[dg.AssetKey] | None, partition_range: tuple[str, str],
    instance: dg.DagsterInstance,
) -> dict[str, str]:
    """Dagster's tags for one run over a range of partition keys, after checking both ends exist."""
    start, end = partition_range
    with partition_loading_context(dynamic_partitions_store=instance) as context:
        for key in (start, end):
            try:
                job.validate_partition_key(key, selected_asset_keys=keys, context=context)
            except DagsterUnknownPartitionError:
                raise UnknownPartition(f"The assets of job {job.name} have no partition {key}.") from None
            except dg.DagsterInvariantViolationError as exc:  # nothing selected is partitioned, or several ways
                raise UnknownPartition(f"A partition range cannot run here: {str(exc).splitlines()[0]}") from None
    return {ASSET_PARTITION_RANGE_START_TAG: start, ASSET_PARTITION_RANGE_END_TAG: end}


def run_job(
    settings: Settings,
    job_name: str,
    *,
    selection: dg.AssetSelection | list[str] | None = None,
    tags: dict[str, str] | None = None,
    run_config: dict | None = None,
    partition_range: tuple[str, str] | None = None,
) -> dg.JobExecutionResult:
    """Run a job of the code location in this process and wait for it (an asset job: only the `selection` assets).

    The run is created as the webserver creates one (`DagsterInstance.create_run` with the location's job
    snapshot, execution plan snapshot, `RemoteJob.get_remote_origin()` and `get_python_origin()`), so the UI
    shows it under the job and can re-execute it; `tags` are added to the job's own (put the command line under
    COMMAND_TAG); `partition_range` (first key, last key) makes one run over that range of partitions.
    """
    from lakehouse.orchestration.location import build_definitions

    # The steps run with resources from `settings`; the run's snapshots come from the location as the UI loads it.
    # Its partitions start at the lake's first day, or earlier for a backfill of days silver does not hold yet.
    first_day = partition_range[0] if partition_range else None
    repo_def = build_definitions(settings, first_day=first_day).get_repository_def()
    if not repo_def.has_job(job_name):
        names = sorted(n for n in repo_def.job_names if not n.startswith("__"))
        raise UnknownJob(f"There is no job named {job_name}; jobs: {', '.join(names)}.")
    job = repo_def.get_job(job_name)
    keys = _asset_keys(selection, job)
    instance = dagster_instance(settings)
    with code_location(instance) as location:
        [repo] = location.get_repositories().values()
        if repo.get_full_job(job_name).computed_job_snapshot_id != job.get_job_snapshot_id():
            log.warning("These settings differ from the LAKEHOUSE_* environment's: the run uses them, but the UI "
                        "shows it with, and re-executes it as, job %s of the environment's code location.", job_name)
        run_tags = dict(tags or {})
        if partition_range is not None:
            run_tags.update(_partition_tags(job, keys, partition_range, instance))
        config = deep_merge_dicts(QUIET_CONSOLE, run_config or {})
        remote_job = location.get_job(JobSubsetSelector(
            location_name=location.name, repository_name=repo.name, job_name=job_name,
            op_selection=None, asset_selection=keys,
        ))
        plan = location.get_execution_plan(remote_job, config, step_keys_to_execute=None, known_state=None,
                                           instance=instance)
        run = instance.create_run(
            job_name=job_name,
            run_id=make_new_run_id(),
            run_config=config,
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags=normalize_tags({**remote_job.tags, **run_tags}),
            root_run_id=None,
            parent_run_id=None,
            step_keys_to_execute=plan.execution_plan_snapshot.step_keys_to_execute,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            job_snapshot=remote_job.job_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            asset_selection=keys,
            asset_check_selection=None,
            resolved_op_selection=None,
            op_selection=None,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_graph=repo.asset_graph,
        )
    # What Dagster's run worker does with a launched run, here and now: the steps share this process's Spark.
    return execute_run(InMemoryJob(job), run, instance)


def catch_up(
    settings: Settings, selection: dg.AssetSelection | list[str] | None, *, command: str
) -> dg.JobExecutionResult:
    """A run of job catch_up that brings the selected assets (all by default) up to date, tagged with `command`.

    catch_up is an op job: its op takes the asset names from its config (orchestration/catch_up.py).
    """
    from lakehouse.orchestration.catch_up import CATCH_UP_JOB
    from lakehouse.orchestration.location import build_definitions

    assets: list[str] = []
    if selection is not None:
        graph = build_definitions(settings).resolve_asset_graph()
        assets = sorted(k.to_user_string() for k in _selected(selection, graph, "to bring up to date"))
    config = {"ops": {"bring_up_to_date": {"config": {"assets": assets}}}}
    return run_job(settings, CATCH_UP_JOB, run_config=config, tags={COMMAND_TAG: command})


def materialized_metadata(result: dg.ExecutionResult) -> dict[str, dict[str, Any]]:
    """Asset name -> the metadata its materialization recorded, as plain values."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def tables_metadata(result: dg.ExecutionResult) -> dict[str, dict[str, Any]]:
    """Asset name -> what the run recorded of each table it brought up to date: its materialization's metadata, else
    its observation's (a partitioned table whose new rows fall on no partition gets an observation)."""
    out = materialized_metadata(result)
    for event in result.all_events:
        observation = event.asset_observation_data.asset_observation if event.is_asset_observation else None
        if observation is None or "rows_written" not in observation.metadata:
            continue   # the shared tables' breakdowns and the definition notes carry no run figures
        out.setdefault(observation.asset_key.to_user_string(),
                       {k: getattr(v, "value", v) for k, v in observation.metadata.items()})
    return out


def exit_status(result: dg.ExecutionResult) -> int:
    """The command's exit status for a run: 0 if it succeeded, else 1 after printing its failure in one line."""
    if (err := failure_message(result)) is None:
        return 0
    print(f"error: {err}", file=sys.stderr)
    return 1


def failure_message(result: dg.ExecutionResult) -> str | None:
    """The first step failure's message, or None if the run succeeded."""
    if result.success:
        return None
    for event in result.all_events:
        if event.is_step_failure:
            err = event.step_failure_data.error
            while err is not None and err.cause is not None:  # Dagster wraps the asset's own exception
                err = err.cause
            if err is None or not err.message.strip():
                return f"step {event.step_key} failed"
            message = err.message.strip().splitlines()[0]
            # Python formats it as "package.module.ClassName: text"; the class is noise to a user.
            prefix, sep, text = message.partition(": ")
            if sep and prefix.split(".")[-1] == err.cls_name:
                message = text
            return f"step {event.step_key} failed: {message}"
    return "the run failed"
