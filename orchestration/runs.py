"""Materialize assets in process on the project's persistent Dagster instance, so the UI shows every run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from infra.settings import Settings
from orchestration.assets import build_assets
from orchestration.resources import build_resources

TOPICS = dg.AssetSelection.groups("kafka")
TABLES = dg.AssetSelection.groups("bronze", "silver", "gold")


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


def asset_names(assets: list[dg.AssetsDefinition | dg.AssetSpec]) -> list[str]:
    """Names a run can materialize (quarantine and late_arrivals are written by the silver assets' runs)."""
    return sorted(key.to_user_string() for a in assets if isinstance(a, dg.AssetsDefinition) for key in a.keys)


def materialize(settings: Settings, selection: dg.AssetSelection | list[str] | None = None) -> dg.ExecuteInProcessResult:
    """Materialize the selected assets (all by default) and return Dagster's result."""
    assets = build_assets()
    if isinstance(selection, list):
        known = asset_names(assets)
        unknown = [name for name in selection if name not in known]
        if unknown:
            raise UnknownAsset(f"There is no asset named {', '.join(unknown)}; assets: {', '.join(known)}.")
    return dg.materialize(
        assets,
        resources=build_resources(settings),
        instance=dagster_instance(settings),
        selection=selection,
        raise_on_error=False,
        # The run's events, stack traces included, go to the instance (and the UI); the terminal gets
        # the one-line summary the caller prints from failure_message().
        run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
    )


def materialized_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Asset name -> the metadata its materialization recorded, as plain values."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def failure_message(result: dg.ExecuteInProcessResult) -> str | None:
    """The first step failure's message, or None if the run succeeded."""
    if result.success:
        return None
    for event in result.all_events:
        if event.is_step_failure:
            err = event.step_failure_data.error
            while err is not None and err.cause is not None:  # Dagster wraps the asset's own exception
                err = err.cause
            if err is None or not err.message.strip():
                return f"asset {event.step_key} failed"
            message = err.message.strip().splitlines()[0]
            # Python formats it as "package.module.ClassName: text"; the class is noise to a user.
            prefix, sep, text = message.partition(": ")
            if sep and prefix.split(".")[-1] == err.cls_name:
                message = text
            return f"asset {event.step_key} failed: {message}"
    return "the run failed"
