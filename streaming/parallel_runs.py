"""Run flows to catch up, each as soon as the flows whose tables it reads have finished, several at once.

A catch-up used to run its flows one after another. Most of a small flow's time is not computing but
waiting: starting the query, listing and reading Delta logs, committing, planning each of its Spark
jobs. Flows that do not read each other's tables (the five bronze flows, the silver flows, most gold
flows) can wait at the same time, so a run takes about as long as its longest chain, not the sum.

Each flow runs in a worker thread of its own, in the one Spark session: its query gets a clone of the
session (Spark gives every streaming query one), so the per-batch settings a writer makes (Delta's
txnAppId, userMetadata) stay its own, exactly as in `lakehouse stream`, which runs every flow at once.
Its query's jobs go to a fair-scheduler pool named after the flow (streaming/runner.py), so a small
flow's jobs are not queued behind a big one's.
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from pyspark.sql import SparkSession

from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.runner import FlowRun, ran_already, run_flow
from lakehouse.streaming.topic_query import TopicGroup, topic_groups
from lakehouse.streaming.topic_runs import run_topic_group

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How one flow's part of a catch-up ended: its run, the error it raised, or why it was not run."""

    flow: Flow
    run: FlowRun | Any = None     # what `run` returned: a FlowRun, unless the caller ran something else
    error: BaseException | None = None
    skipped: str | None = None


def upstream(flows: Sequence[Flow]) -> dict[str, set[str]]:
    """For each flow, the earlier flows in `flows` it waits for: those writing a table it reads, or its own table."""
    waits: dict[str, set[str]] = {}
    for i, flow in enumerate(flows):
        reads = {t.name for t in (*flow.sources, *flow.lookups)}
        waits[flow.name] = {
            earlier.name for earlier in flows[:i]
            if earlier.target.name == flow.target.name
            or reads & {earlier.target.name, *(t.name for t in earlier.also_writes)}
        }
    return waits


def run_flows(spark: SparkSession, flows: Sequence[Flow], ctx: FlowContext, *, parallel: int = 1,
              skip: Callable[[Flow], str | None] | None = None,
              run: Callable[[SparkSession, Flow, FlowContext], Any] = run_flow,
              independent: bool = False, one_query_per_topic: bool = False) -> Iterator[Outcome]:
    """Run `flows` (in an order where a flow comes after those it reads) up to `parallel` at once.

    Yields each flow's outcome as it ends, in the caller's thread. Just before a flow starts, `skip`
    may return why it must not run (an upstream table failed a blocking check); it sees every outcome
    yielded before. A caller that stops iterating (an error it re-raises) waits for the running flows
    to finish; nothing more is started. `run` runs one flow (streaming.runner.run_flow). `independent`:
    no flow waits for another (each reads only tables none of `flows` writes, as in a verify).
    `one_query_per_topic`: each topic's flows that one query can run (streaming/topic_query.py) catch up
    together in one query when their tables allow it (streaming/topic_runs.py); `run` then sees each of
    their runs through `run_flow`, which returns it.
    """
    waits = {flow.name: set() for flow in flows} if independent else upstream(flows)
    pending = list(flows)
    held = _groups(flows) if one_query_per_topic else {}   # bronze flow -> its topic's group, until it starts
    in_group = {f.name for g in held.values() for f in (g.silver, *g.members)}
    running: dict[Future, Flow] = {}
    ended: list[Outcome] = []       # ended, not yet yielded: a flow waiting for one of these does not start
    done: set[str] = set()          # yielded
    workers = max(1, parallel)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flow") as pool:
        while pending or running or ended:
            # Slots are filled before an ended flow is handed to the caller, who may take seconds over it
            # (a catch-up logs its materializations): flows that do not read its table start meanwhile.
            started = False
            for flow in list(pending):
                if len(running) >= workers:
                    break
                if flow.name in in_group:
                    continue        # starts with its topic's query, or alone once that query leaves it
                group = held.get(flow.name)
                together = [] if group is None else [f for f in (group.silver, *group.members) if f in pending]
                names = {flow.name, *(f.name for f in together)}
                if set().union(*(waits[f.name] for f in (flow, *together))) - names - done:
                    continue
                pending.remove(flow)
                started = True
                why = skip(flow) if skip else None
                if why:
                    ended.append(Outcome(flow, skipped=why))
                    in_group -= names
                    continue
                if not together:
                    running[pool.submit(run, spark, flow, ctx)] = flow
                    continue
                members = []
                for member in together[1:]:
                    if (why := skip(member) if skip else None):
                        pending.remove(member)
                        ended.append(Outcome(member, skipped=why))
                    else:
                        members.append(member)
                chosen = TopicGroup(flow, together[0], tuple(members))
                running[pool.submit(_run_group, spark, chosen, ctx, run)] = flow
            if ended:
                outcome = ended.pop(0)
                yield outcome
                done.add(outcome.flow.name)
                continue
            if not running:
                if not started:
                    # Nothing runs, nothing ended, nothing could start: a flow waits for one that will never end.
                    raise RuntimeError(f"flows {', '.join(f.name for f in pending)} wait for flows that are not run")
                continue    # every ready flow was skipped: look again at what waited for them
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                flow = running.pop(future)
                error = future.exception()
                if error is not None:
                    ended.append(Outcome(flow, error=error))
                    continue
                result = future.result()
                if not isinstance(result, _GroupResult):
                    ended.append(Outcome(flow, run=result))
                    continue
                for outcome in result.outcomes:
                    if outcome.flow in pending:
                        pending.remove(outcome.flow)
                    ended.append(outcome)
                # What the query did not run starts on its own, bronze first (it left the pending list with its group).
                ran = {o.flow.name for o in result.outcomes}
                if result.group.bronze.name not in ran:
                    held.pop(result.group.bronze.name, None)
                    pending.insert(0, result.group.bronze)
                in_group -= {f.name for f in (result.group.silver, *result.group.members)}


def _groups(flows: Sequence[Flow]) -> dict[str, TopicGroup]:
    """Bronze flow name -> the group of flows one query per topic runs, for topics with silver in `flows`."""
    return {g.bronze.name: g for g in topic_groups(list(flows)).values()}


@dataclass
class _GroupResult:
    group: TopicGroup
    outcomes: list[Outcome]


def _run_group(spark: SparkSession, group: TopicGroup, ctx: FlowContext, run: Callable) -> _GroupResult:
    """A topic's flows through one query; the outcomes of those it ran (the rest go back to run on their own)."""
    try:
        topic = run_topic_group(spark, group, ctx)
    except Exception:  # noqa: BLE001 - each flow's own run recovers from what its tables record, and reports
        log.warning("the query of %s could not run; its flows catch up as their own queries", group.bronze.source.name,
                    exc_info=True)
        return _GroupResult(group, [])
    outcomes = [Outcome(group.bronze, error=topic.error)] if topic.error is not None else []
    with ran_already(topic.runs):
        for flow in (group.bronze, group.silver, *group.members):
            if flow.name not in topic.runs:
                continue
            try:
                outcomes.append(Outcome(flow, run=run(spark, flow, ctx)))
            except Exception as exc:  # noqa: BLE001 - the caller's handling of the run failed: that flow's error
                outcomes.append(Outcome(flow, error=exc))
    return _GroupResult(group, outcomes)
