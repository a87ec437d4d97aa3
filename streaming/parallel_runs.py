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

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from pyspark.sql import SparkSession

from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.runner import FlowRun, run_flow


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
              independent: bool = False) -> Iterator[Outcome]:
    """Run `flows` (in an order where a flow comes after those it reads) up to `parallel` at once.

    Yields each flow's outcome as it ends, in the caller's thread. Just before a flow starts, `skip`
    may return why it must not run (an upstream table failed a blocking check); it sees every outcome
    yielded before. A caller that stops iterating (an error it re-raises) waits for the running flows
    to finish; nothing more is started. `run` runs one flow (streaming.runner.run_flow). `independent`:
    no flow waits for another (each reads only tables none of `flows` writes, as in a verify).
    """
    waits = {flow.name: set() for flow in flows} if independent else upstream(flows)
    pending = list(flows)
    running: dict[Future, Flow] = {}
    ended: list[Outcome] = []       # ended, not yet yielded: a flow waiting for one of these does not start
    done: set[str] = set()          # yielded
    workers = max(1, parallel)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flow") as pool:
        while pending or running or ended:
            # Slots are filled before an ended flow is handed to the caller, who may take seconds over it
            # (a catch-up logs its materializations): flows that do not read its table start meanwhile.
            for flow in list(pending):
                if len(running) >= workers:
                    break
                if waits[flow.name] - done:
                    continue
                pending.remove(flow)
                why = skip(flow) if skip else None
                if why:
                    ended.append(Outcome(flow, skipped=why))
                    continue
                running[pool.submit(run, spark, flow, ctx)] = flow
            if ended:
                outcome = ended.pop(0)
                yield outcome
                done.add(outcome.flow.name)
                continue
            if not running:
                continue    # every ready flow was skipped: look again at what waited for them
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                flow = running.pop(future)
                error = future.exception()
                ended.append(Outcome(flow, error=error) if error else Outcome(flow, run=future.result()))
