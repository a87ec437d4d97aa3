"""The batch lane's work on several flows at once: the catch-up's scheduler, each flow in a session of its own.

A verify or a backfill of every table is one recomputation per flow, and most of a small one's time is
waiting (planning, listing and reading Delta logs, committing), as in a catch-up: running flows that do
not read each other's tables side by side makes the whole take about as long as its longest chain.
The catch-up's scheduler (streaming/parallel_runs.py) decides what may start.

A streaming query gets a session of its own from Spark; a batch recomputation does not. Its writers set
session settings for the commits they make (Delta's txnAppId/txnVersion for an idempotent MERGE, the
commit's userMetadata), so each flow here runs in `spark.newSession()`: same SparkContext, lake and
cache, settings of its own. Its jobs go to a fair-scheduler pool named after the flow, as a catch-up's do.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence, TypeVar

from pyspark.sql import SparkSession

from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.runner import in_flow_pool
from lakehouse.streaming.shared_tables import ensure_shared_tables

T = TypeVar("T")


def each_flow(spark: SparkSession, flows: Sequence[Flow], ctx: FlowContext, work: Callable[[SparkSession, Flow], T], *,
              parallel: int = 1, independent: bool = False) -> Iterator[tuple[Flow, T]]:
    """Yield (flow, work(session, flow)) as each ends, up to `parallel` at once; the first error is raised.

    A flow starts once the flows writing a table it reads have ended, unless `independent` (each reads
    only tables none of `flows` writes). After an error nothing more starts; running flows finish first.
    """
    if parallel <= 1:
        for flow in flows:              # one at a time in the caller's session, as before
            yield flow, work(spark, flow)
        return

    ensure_shared_tables(spark, ctx.lake_root)   # before flows that write them start at once

    def run(_: SparkSession, flow: Flow, __: FlowContext) -> T:
        session = spark.newSession()
        return in_flow_pool(spark, flow, lambda: work(session, flow))

    for outcome in run_flows(spark, flows, ctx, parallel=parallel, run=run, independent=independent):
        if outcome.error is not None:
            raise outcome.error
        yield outcome.flow, outcome.run
