"""A pipeline: the package a user brings (sources, gold tables, parameters, rules, demo), and how the engine finds it.

The engine names no pipeline's tables. It is pointed at one by `LAKEHOUSE_PIPELINE` (a module path, the
shop by default); the module holds `PIPELINE = Pipeline(...)`. Everything else follows from that object:
topics, bronze and silver flows, gold flows, Dagster assets and checks, suites, settings.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

DEFAULT = "lakehouse.pipelines.shop"
VARIABLE = "LAKEHOUSE_PIPELINE"
_DURATION = re.compile(r"[1-9]\d* (?:second|minute|hour|day)s?(?: [1-9]\d* (?:second|minute|hour|day)s?)*", re.I)


class PipelineError(ValueError):
    """A pipeline that cannot be loaded or is declared wrongly; the message says which and how to fix it."""


@dataclass(frozen=True)
class Param:
    """A pipeline parameter with its default: read from LAKEHOUSE_<NAME>, typed once, shown by `lakehouse settings`."""

    name: str                       # lower_snake; its variable is LAKEHOUSE_<NAME>
    default: str | int
    help: str
    kind: str = "duration"          # duration (a Spark interval), int, or text
    low: int = 1                    # bounds of an int
    high: int = 1_000_000

    @property
    def variable(self) -> str:
        return f"LAKEHOUSE_{self.name.upper()}"

    def parse(self, raw: str | int) -> str | int:
        """The value of `raw`, or a PipelineError in one sentence naming the variable and what it allows."""
        text = str(raw).strip()
        if self.kind == "int":
            try:
                value = int(text)
            except ValueError:
                value = None
            if value is None or not self.low <= value <= self.high:
                raise PipelineError(f"{self.variable}={text!r} is not valid; use an integer from {self.low} to "
                                    f"{self.high}.")
            return value
        if self.kind == "duration" and not _DURATION.fullmatch(text):
            raise PipelineError(f"{self.variable}={text!r} is not valid; use a Spark interval such as "
                                '"30 seconds", "10 minutes" or "1 hour".')
        return text


@dataclass(frozen=True)
class Reference:
    """A rule across two silver tables: every row of `child` names, in `column`, a row `parent` holds (warns)."""

    child: str          # silver table, e.g. silver_payments
    column: str         # its column that refers, e.g. order_id
    parent: str         # silver table that must hold the referred row, e.g. silver_orders
    sample: str         # the child's id column, to name a few orphans

    @property
    def description(self) -> str:
        return (f"Every row of {self.child} refers by {self.column} to a row {self.parent} holds (warns: it may "
                "arrive first).")


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per loaded pipeline
class Pipeline:
    """Everything a pipeline declares, once: the engine builds flows, assets, checks and settings from it."""

    name: str
    description: str
    sources: tuple[Any, ...]                       # schemas.sources.Source, in dependency order
    gold: tuple[Any, ...] = ()                     # schemas.gold.Gold: each gold table, declared once
    params: tuple[Param, ...] = ()                 # the pipeline's own; those its gold kinds name are added
    silver_rules: Callable[[], Mapping[str, list]] = lambda: {}   # entity -> extra expectations (imports GX)
    gold_counts: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)  # gold table -> (silver table,
                                                   # what one silver event adds, SQL that counts the gold table)
    references: tuple[Reference, ...] = ()         # cross-table rules, checked on the whole tables
    demo: Demo | None = None                       # how `lakehouse demo` and `produce` make events
    database: Any = None                           # schemas.database.Database: the operational database CDC reads
    module: str = ""                               # the module it was loaded from

    def __post_init__(self) -> None:
        declared = {p.name: p for p in self.params}
        for gold in self.gold:
            for p in gold.params():
                declared.setdefault(p.name, p)
        object.__setattr__(self, "params", tuple(declared.values()))
        names = [g.name for g in self.gold]
        if len(set(names)) != len(names):
            raise PipelineError(f"pipeline {self.name} declares a gold table twice: {', '.join(sorted(names))}.")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise PipelineError(f"pipeline {self.name} declares a parameter twice: {', '.join(sorted(names))}.")
        for p in self.params:
            p.parse(p.default)

    @property
    def gold_specs(self) -> tuple[Any, ...]:
        """The TableSpec of each gold table."""
        return tuple(g.spec for g in self.gold)

    @property
    def example_queries(self) -> dict[str, str]:
        """Each gold table's example query, by table."""
        return {g.name: g.example for g in self.gold if g.example}

    def param_values(self, environ: Mapping[str, str] | None = None, **overrides: Any) -> dict[str, Any]:
        """Every parameter's value: LAKEHOUSE_<NAME> if set, else its default; explicit overrides win."""
        env = os.environ if environ is None else environ
        values = {}
        for p in self.params:
            raw = overrides.get(p.name, env.get(p.variable) or p.default)
            values[p.name] = p.parse(raw)
        return values

    def source(self, topic: str) -> Any:
        return {s.topic: s for s in self.sources}[topic]


class MixError(ValueError):
    """A fault share or rate a demo generator cannot honour; the message says which."""


@dataclass(frozen=True)
class Mix:
    """Shares of demo records (0..1) that are deliberately out of order, late, duplicated or malformed."""

    out_of_order: float = 0.03
    late: float = 0.01
    duplicate: float = 0.02
    malformed: float = 0.02

    def __post_init__(self) -> None:
        for name in ("out_of_order", "late", "duplicate", "malformed"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise MixError(f"the {name.replace('_', '-')} share must be between 0 and 1, not {value}")
        if self.duplicate + self.malformed > 1.0:
            raise MixError("the duplicate and malformed shares add up to more than 1")


@dataclass(frozen=True)
class Demo:
    """How `lakehouse produce` and `lakehouse demo` make a pipeline's events: a seeded generator of records.

    `events(seed=, start=, events_per_second=, mix=)` yields records with `topic`, `key`, `headers` and
    `encode(sent_at) -> bytes`; `topics` are the topics it writes to.
    """

    events: Callable[..., Any]
    topics: tuple[str, ...]


def load_pipeline(module: str) -> Pipeline:
    """The `PIPELINE` of module `module` (installed or on the path)."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise PipelineError(f"{VARIABLE}={module!r}: no module of that name can be imported; install the "
                                "pipeline's package or put its folder on PYTHONPATH.") from None
        raise
    pipeline = getattr(found, "PIPELINE", None)
    if not isinstance(pipeline, Pipeline):
        raise PipelineError(f"{VARIABLE}={module!r}: the module has no PIPELINE = Pipeline(...); declare one.")
    return pipeline if pipeline.module else _with_module(pipeline, module)


def _with_module(pipeline: Pipeline, module: str) -> Pipeline:
    object.__setattr__(pipeline, "module", module)
    return pipeline


def active_module() -> str:
    return os.environ.get(VARIABLE, "").strip() or DEFAULT


def active_pipeline() -> Pipeline:
    """The pipeline LAKEHOUSE_PIPELINE names (the shop by default), loaded once per module path."""
    return load_pipeline(active_module())
