"""Contracts and the declaration API: sources, topic specs, event schemas, table specs, pipelines, reason codes."""

from __future__ import annotations

from typing import Any, Callable, Mapping


def from_pipeline(module: str, names: Mapping[str, Callable[[Any], Any]]) -> Callable[[str], Any]:
    """A module `__getattr__` that resolves registry names (ALL, BY_NAME, ...) from the active pipeline on each use.

    The pipeline (LAKEHOUSE_PIPELINE) builds on the modules that use this, so it is loaded late, not at their top.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:  # anything else, e.g. the import system probing for __path__
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from lakehouse.schemas.pipeline import active_pipeline

        return names[name](active_pipeline())

    return __getattr__
