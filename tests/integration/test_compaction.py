"""Table maintenance and the retention policy against a real broker, real streams and real Delta tables.

- OPTIMIZE and VACUUM run while bronze and silver stream from Kafka (and a plain Delta stream reads
  bronze): the file count drops, VACUUM deletes the compacted files, every stream stays up, and every
  produced record is in each table exactly once.
- The Dagster maintenance job compacts what exists, says why it skips the rest (not created yet, a
  MERGE writer running, a retention shorter than the window), and its retention checks and
  `lakehouse doctor` name the one topic and the one table that keep less than the replay window.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from datetime import datetime, timezone

import dagster as dg
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from delta.tables import DeltaTable

from lakehouse.batch.maintenance import compact_table, layout, vacuum_table
from lakehouse.infra.retention import DAY_MS, DELETED_FILES, duration_ms
from lakehouse.cli import main as cli
from lakehouse.orchestration.location import build_definitions
from lakehouse.orchestration.maintenance import JOB, TABLE_RETENTION_CHECK, TOPIC_RETENTION_CHECK
from lakehouse.orchestration.resources import build_resources
from lakehouse.schemas import sources, tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, ShopGenerator, generate
from lakehouse.streaming.kafka_topics import admin_client, ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow, start_flow
from lakehouse.streaming.sources import read_delta_stream
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

CLEAN = Mix(out_of_order=0, late=0, duplicate=0, malformed=0)
SHORT_RETENTION_S = 15          # the test tables' deleted-file retention: VACUUM may delete what OPTIMIZE removed
PAYMENTS_TOPIC = shop.PAYMENTS.topic
DEFAULT_KEY = "spark.databricks.delta.properties.defaults." + DELETED_FILES.removeprefix("delta.")


def _wait(what: str, ready, timeout_s: float = 180, queries=()) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        for q in queries:
            if q.exception() is not None:
                raise AssertionError(f"stream {q.name} failed while waiting for {what}: {q.exception()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _read_version(query) -> int:
    """The Delta source version a query has read up to (-1 before its first batch)."""
    progress = query.lastProgress
    end = progress.sources[0].endOffset if progress and progress.sources else None
    if isinstance(end, str):
        end = json.loads(end)
    return int(end["reservoirVersion"]) if end else -1


def _coords(spark, path: str) -> list[tuple]:
    return [tuple(r) for r in spark.read.format("delta").load(path).select("topic", "partition", "offset").collect()]


def _page_views(seed: int):
    """Page views of a seeded generator, without end."""
    for record in ShopGenerator(seed=seed, start=datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc), mix=CLEAN):
        if record.topic == shop.PAGE_VIEWS.topic_spec.name:
            yield record


def test_optimize_and_vacuum_while_streams_run_lose_and_duplicate_nothing(spark, broker, tmp_path):
    """Bronze and silver stream page views produced in waves; OPTIMIZE and VACUUM run in between."""
    ensure_topics(broker.kafka_bootstrap, [shop.PAGE_VIEWS.topic_spec])
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=broker.kafka_bootstrap)
    supply = _page_views(41)
    bronze, silver = shop.PAGE_VIEWS.bronze_table, shop.PAGE_VIEWS.silver_table
    bronze_path, silver_path = bronze.path(ctx.lake_root), silver.path(ctx.lake_root)
    mirror_path = str(tmp_path / "mirror")
    sent, deliveries, queries = [], {}, []
    stop = threading.Event()

    def send(bunch) -> None:
        deliveries.update(produce(bunch, bootstrap=broker.kafka_bootstrap).deliveries)
        sent.extend(bunch)

    def keep_producing() -> None:
        # Small bunches until maintenance is done, however long that takes on this machine: small files.
        while not stop.is_set() and len(sent) < 50_000:
            send([next(supply) for _ in range(25)])
            time.sleep(0.5)

    producer = threading.Thread(target=keep_producing)
    before_default = spark.conf.get(DEFAULT_KEY)
    try:
        # The test's tables are created keeping removed files 15 s (the window would be days): the same
        # mechanism as the policy's, a table default of the session, so VACUUM runs with its safety check on.
        spark.conf.set(DEFAULT_KEY, f"interval {SHORT_RETENTION_S} seconds")
        queries.append(start_flow(spark, BY_NAME["bronze_page_views"], ctx, trigger={"processingTime": "1 second"}))
        send([next(supply) for _ in range(200)])
        _wait("bronze's first wave", lambda: DeltaTable.isDeltaTable(spark, bronze_path)
              and spark.read.format("delta").load(bronze_path).count() >= 200, queries=queries)
        queries.append(start_flow(spark, BY_NAME["silver_page_views"], ctx, trigger={"processingTime": "2 seconds"}))
        # A plain Delta stream over bronze, as every downstream flow reads it: it must skip OPTIMIZE's commit.
        queries.append(
            read_delta_stream(spark, bronze, ctx).select("topic", "partition", "offset").writeStream
            .queryName("bronze_mirror").option("checkpointLocation", str(tmp_path / "mirror_checkpoint"))
            .trigger(processingTime="1 second").format("delta").start(mirror_path)
        )
        _wait("silver's table", lambda: DeltaTable.isDeltaTable(spark, silver_path)
              and DeltaTable.isDeltaTable(spark, mirror_path), queries=queries)
        spark.conf.set(DEFAULT_KEY, before_default)
        assert DeltaTable.forPath(spark, bronze_path).detail().first()["properties"][DELETED_FILES] == \
            f"interval {SHORT_RETENTION_S} seconds"

        producer.start()
        _wait("small files", lambda: layout(spark, bronze_path).files >= 8 and layout(spark, silver_path).files >= 3,
              queries=queries)
        compacted = {spec.name: compact_table(spark, spec, ctx.lake_root) for spec in (bronze, silver)}
        optimized_at = time.monotonic()
        for result in compacted.values():
            assert result.status == "compacted", result
            assert result.files_before >= 3 and result.files_after < result.files_before, result
            assert result.files_removed > result.files_added > 0, result
        # VACUUM deletes files older than the retention that no version references: before it does, the readers
        # must have moved past the compacted files (the policy's rule: retention > the slowest stream's lag).
        version = compacted[bronze.name].version
        _wait("the readers to pass OPTIMIZE", lambda: min(_read_version(q) for q in queries[1:]) > version,
              queries=queries)
        time.sleep(max(0.0, SHORT_RETENTION_S + 1 - (time.monotonic() - optimized_at)))
        sent_before_vacuum = len(sent)
        vacuumed = {spec.name: vacuum_table(spark, spec, ctx.lake_root, window_ms=SHORT_RETENTION_S * 1000)
                    for spec in (bronze, silver)}
        for name, result in vacuumed.items():
            assert result.status == "vacuumed", result
            assert result.files_deleted >= compacted[name].files_removed, (result, compacted[name])
            assert result.bytes_deleted > 0
        assert len(sent) > sent_before_vacuum, "records must keep arriving while VACUUM runs"
        stop.set()
        producer.join()

        want = {(d.topic, d.partition, d.offset) for d in deliveries.values()}
        ids = {r.event["event_id"] for r in sent}
        assert len(deliveries) == len(sent) == len(ids)
        _wait("the final catch-up", lambda: len(_coords(spark, bronze_path)) >= len(want)
              and spark.read.format("delta").load(silver_path).count() >= len(ids)
              and len(_coords(spark, mirror_path)) >= len(want), queries=queries)
        for q in queries:
            assert q.isActive and q.exception() is None, q.name
    finally:
        stop.set()
        if producer.is_alive():
            producer.join()
        spark.conf.set(DEFAULT_KEY, before_default)
        for q in queries:
            q.stop()

    for path in (bronze_path, mirror_path):
        got = _coords(spark, path)
        assert len(got) == len(set(got)) == len(want) and set(got) == want, path
    silver_ids = [r.event_id for r in spark.read.format("delta").load(silver_path).select("event_id").collect()]
    assert len(silver_ids) == len(set(silver_ids)) and set(silver_ids) == ids
    # The streams committed before and after both: maintenance ran under them, not between them.
    ops = [r["operation"] for r in DeltaTable.forPath(spark, bronze_path).history().orderBy("version").collect()]
    assert "STREAMING UPDATE" in ops[ops.index("OPTIMIZE") + 1:]
    assert "STREAMING UPDATE" in ops[ops.index("VACUUM END") + 1:]


def _alter_topic(bootstrap: str, name: str, retention_ms: int) -> None:
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client(bootstrap)   # kept referenced until the futures resolve
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def _doctor(settings, monkeypatch, capsys) -> tuple[int, str]:
    for name in ("home", "jars_dir", "lake_root", "kafka_port", "kafka_controller_port", "replay_window"):
        monkeypatch.setenv(f"LAKEHOUSE_{name.upper()}", str(getattr(settings, name)))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        code = cli.main(["doctor"])
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:], root.level = handlers, level
    return code, capsys.readouterr().out


def _fail_lines(out: str) -> set[tuple[str, str]]:
    rows = [[c.strip() for c in line.split("|")] for line in out.splitlines() if line.count("|") == 5]
    return {(r[1], r[2]) for r in rows if r[5] == "FAIL"}


def test_maintenance_job_and_doctor_name_what_does_not_cover_the_window(spark, broker, tmp_path, monkeypatch, capsys):
    """Compaction skips what it must, and saying why; one short topic and one short table fail the checks and doctor."""
    settings = dataclasses.replace(broker, lake_root=str(tmp_path / "lake"))
    ctx = FlowContext(lake_root=settings.lake_root, kafka_bootstrap=settings.kafka_bootstrap)
    window_ms = duration_ms(settings.replay_window)
    ensure_topics(settings.kafka_bootstrap, topics.ALL, replay_window_ms=window_ms)
    records = generate(600, seed=5, start=datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc), mix=CLEAN)
    orders = [r for r in records if r.topic == shop.ORDERS.topic_spec.name]
    views = [r for r in records if r.topic == shop.PAGE_VIEWS.topic_spec.name]
    for part in range(3):   # three catch-ups: at least three small files
        produce(orders[part::3], bootstrap=settings.kafka_bootstrap)
        run_flow(spark, BY_NAME["bronze_orders"], ctx)
    produce(views, bootstrap=settings.kafka_bootstrap)
    run_flow(spark, BY_NAME["bronze_page_views"], ctx)

    # A table written by MERGE whose writer is running in this process: compacting it would fail that writer.
    gold = shop.GOLD_REVENUE_PER_MINUTE.path(settings.lake_root)
    spark.sql("SELECT timestamp'2026-11-23 10:00:00' + make_interval(0, 0, 0, 0, 0, id) AS window_start, "
              "'EUR' AS currency, id AS revenue_cents FROM range(20)").repartition(4).write.format("delta").save(gold)
    DeltaTable.forPath(spark, gold).alias("t").merge(
        spark.sql("SELECT timestamp'2026-11-23 10:00:00' AS window_start, 'EUR' AS currency, 1L AS revenue_cents")
        .alias("s"), "t.window_start = s.window_start AND t.currency = s.currency",
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    # One table and one topic keep less than the window (7 days): one hour.
    short_table = shop.PAGE_VIEWS.bronze_table
    spark.sql(f"ALTER TABLE delta.`{short_table.path(settings.lake_root)}` "
              f"SET TBLPROPERTIES ('{DELETED_FILES}' = 'interval 1 hour')")
    _alter_topic(settings.kafka_bootstrap, PAYMENTS_TOPIC, 3_600_000)

    # On the session the job's resource uses: a query is visible only to the session that started it.
    writer = (build_resources(settings)["spark"].session().readStream.format("rate").option("rowsPerSecond", 1).load().writeStream
              .queryName("gold_revenue_per_minute").format("noop").trigger(processingTime="30 seconds").start())
    try:
        result = build_definitions(settings).resolve_job_def(JOB).execute_in_process(
            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    finally:
        writer.stop()
    assert result.success
    meta = {e.event_specific_data.materialization.asset_key.to_user_string():
            {k: getattr(v, "value", v) for k, v in e.event_specific_data.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}
    compaction = meta["compaction"]["per_table"]
    orders_row = compaction["bronze_orders"]
    assert orders_row["status"] == "compacted"
    assert orders_row["files_before"] >= 3 and orders_row["files_after"] < orders_row["files_before"]
    assert compaction["gold_revenue_per_minute"]["status"] == "skipped"
    assert "gold_revenue_per_minute is running in this process" in compaction["gold_revenue_per_minute"]["reason"]
    assert (compaction["gold_sessions"]["status"], compaction["gold_sessions"]["reason"]) == (
        "skipped", "not created yet: its flow has written no rows")
    assert meta["compaction"]["files_after"] < meta["compaction"]["files_before"]
    assert meta["compaction"]["tables_compacted"] == 2    # bronze_orders and bronze_page_views
    assert len(meta["compaction"]["tables"].records) == len(tables.ALL)
    vacuum = meta["vacuum"]["per_table"]
    assert vacuum["bronze_orders"]["status"] == "vacuumed" and vacuum["bronze_orders"]["retention"] == "interval 7 days"
    assert vacuum["bronze_page_views"]["status"] == "skipped"
    assert "shorter than the replay window" in vacuum["bronze_page_views"]["reason"]

    checks = {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()}
    assert {name for (name, check), c in checks.items() if check == TOPIC_RETENTION_CHECK and not c.passed} == {
        "kafka/shop_payments_v1"}
    assert len([k for k in checks if k[1] == TOPIC_RETENTION_CHECK]) == len(topics.ALL)
    table_check = checks[("vacuum", TABLE_RETENTION_CHECK)]
    assert not table_check.passed and "bronze_page_views" in table_check.description

    code, out = _doctor(settings, monkeypatch, capsys)
    assert code == 1, out
    assert _fail_lines(out) == {(PAYMENTS_TOPIC, "retention.ms"), (short_table.name, DELETED_FILES)}, out
    assert f"--entity-name {PAYMENTS_TOPIC} --add-config retention.ms={7 * DAY_MS}" in out
    assert f"ALTER TABLE delta.`{short_table.path(settings.lake_root)}` SET TBLPROPERTIES" in out
    assert "bronze_orders" in out and "gold_sessions" in out   # a present table listed; an absent one named as such

    # Done as the two sentences say, doctor is content.
    _alter_topic(settings.kafka_bootstrap, PAYMENTS_TOPIC, 7 * DAY_MS)
    spark.sql(f"ALTER TABLE delta.`{short_table.path(settings.lake_root)}` "
              f"SET TBLPROPERTIES ('{DELETED_FILES}' = 'interval {settings.replay_window}')")
    code, out = _doctor(settings, monkeypatch, capsys)
    assert code == 0 and _fail_lines(out) == set(), out
