"""Trigger defaults that fit the machine: each layer's micro-batch interval, sized so the queries' fixed cost fits the cores.

A micro-batch costs about the same whatever its size (a Spark job, a Delta snapshot, one to three commits),
so N queries with a trigger of T seconds ask N x cost / T cores before they read a single event. On two
cores, 22 flows at one-second triggers asked ten times what there is, and silver fell minutes behind.
`LAKEHOUSE_STREAM_TRIGGER=auto` (the default) picks, from a ladder, the shortest triggers whose fixed cost
fits a share of the cores, gold four times slower than bronze and silver (it reads their commits and
MERGEs), and says what the cores left over sustain. The constants are measurements on two shared cores
(docs/performance.md, "Knobs"); a trigger the user sets for a layer or a flow is kept and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

# Core-seconds one flow's part of a micro-batch costs whatever its rows (two shared cores: a Spark job,
# a Delta snapshot, one to three commits; docs/performance.md, "Limits on two cores").
BATCH_CORE_S = 1.8
# The share of the cores the queries' fixed cost may take; the rest reads, parses and writes the events,
# and runs the broker and the driver. Calibrated on two cores: 22 flows at 30/30/120 s (0.87 cores by
# BATCH_CORE_S) kept up at 250 events/s; at 10/20/60 s (1.83 cores) they did not.
QUERY_SHARE = 0.45
# Core-microseconds an event costs in each flow it passes through, past the fixed cost, for the whole shop
# pipeline (its sessions, joins and id-keyed MERGEs are the dearest flows; lighter ones cost less): at 250
# events/s with the sized triggers two cores were 68% busy, 0.31 cores beyond the fixed cost, the broker and
# the stream's Python, over 22 flows on 5 topics (bench.freshness, 2026-11-29). It puts what the shop's 22
# flows sustain on two cores at about 650 events/s: they kept up at 250/s and not at 1,000/s.
EVENT_CORE_US = 280.0
# Cores a local broker and the stream's own Python take beside Spark.
OTHERS_CORES = 0.3
# How much slower than bronze's and silver's trigger each layer's is.
LAYER_FACTOR = {"bronze": 1, "silver": 1, "gold": 4}
# Triggers in seconds the sizing picks from (bronze's and silver's; gold's is LAYER_FACTOR times one of them).
LADDER = (1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300)
AUTO = "auto"


@dataclass(frozen=True)
class Query:
    """One query of the stream: the layer whose trigger it takes, how many flows each batch writes, and what it reads."""

    layer: str
    flows: int = 1
    pinned_s: float | None = None      # a trigger the user set for this query's flow or layer


@dataclass(frozen=True)
class Sizing:
    """The sized trigger of each layer, what their fixed cost takes of the cores, and what is left for events."""

    layer_s: Mapping[str, int]
    cores: int
    fixed_cores: float
    events_per_s: int
    queries: int
    fits: bool                          # False: even the slowest triggers ask more than QUERY_SHARE of the cores

    def triggers(self) -> dict[str, str]:
        """Spark processing-time triggers per layer, e.g. {"gold": "120 seconds"}."""
        return {layer: _spark(s) for layer, s in self.layer_s.items()}

    def sentence(self) -> str:
        """The start-up log's line: the triggers, what they cost, and what the stream will sustain."""
        each = ", ".join(f"{layer} every {_spark(s)}" for layer, s in self.layer_s.items())
        head = (f"triggers sized for {self.cores} core{'s' * (self.cores != 1)} and {self.queries} "
                f"quer{'ies' if self.queries != 1 else 'y'}: {each}; their fixed cost takes about "
                f"{self.fixed_cores:.1f} cores")
        if not self.fits:
            return (f"{head}, more than the {QUERY_SHARE:.0%} it may: the stream will fall behind; stream only the "
                    "tables you watch (lakehouse stream TABLE ...) or run on more cores")
        slowest = max(self.layer_s.values())
        return (f"{head}; the rest sustains about {self.events_per_s:,} events/s at the bundled example pipeline's cost "
                f"per event (lighter flows sustain more), and a table is about one trigger of its layer behind its input "
                f"when keeping up (gold up to {_spark(slowest)} plus a batch); LAKEHOUSE_STREAM_TRIGGER or "
                "LAKEHOUSE_STREAM_TRIGGERS set them by hand")


def _spark(seconds: float) -> str:
    return f"{seconds:g} second{'s' * (seconds != 1)}"


def fixed_cores(queries: Iterable[Query], layer_s: Mapping[str, float]) -> float:
    """Cores the queries' per-batch cost asks at these triggers (a pinned trigger counts as set)."""
    return sum(BATCH_CORE_S * q.flows / (q.pinned_s or layer_s.get(q.layer) or max(layer_s.values()))
               for q in queries)


def size_triggers(queries: Iterable[Query], cores: int, topics: int) -> Sizing:
    """The shortest ladder triggers whose fixed cost fits QUERY_SHARE of `cores`; `topics`: the topics read."""
    queries = list(queries)
    layers = sorted({q.layer for q in queries if q.pinned_s is None}, key=lambda l: (LAYER_FACTOR.get(l, 1), l))
    budget = QUERY_SHARE * cores
    sized = [q for q in queries if q.pinned_s is None]
    chosen: dict[str, int] = {}
    for fitting in (queries, sized):    # when the triggers set by hand alone ask too much, size the rest alone
        for step in LADDER:
            chosen = {layer: step * LAYER_FACTOR.get(layer, 1) for layer in layers}
            if fixed_cores(fitting, chosen or {"silver": step}) <= budget:
                break
        else:
            continue
        break
    fixed = fixed_cores(queries, chosen or {"silver": LADDER[0]})
    flows = sum(q.flows for q in queries)
    spare = cores - fixed - OTHERS_CORES
    per_event_us = EVENT_CORE_US * flows / max(1, topics)    # an event passes through its topic's share of flows
    events = max(0, math.floor(spare * 1e6 / per_event_us / 50) * 50) if spare > 0 else 0
    return Sizing(chosen, cores, round(fixed, 2), events, len(queries), fixed <= budget)


def resolve(trigger: str, triggers: Mapping[str, str], queries: Iterable[Query], cores: int,
            topics: int) -> tuple[str, dict[str, str], Sizing | None]:
    """The stream's trigger and per-layer/flow triggers: sized when `trigger` is auto, else as set."""
    if trigger.strip().lower() != AUTO:
        return trigger, dict(triggers), None
    sizing = size_triggers(queries, cores, topics)
    sized = sizing.triggers()
    fallback = sized.get("silver") or next(iter(sized.values()), _spark(LADDER[0]))   # flows of another layer
    return fallback, {**sized, **triggers}, sizing
