"""The lakehouse as a Dagster component: a `defs.yaml` in a user's `dg` project gives its definitions for a pipeline.

    type: lakehouse.orchestration.component.Lakehouse
    attributes:
      pipeline: my_company.pipelines.sensors
"""

# No `from __future__ import annotations`: Resolvable reads the fields' real types.
from dataclasses import dataclass

import dagster as dg

from lakehouse.orchestration.location import lakehouse_definitions


@dataclass
class Lakehouse(dg.Component, dg.Resolvable):
    """The lakehouse's assets, checks, jobs, schedules, sensors and resources for one pipeline package."""

    pipeline: str = "lakehouse.pipelines.shop"   # the module whose PIPELINE the engine runs (LAKEHOUSE_PIPELINE)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return lakehouse_definitions(self.pipeline)
