"""Which flows a batch-lane command covers: the tables named, everything downstream of them, in run order."""

from __future__ import annotations

from typing import Iterable

from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming import flows as flow_registry
from lakehouse.streaming.flows import Flow


class UnknownTable(ValueError):
    """A table name no flow writes."""


def flow_for(table: str, flows: Iterable[Flow] | None = None) -> Flow:
    """The flow that writes `table`."""
    flows = tuple(flow_registry.FLOWS if flows is None else flows)
    for flow in flows:
        if flow.target.name == table:
            return flow
    names = ", ".join(f.target.name for f in flows)
    raise UnknownTable(f"There is no table named {table}; tables: {names}.")


def with_downstream(tables: Iterable[str], flows: Iterable[Flow] | None = None) -> list[Flow]:
    """The flows of `tables` and of every table that reads them (as a source or a lookup), in run order."""
    flows = tuple(flow_registry.FLOWS if flows is None else flows)
    chosen = {flow_for(t, flows).target.name for t in tables}
    for flow in flows:  # run order: a reader comes after what it reads
        if any(s.name in chosen for s in (*flow.sources, *flow.lookups) if not isinstance(s, TopicSpec)):
            chosen.add(flow.target.name)
    return [f for f in flows if f.target.name in chosen]


def batch_flows(tables: Iterable[str] | None, flows: Iterable[Flow] | None = None) -> list[Flow]:
    """Flows a backfill or verify covers: the named tables and their downstream, or every flow after bronze."""
    flows = tuple(flow_registry.FLOWS if flows is None else flows)
    if not tables:
        return [f for f in flows if not isinstance(f.source, TopicSpec)]
    for name in tables:
        if isinstance(flow_for(name, flows).source, TopicSpec):
            raise UnknownTable(f"{name} is the log itself (bronze): it has nothing to recompute it from; "
                               "to rebuild it from Kafka use `lakehouse replay`.")
    return with_downstream(tables, flows)
