"""Contracts: event sources, topic specs, versioned event schemas, table specs, quarantine reason codes."""

from __future__ import annotations

from typing import Any, Callable, Mapping


def from_sources(module: str, names: Mapping[str, Callable[[Any], Any]]) -> Callable[[str], Any]:
    """A module `__getattr__` that resolves the shop's names from the source declarations on first use.

    schemas/sources.py builds on the modules that use this, so it is imported late, not at their top.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:  # anything else, e.g. the import system probing for __path__
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from lakehouse.schemas import sources

        return names[name](sources)

    return __getattr__
