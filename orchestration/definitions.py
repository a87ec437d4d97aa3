"""The Dagster code location: `dg dev -m lakehouse.orchestration.definitions` (or `lakehouse ui`) loads `defs`.

It holds the pipeline LAKEHOUSE_PIPELINE names; a Dagster project of your own calls `lakehouse_definitions`.
"""

from __future__ import annotations

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.location import build_definitions

defs = build_definitions(Settings.from_env())
