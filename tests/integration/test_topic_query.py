"""A topic's flows as one query (LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC): the same tables as the flows' own queries,
a batch cut short between its writes recovered, a member that fails let go to its own query, and the flows' own
runs taking over: nothing lost, nothing twice."""

from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

import lakehouse.streaming.gold_batches as gold_batches
import lakehouse.streaming.silver_batches as silver_batches
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.continuous import Supervisor
from lakehouse.streaming.delta_log import commits_after
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.health import stream_health
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.topic_query import checkpoint as topic_checkpoint, start_topic_query, topic_groups
from lakehouse.streaming.positions import parse_metadata, read_text
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

FLOWS = [BY_NAME["bronze_orders"], BY_NAME["silver_orders"], BY_NAME["gold_revenue_per_minute"]]
MIX = Mix(duplicate=0.05, malformed=0.05, late=0.0, out_of_order=0.0)


class Sent:
    """What was produced, and what each table must hold, in plain Python over it."""

    def __init__(self, settings, start: datetime = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)):
        self.settings = settings
        self.start = start          # event time of minute 0 of `send`
        self.records: list = []
        self.deliveries: list = []

    def send(self, seed: int, minute: int, n: int = 600) -> None:
        records = generate(n, seed=seed, start=self.start + timedelta(minutes=minute), mix=MIX)
        report = produce(records, bootstrap=self.settings.kafka_bootstrap)
        assert report.delivered == n
        self.records.extend(records)
        self.deliveries.extend((records[i], d) for i, d in report.deliveries.items())

    def coords(self, kind: str | None = None) -> set:
        return {(d.topic, d.partition, d.offset) for r, d in self.deliveries
                if d.topic == shop.ORDERS.topic_spec.name and (kind is None or r.kind == kind)}

    def valid_ids(self) -> set:
        return {r.event["event_id"] for r in self.records if r.topic == shop.ORDERS.topic_spec.name and r.kind == "valid"}

    def revenue(self) -> dict:
        """(minute, currency) -> [revenue, orders, items] over the valid orders sent (no late or early ones)."""
        out: dict = defaultdict(lambda: [0, 0, 0])
        for r in self.records:
            if r.topic == shop.ORDERS.topic_spec.name and r.kind == "valid":
                at = datetime.fromisoformat(r.event["occurred_at"].replace("Z", "+00:00")).astimezone(timezone.utc)
                acc = out[(at.strftime("%Y-%m-%dT%H:%M"), r.event["currency"])]
                acc[0] += r.event["total_cents"]
                acc[1] += 1
                acc[2] += sum(line["quantity"] for line in r.event["lines"])
        return dict(out)


def rows(spark, spec, ctx, *cols):
    path = spec.path(ctx.lake_root)
    if not has_delta_log(spark, path):
        return []
    return [tuple(r) for r in spark.read.format("delta").load(path).select(*cols).collect()]


def ids_in(spark, path: str, after_version: int) -> list:
    """Event ids the table's commits after `after_version` added."""
    now = spark.read.format("delta").load(path).select("event_id")
    return [r[0] for r in now.subtract(spark.read.format("delta").option("versionAsOf", after_version).load(path)
                                       .select("event_id")).collect()]


def query_id(spark, checkpoint: str) -> str:
    return json.loads(read_text(spark, f"{checkpoint}/metadata"))["id"]


def quarantined(spark, ctx):
    return [r for r in rows(spark, tables.QUARANTINE, ctx, "topic", "partition", "offset") if r[0] == shop.ORDERS.topic_spec.name]


class Running:
    """A Supervisor running one query per topic on its own thread, over the test's Spark session."""

    def __init__(self, spark, ctx, flows=FLOWS, **options):
        self.reports: list = []
        self.supervisor = Supervisor(spark, flows, ctx, one_query_per_topic=True, record_metrics=False, backoff_s=0.5,
                                     report=self.reports.extend, report_every_s=1.0, **options)
        self.stop = threading.Event()
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.supervisor.run(self.stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error.append(exc)

    def wait(self, check, what: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert not self.error, f"the stream failed while waiting for {what}: {self.error[0]}"
            if check():
                return
            time.sleep(1)
        pytest.fail(f"timed out waiting for {what}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(180)
        assert not self.thread.is_alive() and not self.error, self.error


def test_topic_query_writes_every_layer_recovers_a_cut_batch_lets_a_failed_member_go_and_hands_over(spark, broker, tmp_path, monkeypatch):
    settings = broker
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=settings.kafka_bootstrap)
    sent = Sent(settings)
    silver_path = shop.ORDERS.silver_table.path(ctx.lake_root)

    def revenue() -> dict:
        got = rows(spark, shop.GOLD_REVENUE_PER_MINUTE, ctx, F.date_format("window_start", "yyyy-MM-dd'T'HH:mm"),
                   "currency", "revenue_cents", "orders", "items")
        return {(m, c): [r, o, i] for m, c, r, o, i in got}

    def complete() -> bool:
        return ({r[0] for r in rows(spark, shop.ORDERS.silver_table, ctx, "event_id")} == sent.valid_ids()
                and set(quarantined(spark, ctx)) == sent.coords("malformed") and revenue() == sent.revenue())

    def exact() -> None:
        bronze = rows(spark, shop.ORDERS.bronze_table, ctx, "topic", "partition", "offset")
        assert len(bronze) == len(set(bronze)) and set(bronze) == sent.coords()
        ids = [r[0] for r in rows(spark, shop.ORDERS.silver_table, ctx, "event_id")]
        assert len(ids) == len(set(ids)) and set(ids) == sent.valid_ids()
        cut = quarantined(spark, ctx)
        assert len(cut) == len(set(cut)) and set(cut) == sent.coords("malformed")
        assert revenue() == sent.revenue()

    # 1. Before the stream: a catch-up by the flows' own queries (what the topic query's start takes over from).
    sent.send(61, 0)
    for flow in FLOWS:
        run_flow(spark, flow, ctx)
    exact()
    silver_before = commits_after(spark, silver_path, None)[-1].version

    # 2. One query: events sent while it runs reach bronze, silver and gold through its own batches.
    gold_path = shop.GOLD_REVENUE_PER_MINUTE.path(ctx.lake_root)
    gold_before = commits_after(spark, gold_path, None)[-1].version
    stream = Running(spark, ctx)
    stream.wait(lambda: "silver_orders" in stream.supervisor.active(), "the topic query to start")
    sent.send(62, 10)
    stream.wait(complete, "phase 2 in silver and quarantine")
    exact()
    # Silver's commits record, in the silver flow's own form, the one bronze version each batch read.
    query = query_id(spark, topic_checkpoint(FLOWS[1], ctx))
    records = [parse_metadata(c.user_metadata) for c in commits_after(spark, silver_path, silver_before)]
    assert records and all(r["flow"] == "silver_orders" and r["query"] == query and r["sources"]["bronze_orders"]["version"]
                           == r["from"]["bronze_orders"]["version"] + 1 for r in records)
    # Gold's commits record the one silver version each batch read, which silver's commit of that batch made.
    silver_of = {(r["query"], r["batch"]): c.version for c in commits_after(spark, silver_path, silver_before)
                 if (r := parse_metadata(c.user_metadata))}
    golds = [r for c in commits_after(spark, gold_path, gold_before) if (r := parse_metadata(c.user_metadata))
             and r.get("flow") == "gold_revenue_per_minute" and "sources" in r]
    assert golds and all(r["query"] == query and r["from"]["silver_orders"]["version"] == silver_of[(query, r["batch"])]
                         for r in golds)
    assert stream.supervisor.active() == [f.name for f in FLOWS]
    assert len(spark.streams.active) == 1
    # What Dagster is sent: each table's own report, with the rows its writer wrote.
    stream.wait(lambda: {r.table for r in stream.reports if r.rows_written} == {f.target.name for f in FLOWS},
                "a report with rows from each table")
    written = defaultdict(int)
    for r in stream.reports:
        written[r.table] += r.rows_written
    assert written["silver_orders"] == len(ids_in(spark, silver_path, silver_before))
    # What `lakehouse status` and the lag checks read: every flow caught up, from the topic query's checkpoint.
    stream.wait(lambda: all(h.caught_up for h in stream_health(FLOWS, ctx)), "every flow caught up in the health")

    # 3. A batch cut short after its quarantine append, before silver's: the query fails, the restart hands
    # over through the flows (silver replays the batch; Delta skips its quarantine append) and goes on.
    real = silver_batches.append_once
    quarantine_path = tables.QUARANTINE.path(ctx.lake_root)
    with_quarantine: set[int] = set()
    cut: list[tuple[str, int]] = []

    def append_once(df, path, **kwargs):
        if path == quarantine_path:
            with_quarantine.add(kwargs["batch_id"])
        elif path == silver_path and not cut and kwargs["batch_id"] in with_quarantine:
            cut.append((kwargs["app_id"], kwargs["batch_id"]))
            raise RuntimeError("cut short between quarantine and silver")
        return real(df, path, **kwargs)

    monkeypatch.setattr(silver_batches, "append_once", append_once)
    for seed in range(63, 70):      # until a batch with malformed orders comes
        sent.send(seed, 20 + seed - 63, n=300)
        stream.wait(lambda: complete() or bool(cut), "a batch with quarantine rows")
        if cut:
            break
    assert cut, "no batch wrote quarantine rows"
    stream.wait(complete, "the cut batch's rows in silver after the restart")
    assert "cut short between quarantine and silver" in stream.supervisor.running["silver_orders"].last_error
    # The silver flow's catch-up replayed the cut batch under the topic query's id and batch number.
    replayed = [parse_metadata(c.user_metadata) for c in commits_after(spark, silver_path, None)]
    assert any(r["query"] == query and r["batch"] == cut[0][1] and r.get("final") for r in replayed if r and "query" in r)
    sent.send(80, 35)
    stream.wait(complete, "phase 4 after the restart")
    monkeypatch.setattr(silver_batches, "append_once", real)

    # 3b. A member whose batch fails twice (in the query, then in the restart's catch-up) is left out: the
    # topic's query goes on with bronze and silver, and the member as its own query from its recorded positions.
    failed: list[int] = []
    call = gold_batches.EventTimeWriter.__call__

    def fail_twice(self, batch, batch_id):
        if len(failed) < 2:
            failed.append(batch_id)
            raise ValueError("a member's batch failed")
        return call(self, batch, batch_id)

    monkeypatch.setattr(gold_batches.EventTimeWriter, "__call__", fail_twice)
    sent.send(81, 38)
    stream.wait(lambda: len(failed) == 2 and complete(), "the failed member's rows through its own query")
    gold = stream.supervisor.running["gold_revenue_per_minute"]
    assert gold.carried_by is None    # left out of the topic's query
    assert "gold_revenue_per_minute failed in the query of shop.orders.v1" in \
        stream.supervisor.running["silver_orders"].last_error
    stream.wait(lambda: len(spark.streams.active) == 2, "the topic's query and the member's own")
    sent.send(82, 40)
    stream.wait(complete, "phase 3b's second send")
    stream.close()
    exact()
    assert not any(q.isActive for q in spark.streams.active)

    # 4. The flows' own queries take over where the topic query stopped: silver's checkpoint is rebuilt
    # from the topic query's records, not started over, under an id of its own.
    last = query_id(spark, topic_checkpoint(FLOWS[1], ctx))
    held = len(sent.coords())
    sent.send(72, 50)
    assert [h.lag_records for h in stream_health(FLOWS[:2], ctx)] == [len(sent.coords()) - held] * 2
    runs = {flow.name: run_flow(spark, flow, ctx) for flow in FLOWS}
    exact()
    assert query_id(spark, FLOWS[1].checkpoint(ctx)) != last

    # 5. A start whose earlier catch-up of bronze failed (the broker went away during the stream's start) while
    # silver's and gold's succeeded: bronze catches up now, appending rows those catch-ups never saw, so they
    # run again before the query starts after what bronze holds; reused, those rows never reach silver.
    sent.send(73, 55)
    group = topic_groups(FLOWS)["silver_orders"]
    started = start_topic_query(spark, group, ctx, trigger={"processingTime": "1 second"},
                                caught_up={name: run for name, run in runs.items() if name != "bronze_orders"})

    def until_complete():
        deadline = time.monotonic() + 120
        while not complete() and time.monotonic() < deadline:
            assert started.query.isActive, started.query.exception()
            time.sleep(1)

    try:
        until_complete()
        exact()
        sent.send(74, 60)   # taken by the topic query itself (its start's catch-ups took the ones before)
        until_complete()
    finally:
        started.query.stop()
    exact()

    # 6. After that run silver's and the member's records all name the topic query's id. Their own queries catch
    # up at once, as `lakehouse run` and the stream's start do: each rebuilt checkpoint has an id of its own (with
    # the topic query's, Spark refuses the second with CONCURRENT_QUERY or stops the first).
    fused = str(started.query.id)
    for flow in FLOWS[1:]:
        newest = [r for c in commits_after(spark, flow.target.path(ctx.lake_root), None) if (r := parse_metadata(c.user_metadata))]
        assert newest[-1]["query"] == fused, flow.name
    sent.send(75, 65)
    run_flow(spark, FLOWS[0], ctx)
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(run_flow, spark, flow, ctx) for flow in FLOWS[1:]]:
            done.result()
    rebuilt = {query_id(spark, flow.checkpoint(ctx)) for flow in FLOWS[1:]}
    assert len(rebuilt) == 2 and fused not in rebuilt
    run_flow(spark, FLOWS[2], ctx)   # what silver appended while the member ran
    exact()
