"""A fused stream (one query per topic) and triggered runs (the flows' own, or one query per topic as a catch-up
runs them) take turns on one lake three times, with events sent between: bronze holds each sent record once,
silver each valid id once, and every gold table equals the batch lane's recomputation over silver (and
gold_revenue_per_minute plain Python's over what was sent)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from lakehouse.batch.verify import verify_flow
from lakehouse.pipelines import shop
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.runner import run_flow
from lakehouse.streaming.topic_query import topic_groups
from lakehouse.streaming.topic_runs import takeover
from tests.integration.test_topic_query import Running, Sent, rows

pytestmark = pytest.mark.integration

GOLD = ("gold_revenue_per_minute", "gold_revenue_hopping", "gold_order_velocity")   # the orders topic's members
FLOWS = [BY_NAME["bronze_orders"], BY_NAME["silver_orders"], *(BY_NAME[g] for g in GOLD)]


def test_a_fused_stream_and_triggered_runs_alternate_three_times_and_every_table_stays_exact(spark, broker, tmp_path):
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    sent = Sent(broker, start=datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc))

    def silver_ids() -> list:
        return [r[0] for r in rows(spark, shop.ORDERS.silver_table, ctx, "event_id")]

    def gold_orders() -> int:
        return sum(r[0] for r in rows(spark, shop.GOLD_REVENUE_PER_MINUTE, ctx, "orders"))

    def complete() -> bool:
        return set(silver_ids()) == sent.valid_ids() and gold_orders() == len(sent.valid_ids())

    for turn in range(3):
        # The fused stream: every flow of the orders topic in one query, fed while it runs.
        # Its start catches the flows up at once; after a fused turn their records all name the topic query's id.
        stream = Running(spark, ctx, flows=FLOWS)
        assert stream.supervisor.plan().startswith(f"{len(FLOWS)} flows as 1 queries")
        # Sent once the one query runs (its start's catch-ups are over): only that query can take these events.
        stream.wait(lambda: stream.supervisor.active() == [f.name for f in FLOWS], f"turn {turn}: the topic query to start")
        assert len(spark.streams.active) == 1
        sent.send(100 + 2 * turn, 20 * turn, n=400)
        stream.wait(complete, f"turn {turn}: the fused stream to take what was sent")
        stream.close()
        # Triggered: events sent while nothing streams. In the middle turn a catch-up as `lakehouse run` makes it:
        # one query, which resumes the stream's topic query where it stopped; else the flows' own runs, each from
        # the fused query's records.
        sent.send(101 + 2 * turn, 20 * turn + 10, n=400)
        if turn == 1:
            (group,) = topic_groups(FLOWS).values()
            assert takeover(spark, group, ctx) == "resume"
            outcomes = list(run_flows(spark, FLOWS, ctx, parallel=3, one_query_per_topic=True))
            assert [o.error for o in outcomes if o.error] == [] and len(spark.streams.active) == 0
            assert {o.flow.name for o in outcomes} == {f.name for f in FLOWS}
        else:
            for flow in FLOWS:
                run_flow(spark, flow, ctx)
        assert complete(), f"turn {turn}: the triggered runs missed what was sent while the stream was stopped"

    bronze = rows(spark, shop.ORDERS.bronze_table, ctx, "topic", "partition", "offset")
    assert len(bronze) == len(set(bronze)) and set(bronze) == sent.coords()
    ids = silver_ids()
    assert len(ids) == len(set(ids)) and set(ids) == sent.valid_ids()
    cut = [r for r in rows(spark, tables.QUARANTINE, ctx, "topic", "partition", "offset")
           if r[0] == shop.ORDERS.topic_spec.name]
    assert len(cut) == len(set(cut)) and set(cut) == sent.coords("malformed")
    assert rows(spark, tables.LATE_ARRIVALS, ctx, "flow") == []     # none sent late: nothing to subtract
    for name in GOLD:
        verdict = verify_flow(spark, BY_NAME[name], ctx)
        assert verdict.status == "clean" and verdict.diff.stream_rows > 0, (name, verdict.status, verdict.diff)
    got = {(m, c): [r, o, i] for m, c, r, o, i in rows(
        spark, shop.GOLD_REVENUE_PER_MINUTE, ctx, F.date_format("window_start", "yyyy-MM-dd'T'HH:mm"), "currency",
        "revenue_cents", "orders", "items")}
    assert got == sent.revenue()

