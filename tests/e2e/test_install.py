"""Installed with pip beside a user's own Dagster project: one call gives the lakehouse for the user's pipeline.

The project is built as a wheel and installed into a fresh virtual environment (its dependencies are taken
from the checkout's environment instead of downloaded again). A minimal Dagster project of the user's, in a
folder of its own, merges its asset with `lakehouse_definitions("warehouse_sensors")`; the definitions load
with the pipeline's assets, checks, jobs, schedules and sensors, and no generic top-level module is installed.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ROOT / "tests" / "pipelines"

USER_DEFINITIONS = '''
import dagster as dg
from lakehouse.orchestration.location import lakehouse_definitions


@dg.asset
def weekly_report() -> int:
    """The user's own asset, beside the lakehouse's."""
    return 1


defs = dg.Definitions.merge(dg.Definitions(assets=[weekly_report]), lakehouse_definitions("warehouse_sensors"))
'''

PROBE = '''
import importlib.util, json
import lakehouse.streaming
import my_project.definitions as d
repo = d.defs.get_repository_def()
print(json.dumps({
    "assets": sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()),
    "checks": sorted(k.name for k in repo.asset_graph.asset_check_keys),
    "jobs": sorted(j.name for j in repo.get_all_jobs()),
    "schedules": sorted(s.name for s in repo.schedule_defs),
    "sensors": sorted(s.name for s in repo.sensor_defs),
    "generic": [m for m in ("streaming", "schemas", "batch", "quality", "infra", "orchestration", "cli")
                if importlib.util.find_spec(m) is not None],
    "engine_at": lakehouse.streaming.__file__,
}))
'''


def run(args, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-6000:])
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the project's wheel installed (no editable link to the checkout)."""
    tmp = tmp_path_factory.mktemp("install")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist"), str(ROOT)])
    [wheel] = (tmp / "dist").glob("*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    # The dependencies (pyspark, dagster, ...) from the checkout's environment; its .pth files are not read, so
    # the checkout's own editable install is not visible from here.
    [packages] = venv.glob("lib/python*/site-packages")
    (packages / "checkout_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)])
    return venv


def test_a_user_project_loads_the_lakehouse_for_its_pipeline_from_one_call(installed, tmp_path):
    user = tmp_path / "user"
    (user / "my_project").mkdir(parents=True)
    (user / "my_project" / "__init__.py").write_text("")
    (user / "my_project" / "definitions.py").write_text(textwrap.dedent(USER_DEFINITIONS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=f"{user}{os.pathsep}{PIPELINES}", LAKEHOUSE_HOME=str(tmp_path / "home"))
    found = json.loads(run([str(installed / "bin" / "python"), "-c", PROBE], cwd=tmp_path, env=env).stdout)

    assert found["generic"] == []
    assert found["engine_at"].startswith(str(installed))
    assert {"weekly_report", "kafka/warehouse_readings_v1", "bronze_readings", "silver_readings", "dim_devices",
            "gold_zone_climate_per_minute", "gold_readings_placed"} <= set(found["assets"])
    assert not any("orders" in key for key in found["assets"])
    assert {"catch_up", "backfill", "quality_checks"} <= set(found["jobs"])
    assert "nightly_reconciliation" in found["schedules"] and found["sensors"]
    assert {"matches_batch", "accounting"} <= set(found["checks"])


DG_PYPROJECT = '''
[project]
name = "my-dg-project"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "my_dg_project"
'''

DG_DEFS_YAML = '''
type: lakehouse.orchestration.component.Lakehouse

attributes:
  pipeline: warehouse_sensors
'''

DG_PROBE = '''
import json
from importlib.metadata import entry_points
from pathlib import Path
import dagster as dg
repo = dg.load_from_defs_folder(path_within_project=Path(".")).get_repository_def()
print(json.dumps({
    "assets": sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()),
    "jobs": sorted(j.name for j in repo.get_all_jobs()),
    "registered": sorted(e.value for e in entry_points(group="dagster_dg_cli.registry_modules")
                         if e.value.startswith("lakehouse")),
}))
'''


def test_a_dg_project_gets_the_lakehouse_from_a_component_in_its_defs_folder(installed, tmp_path):
    """A `dg` project's defs.yaml of type Lakehouse loads the pipeline's definitions; `dg` can list the component."""
    project = tmp_path / "dg"
    (project / "src" / "my_dg_project" / "defs" / "lake").mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(DG_PYPROJECT))
    (project / "src" / "my_dg_project" / "__init__.py").write_text("")
    (project / "src" / "my_dg_project" / "defs" / "__init__.py").write_text("")
    (project / "src" / "my_dg_project" / "defs" / "lake" / "defs.yaml").write_text(textwrap.dedent(DG_DEFS_YAML))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=f"{project / 'src'}{os.pathsep}{PIPELINES}", LAKEHOUSE_HOME=str(tmp_path / "home"))
    found = json.loads(run([str(installed / "bin" / "python"), "-c", DG_PROBE], cwd=project, env=env).stdout)

    assert {"kafka/warehouse_readings_v1", "bronze_readings", "silver_readings", "gold_zone_climate_per_minute",
            "gold_readings_placed"} <= set(found["assets"])
    assert not any("orders" in key for key in found["assets"])
    assert {"catch_up", "backfill", "refresh", "quality_checks"} <= set(found["jobs"])
    assert found["registered"] == ["lakehouse.orchestration.component"]
