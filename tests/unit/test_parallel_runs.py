"""The catch-up's scheduler: a flow starts only after the flows whose tables it reads, at most N at once."""

from __future__ import annotations

import threading
import time

import pytest

from lakehouse.streaming.flows import FLOWS
from lakehouse.streaming.parallel_runs import run_flows, upstream
from lakehouse.streaming.runner import FlowRun

WRITER = {t.name: f.name for f in FLOWS for t in (f.target, *f.also_writes) if t.name not in ("quarantine", "late_arrivals")}


def test_every_flow_waits_for_the_flows_writing_what_it_reads_and_no_later_one():
    waits = upstream(FLOWS)
    order = [f.name for f in FLOWS]
    for flow in FLOWS:
        reads = {t.name for t in (*flow.sources, *flow.lookups)}
        assert {WRITER[name] for name in reads if name in WRITER} <= waits[flow.name]
        assert all(order.index(w) < order.index(flow.name) for w in waits[flow.name])
    assert all(not waits[f.name] for f in FLOWS if f.name.startswith("bronze_"))
    assert waits["gold_order_lines_enriched"] == {"dim_customers", "dim_products", "silver_orders"}


class Recorder:
    """A stand-in for run_flow (the scheduler is under test, not Spark): notes when each flow starts and ends."""

    def __init__(self, fail: str | None = None, hold_until: int | None = None):
        self.lock = threading.Lock()
        self.hold_until = hold_until    # each run ends once this many have started (or after 5 s)
        self.all_started = threading.Event()
        self.events: list[tuple[str, str]] = []
        self.running = 0
        self.most = 0
        self.fail = fail

    def __call__(self, spark, flow, ctx) -> FlowRun:
        with self.lock:
            self.events.append(("start", flow.name))
            self.running += 1
            self.most = max(self.most, self.running)
            if sum(kind == "start" for kind, _ in self.events) == self.hold_until:
                self.all_started.set()
        if self.hold_until is None:
            time.sleep(0.02)
        else:
            self.all_started.wait(5)
        with self.lock:
            self.running -= 1
            self.events.append(("end", flow.name))
        if flow.name == self.fail:
            raise RuntimeError(f"{flow.name} broke")
        return FlowRun(flow=flow.name, table=flow.target.name)


@pytest.mark.parametrize("parallel", [1, 3, 8])
def test_flows_start_after_their_inputs_ended_and_never_more_than_parallel_at_once(parallel):
    runner = Recorder()
    outcomes = list(run_flows(None, FLOWS, None, parallel=parallel, run=runner))
    assert sorted(o.flow.name for o in outcomes) == sorted(f.name for f in FLOWS)
    assert all(o.run is not None and o.error is None for o in outcomes)
    position = {event: i for i, event in enumerate(runner.events)}
    for flow, waits in upstream(FLOWS).items():
        for earlier in waits:
            assert position[("end", earlier)] < position[("start", flow)]
    assert runner.most <= parallel
    if parallel > 1:
        assert runner.most > 1   # the five bronze flows have no inputs among the flows: they ran together


def test_a_skipped_flow_is_reported_and_what_reads_it_is_asked_again():
    runner = Recorder()
    blocked: set[str] = set()

    def skip(flow):
        reads = {t.name for t in (*flow.sources, *flow.lookups)}
        if flow.name == "silver_orders" or reads & blocked:
            blocked.add(flow.target.name)
            return f"{flow.name} blocked"
        return None

    outcomes = {o.flow.name: o for o in run_flows(None, FLOWS, None, parallel=3, skip=skip, run=runner)}
    skipped = {name for name, o in outcomes.items() if o.skipped}
    readers_of_orders = {f.name for f in FLOWS if "silver_orders" in {t.name for t in (*f.sources, *f.lookups)}}
    assert skipped == {"silver_orders"} | readers_of_orders
    assert {name for _, name in runner.events} == {f.name for f in FLOWS} - skipped


def test_an_error_is_yielded_and_a_caller_that_stops_waits_for_the_running_flows():
    runner = Recorder(fail="bronze_orders")
    with pytest.raises(RuntimeError, match="bronze_orders broke"):
        for outcome in run_flows(None, FLOWS, None, parallel=3, run=runner):
            if outcome.error:
                raise outcome.error
    started = [name for kind, name in runner.events if kind == "start"]
    ended = [name for kind, name in runner.events if kind == "end"]
    assert sorted(started) == sorted(ended)          # nothing was left running
    assert "silver_orders" not in started            # nothing that read the failed flow's table started


def test_independent_flows_start_without_waiting_for_each_other():
    """A verify's flows each read the live lake: a gold flow may start before the silver flow it reads has ended."""
    runner = Recorder(hold_until=len(FLOWS))   # no sleep to race: a run ends when all have started, or after 5 s
    outcomes = list(run_flows(None, FLOWS, None, parallel=len(FLOWS), run=runner, independent=True))
    assert sorted(o.flow.name for o in outcomes) == sorted(f.name for f in FLOWS)
    first_end = next(i for i, (kind, _) in enumerate(runner.events) if kind == "end")
    assert {name for kind, name in runner.events[:first_end] if kind == "start"} == {f.name for f in FLOWS}


def test_a_free_slot_is_filled_while_the_caller_still_holds_an_ended_flow():
    """The caller may take seconds over an outcome (a catch-up logs its materializations): meanwhile a flow that does
    not read the ended flow's table starts, instead of the slot staying empty until the caller asks for more."""
    runner = Recorder()
    first, started_meanwhile = None, []
    for outcome in run_flows(None, FLOWS, None, parallel=1, run=runner):
        if first is None:
            first = outcome.flow.name
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not started_meanwhile:
                with runner.lock:
                    started_meanwhile = [n for kind, n in runner.events if kind == "start" and n != first]
                time.sleep(0.01)
    assert first == FLOWS[0].name and started_meanwhile, runner.events
    waits = upstream(FLOWS)
    assert first not in waits[started_meanwhile[0]]   # it does not read the table of the flow still being handled


def test_a_topics_flows_run_as_one_unit_after_its_lookups_and_what_the_query_leaves_runs_alone(monkeypatch):
    """With one query per topic, each topic's bronze, silver and the flows reading only that silver are one unit,
    started only after the flows writing their lookups ended; the flows its query did not run (here the orders
    topic's query stops after bronze, and the payments topic's runs none) then start on their own, each after its
    inputs; every flow ends once."""
    from lakehouse.streaming import parallel_runs
    from lakehouse.streaming.topic_runs import TopicRun

    units: list[list[str]] = []
    lock = threading.Lock()

    def fake_topic(spark, group, ctx) -> TopicRun:
        names = [f.name for f in (group.bronze, group.silver, *group.members)]
        with lock:
            units.append(names)
        if group.bronze.name == "bronze_orders":
            return TopicRun(runs={"bronze_orders": FlowRun(flow="bronze_orders", table="bronze_orders")},
                            rest=[group.silver, *group.members])
        if group.bronze.name == "bronze_payments":     # one query cannot take them over: each runs alone
            return TopicRun(rest=[group.bronze, group.silver])
        return TopicRun(runs={n: FlowRun(flow=n, table=n) for n in names})

    monkeypatch.setattr(parallel_runs, "run_topic_group", fake_topic)
    alone = Recorder()
    ended: list[str] = []
    for outcome in run_flows(None, FLOWS, None, parallel=3, run=alone, one_query_per_topic=True):
        assert outcome.error is None and outcome.skipped is None, outcome
        ended.append(outcome.flow.name)
    assert sorted(ended) == sorted(f.name for f in FLOWS)
    assert len(units) == 5 and {u[0] for u in units} == {f.name for f in FLOWS if f.name.startswith("bronze_")}
    # The enriched tables read the dimensions: their topics' queries start after the dimensions' queries ended.
    started = [u[0] for u in units]
    for reader in ("bronze_orders", "bronze_page_views"):
        assert started.index(reader) > max(started.index("bronze_products"), started.index("bronze_customers"))
    # `run` saw every flow: the fused ones' runs handed through it, the rest run by it; the orders topic's flows
    # other than bronze only after bronze_orders had ended.
    seen = [name for kind, name in alone.events if kind == "start"]
    assert sorted(seen) == sorted(f.name for f in FLOWS)
    assert ended.index("bronze_orders") < min(ended.index(n) for n in ("silver_orders", "gold_revenue_per_minute"))
    assert seen.index("bronze_payments") < seen.index("silver_payments")
    assert [u for u in units if u[0] == "bronze_payments"] == [["bronze_payments", "silver_payments"]]
