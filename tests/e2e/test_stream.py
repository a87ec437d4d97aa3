"""`lakehouse stream` as a user runs it: events reach silver and gold while it runs, SIGTERM stops it cleanly,
triggered and continuous runs take turns on one lake without loss or duplicates, Dagster sees the updates,
a stopped stream's caught-up tables stay fresh, the lag check fires when it is held back, and the
metrics table fills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest

from lakehouse.infra.settings import Settings
from lakehouse.orchestration.assets import topic_key
from lakehouse.orchestration.streams import (
    FRESHNESS_CHECK, STREAM_TAG, build_stream_sensor, freshness_evaluation, freshness_evaluations, lag_evaluation,
)
from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate
from lakehouse.streaming.health import latest_version, stream_health
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.pipelines import shop


LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
STREAMED = ("gold_revenue_per_minute",)   # and what it needs: bronze_orders, silver_orders
FLOWS = ("bronze_orders", "silver_orders", "gold_revenue_per_minute")
NO_LATE = Mix(duplicate=0.05, malformed=0.03, late=0.0, out_of_order=0.0)


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_JARS_DIR": settings.jars_dir,
        "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_STREAM_REPORT_EVERY": "2 seconds",
        "LAKEHOUSE_QUALITY": "false",
        "LAKEHOUSE_STREAM_TRIGGER": "1 second",   # these tests wait for rows, not for the sizing of triggers
    })
    env.update(extra)
    return env


class Stream:
    """`lakehouse stream` in its own process group, stopped by SIGTERM (or killed) by PID."""

    started: list["Stream"] = []

    def __init__(self, settings: Settings, log: Path, *tables_: str, **env: str):
        self.log = log
        self.proc = subprocess.Popen([str(LAKEHOUSE), "stream", *tables_], env=env_for(settings, **env),
                                     stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        Stream.started.append(self)

    @classmethod
    def kill_all(cls) -> None:
        """Whatever a failed test left running: the process group, by PID."""
        for stream in cls.started:
            if stream.alive():
                os.killpg(stream.proc.pid, signal.SIGKILL)
                stream.proc.wait()
        cls.started.clear()

    def terminate(self, timeout: float = 120) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture(autouse=True)
def no_stream_left_running():
    yield
    Stream.kill_all()


def send(settings: Settings, seed: int, start: datetime, n: int = 900):
    records = generate(n, seed=seed, start=start, mix=NO_LATE)
    report = produce(records, bootstrap=settings.kafka_bootstrap)
    assert report.delivered == n
    return records, report


def read(spark, spec, ctx):
    """The table's rows; none while its first commit is still being written (the folder exists before it).

    The log is listed, not asked through DeltaTable.isDeltaTable: that answers from the session's cached
    DeltaLog, which stays "no table" for as long as it is cached if it was first seen between the log
    folder's creation and its first commit.
    """
    path = spec.path(ctx.lake_root)
    if latest_version(path) is None:
        return []
    return spark.read.format("delta").load(path).collect()


def wait_until(check, what: str, stream: Stream | None, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if stream is not None and not stream.alive():
            pytest.fail(f"lakehouse stream exited while waiting for {what}: {stream.log.read_text()[-3000:]}")
        time.sleep(2)
    pytest.fail(f"timed out waiting for {what}; stream log: {stream.log.read_text()[-3000:] if stream else ''}")


def expected_revenue(orders: list[dict]) -> dict:
    """Revenue, orders and items per minute and currency, in plain Python over the produced orders."""
    acc: dict = defaultdict(lambda: [0, 0, 0])
    for o in orders:
        t = datetime.fromisoformat(o["occurred_at"].replace("Z", "+00:00")).astimezone(timezone.utc)
        a = acc[(t.replace(second=0, microsecond=0, tzinfo=None), o["currency"])]
        a[0] += o["total_cents"]
        a[1] += 1
        a[2] += sum(line["quantity"] for line in o["lines"])
    return dict(acc)


def test_stream_alternates_with_catch_up_and_dagster_sees_it(spark, broker, tmp_path, monkeypatch):
    settings = broker
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap=settings.kafka_bootstrap)
    sent: list = []
    coords: set = set()

    def produce_phase(seed: int, hour_minute: tuple[int, int]) -> None:
        records, report = send(settings, seed, datetime(2026, 11, 22, *hour_minute, tzinfo=timezone.utc))
        sent.extend(records)
        coords.update((d.topic, d.partition, d.offset) for d in report.deliveries.values()
                      if d.topic == shop.ORDERS.topic_spec.name)

    def valid_orders() -> dict[str, dict]:
        return {r.event["event_id"]: r.event for r in sent if r.topic == shop.ORDERS.topic_spec.name and r.kind == "valid"}

    def silver_complete() -> bool:
        return {r.event_id for r in read(spark, shop.ORDERS.silver_table, ctx)} == set(valid_orders())

    def gold_complete() -> bool:
        rows = read(spark, shop.GOLD_REVENUE_PER_MINUTE, ctx)
        return sum(r.orders for r in rows) == len(valid_orders())

    log = tmp_path / "stream.log"
    # 1. Continuous: produce while the stream runs; events reach silver and gold.
    stream = Stream(settings, log, *STREAMED)
    produce_phase(41, (12, 0))
    wait_until(lambda: silver_complete() and gold_complete(), "phase 1 in silver and gold", stream)
    instance = dg.DagsterInstance.from_config(settings.dagster_home)
    wait_until(lambda: all(_stream_reports(instance, t) for t in ("silver_orders", "gold_revenue_per_minute")),
               "the stream's reports in Dagster", stream, timeout=60)
    assert freshness_evaluation(instance, "gold_revenue_per_minute", limit_s=30).passed

    # SIGTERM: each query finishes its batch and stops; exit 0.
    assert stream.terminate() == 0, log.read_text()[-3000:]
    assert "stopped after" in log.read_text()
    assert not Path(settings.home, "stream.pid").exists()

    # Stopped on purpose and caught up: still fresh once the limit has passed (a stopped stream is no failure).
    time.sleep(4)
    [stopped] = freshness_evaluations(replace(settings, stream_freshness="3 seconds"), instance,
                                      ["gold_revenue_per_minute"])
    assert stopped.passed and stopped.check_name == FRESHNESS_CHECK, stopped.description

    # 2. Held back (stopped while events arrive): the lag check fires with the exact lag.
    before = len(coords)
    produce_phase(42, (12, 30))
    phase2 = len(coords) - before
    health = stream_health([BY_NAME[f] for f in FLOWS], ctx)
    lag = lag_evaluation(shop.ORDERS.topic_spec, health, limit=10)
    assert not lag.passed
    assert _value(lag.metadata["max_lag_records"]) == phase2
    assert lag_evaluation(shop.ORDERS.topic_spec, health, limit=phase2).passed

    # The sensor, as the daemon runs it: topics observed as they are now, both checks red.
    for name, value in env_for(settings, LAKEHOUSE_STREAM_FRESHNESS="3 seconds", LAKEHOUSE_STREAM_LAG_LIMIT="10").items():
        if name.startswith("LAKEHOUSE_"):
            monkeypatch.setenv(name, value)
    result = build_stream_sensor()(dg.build_sensor_context(instance=instance))
    # Records were appended since the topic's last materialization: the sensor records a new one, so the topic's
    # overview shows what it observed.
    observed = {e.asset_key: e for e in result.asset_events if isinstance(e, dg.AssetMaterialization)}
    orders = observed[topic_key(shop.ORDERS.topic_spec)].metadata
    assert _value(orders["retained_records"]) == len(coords)
    assert _value(orders["consumer_lag"])["bronze_orders"] and _value(orders["lag_records"]) == phase2
    checks = {(e.asset_key.to_user_string(), e.check_name): e.passed for e in result.asset_events
              if isinstance(e, dg.AssetCheckEvaluation)}
    # Only bronze is behind its input (the topic); silver and gold are caught up with theirs.
    assert checks[("bronze_orders", FRESHNESS_CHECK)] is False
    assert checks[("silver_orders", FRESHNESS_CHECK)] is True and checks[("gold_revenue_per_minute", FRESHNESS_CHECK)]
    severity = {e.asset_key.to_user_string(): e.severity for e in result.asset_events
                if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == FRESHNESS_CHECK}
    assert severity["bronze_orders"] == dg.AssetCheckSeverity.WARN
    assert checks[(topic_key(shop.ORDERS.topic_spec).to_user_string(), "consumer_lag")] is False
    assert checks[(topic_key(topics.BY_NAME["shop.payments.v1"]).to_user_string(), "consumer_lag")] is True   # nobody reads it

    # 3. Triggered: a catch-up on the same lake and checkpoints takes the new events.
    for name in FLOWS:
        run_flow(spark, BY_NAME[name], ctx)
    assert silver_complete() and gold_complete()

    # 4. Continuous again: it resumes where the catch-up stopped. Its triggers are sized (the default), here
    # for 16 task slots, which makes them short: bronze and silver every second, gold every four.
    stream = Stream(settings, log, *STREAMED, LAKEHOUSE_STREAM_TRIGGER="auto", LAKEHOUSE_SPARK_MASTER="local[16]")
    produce_phase(43, (13, 0))
    wait_until(lambda: silver_complete() and gold_complete(), "phase 3 in silver and gold", stream)
    assert stream.terminate() == 0, log.read_text()[-3000:]
    said = log.read_text()
    assert "triggers sized for 16 cores and 3 queries: bronze every 1 second, silver every 1 second, gold every 4 " \
           "seconds; their fixed cost takes about 4.0 cores; the rest sustains about" in said, said[-3000:]
    assert "gold_revenue_per_minute (trigger every 4 seconds)" in said

    # Nothing lost, nothing twice, in any layer.
    bronze = [(r.topic, r.partition, r.offset) for r in read(spark, shop.ORDERS.bronze_table, ctx)]
    assert len(bronze) == len(set(bronze)) and set(bronze) == coords
    ids = [r.event_id for r in read(spark, shop.ORDERS.silver_table, ctx)]
    assert len(ids) == len(set(ids)) and set(ids) == set(valid_orders())
    got = {(r.window_start, r.currency): [r.revenue_cents, r.orders, r.items]
           for r in read(spark, shop.GOLD_REVENUE_PER_MINUTE, ctx)}
    assert got == expected_revenue(list(valid_orders().values()))

    # The metrics table holds every continuous micro-batch of bronze: its rows add up to what the stream read.
    metrics = spark.read.format("delta").load(tables.STREAM_PROGRESS.path(ctx.lake_root))
    streamed = {r.query: r.n for r in metrics.where("mode = 'continuous'").groupBy("query")
                .agg({"input_rows": "sum"}).withColumnRenamed("sum(input_rows)", "n").collect()}
    assert set(streamed) >= set(FLOWS)
    # Phase 2's orders were read by the catch-up, which the continuous rows do not count.
    assert streamed["bronze_orders"] == len(coords) - phase2
    assert metrics.where("mode = 'continuous' AND query = 'bronze_orders'").selectExpr(
        "max(lag_records)").first()[0] is not None


def _stream_reports(instance: dg.DagsterInstance, table: str) -> list:
    records = instance.fetch_materializations(dg.AssetKey(table), limit=50).records
    return [r for r in records if r.asset_materialization.metadata.get("source").value == STREAM_TAG]


def _value(meta):
    return getattr(meta, "value", getattr(meta, "data", meta))
