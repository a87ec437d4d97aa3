"""Refresh: a table whose definition changed, rebuilt from the whole retained log, swapped in, its stream restarted.

The table's inputs are first brought up to date by their own flows; the replay then recomputes it (and, with
`downstream`, every table that reads it) from the whole of its inputs as they are now into a shadow, swaps
each in with one commit, records its new definition, and resets its checkpoint so that its stream starts
again from where the rebuild ended. The CLI (`lakehouse refresh`) and the Dagster job `refresh` call this.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable

from pyspark.sql import SparkSession

from lakehouse.batch.lineage import flow_for, with_downstream
from lakehouse.batch.replay import BadReplay, Replayed, StartingPoint, compare, replay, swap
from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.fingerprints import changed
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.runner import run_flow, table_version

log = logging.getLogger(__name__)


@dataclass
class Refreshed:
    """What a refresh did: per table, how its definition had changed, its versions, and what it replayed."""

    changes: dict[str, list[str]] = field(default_factory=dict)
    versions_before: dict[str, int | None] = field(default_factory=dict)
    replayed: list[Replayed] = field(default_factory=list)


def upstream_of(flow: Flow, flows: Iterable[Flow]) -> list[Flow]:
    """The flows whose tables `flow` reads, directly or through others, in run order."""
    flows = list(flows)
    by_target = {f.target.name: f for f in flows}
    wanted: set[str] = set()
    todo = [s.name for s in (*flow.sources, *flow.lookups)]
    while todo:
        name = todo.pop()
        if name in by_target and name not in wanted:
            wanted.add(name)
            todo += [s.name for s in (*by_target[name].sources, *by_target[name].lookups)]
    return [f for f in flows if f.target.name in wanted]


def plan(spark: SparkSession, ctx: FlowContext, table: str, *, downstream: bool = False) -> list[Flow]:
    """The flows a refresh of `table` rebuilds, or BadReplay in one sentence when it cannot be refreshed so."""
    flows = list(flow_registry.FLOWS)
    root = flow_for(table, flows)
    if isinstance(root.source, TopicSpec):
        raise BadReplay(f"{table} holds the topic's records as they are, with nothing to recompute; to read the "
                        f"topic again use `lakehouse replay {table} --from-offsets ...`.")
    readers = [f for f in with_downstream([table], flows)[1:] if has_delta_log(spark, f.target.path(ctx.lake_root))]
    if readers and not downstream:
        raise BadReplay(f"{table} is read by {', '.join(f.target.name for f in readers)}: add --downstream to "
                        "rebuild them with it (a rewritten table stops the streams that read it).")
    return with_downstream([table], flows) if downstream else [root]


def refresh(spark: SparkSession, ctx: FlowContext, table: str, *, downstream: bool = False) -> Refreshed:
    """Rebuild `table` (and with `downstream` every table that reads it) from the retained log; restart its stream."""
    chosen = plan(spark, ctx, table, downstream=downstream)
    done = Refreshed(changes={f.target.name: changed(spark, f, ctx) for f in chosen},
                     versions_before={f.target.name: table_version(spark, f.target.path(ctx.lake_root))
                                      for f in chosen})
    for name, how in done.changes.items():
        log.info("refresh %s: %s", name, "; ".join(how) if how else "its definition is unchanged")
    for flow in upstream_of(chosen[0], flow_registry.FLOWS):   # the rebuild reads all that the log holds now
        run_flow(spark, flow, ctx)
    shadow, done.replayed = replay(spark, ctx, table, StartingPoint(latest=True), downstream=downstream)
    compare(spark, ctx, shadow, done.replayed)
    swap(spark, ctx, shadow, done.replayed)
    shadow.drop()
    return done
