"""The main job: broker, topics, a batch of events with faults, every asset, a gold query, counts per layer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.batch.catalog import read_table
from lakehouse.infra.jars import fetch_jars
from lakehouse.infra.kafka_broker import local_node
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import get_spark, stop_spark
from lakehouse.orchestration import runs
from lakehouse.cli.quality import HEADER as QUALITY_HEADER
from lakehouse.cli.quality import quality_report
from lakehouse.serving.sql import format_table, run_sql
from lakehouse.schemas import sources, tables
from lakehouse.schemas.pipeline import Mix, active_pipeline
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.producer import ProduceReport, produce

DEMO_COMMAND = "lakehouse demo"  # the tag its runs of the catch_up job carry
LATE_QUERY = "SELECT flow, count(*) AS late, max(lateness_ms) DIV 1000 AS max_late_s FROM late_arrivals GROUP BY flow ORDER BY flow"


# Every declared source, the dimensions' changelogs too (their silver balances like any other).
def entities() -> tuple:
    """(topic, bronze, silver) of every declared source of the pipeline."""
    return tuple((source.topic_spec, source.bronze_table, source.silver_table) for source in sources.SOURCES)


def _sum_reports(total: ProduceReport | None, more: ProduceReport) -> ProduceReport:
    """What the rounds sent and the broker acknowledged, together."""
    if total is None:
        return more
    return ProduceReport(
        sent=total.sent + more.sent, delivered=total.delivered + more.delivered, failed=total.failed + more.failed,
        by_topic=total.by_topic + more.by_topic, by_kind=total.by_kind + more.by_kind,
        deliveries={**total.deliveries, **more.deliveries}, errors=total.errors + more.errors,
        duration_s=round(total.duration_s + more.duration_s, 2),
    )


class DemoFailed(RuntimeError):
    """A step of the main job failed; the message names it."""


@dataclass
class LayerCounts:
    """Rows per layer for one entity; `duplicates` is what silver dropped as already seen."""

    entity: str
    bronze: int
    silver: int
    quarantine: int
    late: int

    @property
    def duplicates(self) -> int:
        return self.bronze - self.silver - self.quarantine - self.late


@dataclass
class DemoReport:
    produced: ProduceReport | None = None
    counts: list[LayerCounts] = field(default_factory=list)
    gold_rows: list[tuple] = field(default_factory=list)
    gold_results: dict[str, list[tuple]] = field(default_factory=dict)
    late_by_flow: dict[str, int] = field(default_factory=dict)
    quality_report: str | None = None       # path of the Data Docs' index.html
    wall_s: float = 0.0


def layer_counts(settings: Settings) -> list[LayerCounts]:
    """Count bronze, silver, quarantine and late-arrival rows per entity straight from the Delta tables."""
    spark = get_spark(settings)
    def count(spec) -> int:
        # A table is created by its first row: a topic nobody has sent to yet has none.
        exists = DeltaTable.isDeltaTable(spark, spec.path(settings.lake_root))
        return read_table(spark, spec, settings.lake_root).count() if exists else 0

    per_schema = {}
    if DeltaTable.isDeltaTable(spark, tables.QUARANTINE.path(settings.lake_root)):
        quarantine = read_table(spark, tables.QUARANTINE, settings.lake_root)
        per_schema = dict(quarantine.groupBy("schema").count().collect())
    per_table = {}
    if DeltaTable.isDeltaTable(spark, tables.LATE_ARRIVALS.path(settings.lake_root)):
        late = read_table(spark, tables.LATE_ARRIVALS, settings.lake_root)
        per_table = dict(late.groupBy("table").count().collect())
    counts = []
    for topic, bronze, silver in entities():
        counts.append(
            LayerCounts(
                entity=topic.schema.entity,
                bronze=count(bronze),
                silver=count(silver),
                quarantine=per_schema.get(topic.name, 0),
                late=per_table.get(silver.name, 0),
            )
        )
    return counts


def quarantine_reasons(settings: Settings) -> list[tuple]:
    spark = get_spark(settings)
    df = read_table(spark, tables.QUARANTINE, settings.lake_root)
    return [tuple(r) for r in df.groupBy("schema", "reason").count().orderBy(F.desc("count")).collect()]


def run_demo(
    settings: Settings,
    *,
    events: int = 5000,
    seed: int | None = None,
    mix: Mix = Mix(),
    keep_running: bool = False,
    say: Callable[[str], None] = print,
) -> DemoReport:
    """Run the whole path once on the embedded defaults and print what happened at each layer."""
    started = time.monotonic()
    report = DemoReport()
    seed = int(time.time()) % 100_000 if seed is None else seed

    def step(title: str) -> None:
        say(f"\n==> {title}  [{time.monotonic() - started:5.1f}s]")

    step("JVM jars (Maven, first time only)")
    for name, count in fetch_jars(settings.jars_dir, maven_settings=settings.maven_settings).items():
        say(f"    {name}: {count} jars in {settings.jars_dir}/{name}")

    node = local_node(settings)
    started_broker = False
    if settings.kafka_nodes > 1:
        # LAKEHOUSE_KAFKA_NODES (the cluster profile): the embedded cluster, whose node 1 has the one node's ports.
        from lakehouse.infra.kafka_cluster import cluster_of

        kafka = cluster_of(settings)
        node = kafka.nodes[0]
        step(f"Kafka cluster (KRaft, {len(kafka.nodes)} nodes) on {kafka.bootstrap}")
        if len(kafka.running()) == len(kafka.nodes):
            say(f"    already running (pids {', '.join(map(str, kafka.running().values()))}), using it")
        else:
            pids = kafka.start(settings.jars_dir)
            started_broker = True
            say(f"    started nodes {', '.join(f'{i} (pid {pid})' for i, pid in pids.items())}; data in {kafka.directory}")
        stop_kafka = kafka.stop
    else:
        step(f"Kafka broker (KRaft) on {node.bootstrap}")
        if node.read_pid():
            say(f"    already running (pid {node.read_pid()}), using it")
        else:
            pid = node.start(settings.jars_dir)
            started_broker = True
            say(f"    started, pid {pid}; data in {node.data_dir}")
        stop_kafka = node.stop

    try:
        step("Topics from their specs (Dagster assets kafka/*)")
        result = runs.catch_up(settings, runs.TOPICS, command=DEMO_COMMAND)
        if (err := runs.failure_message(result)) is not None:
            raise DemoFailed(f"Creating topics failed: {err}")
        for name, meta in runs.materialized_metadata(result).items():
            state = "created" if meta.get("created_now") else "exists"
            say(f"    {meta['topic']}: {state}, {meta['partitions']} partitions, {meta['retained_records']} records retained")

        # Two rounds, as events keep coming: the second round's late events are behind the watermarks the
        # first round left, so they land in late_arrivals instead of vanishing.
        start_at = datetime.now(timezone.utc) - timedelta(seconds=events / 10.0)
        generator = active_pipeline().demo.events(seed=seed, start=start_at, events_per_second=10.0, mix=mix)
        rounds = (events // 2, events - events // 2)
        for n, count in enumerate(rounds, 1):
            step(f"Round {n}/2: producing {count} events (seed {seed}) with out-of-order, late, duplicate and malformed ones")
            records = [next(generator) for _ in range(count)]
            produced = produce(records, bootstrap=settings.kafka_bootstrap)
            report.produced = _sum_reports(report.produced, produced)
            flags = sum(r.late for r in records), sum(r.out_of_order for r in records)
            say(
                f"    {produced.delivered} acknowledged, {produced.failed} failed in {produced.duration_s}s: "
                f"{produced.by_kind['valid']} valid ({flags[1]} out of order, {flags[0]} late), "
                f"{produced.by_kind['duplicate']} duplicates, {produced.by_kind['malformed']} malformed"
            )
            if produced.failed:
                raise DemoFailed(f"{produced.failed} records were not acknowledged: {produced.errors[:3]}")

            step(f"Round {n}/2: materializing bronze -> silver -> gold (each streaming query catches up, availableNow)")
            result = runs.catch_up(settings, runs.TABLES, command=DEMO_COMMAND)
            if (err := runs.failure_message(result)) is not None:
                raise DemoFailed(f"Materializing tables failed: {err}")
            for name, meta in runs.materialized_metadata(result).items():
                extra = (f", {meta['quarantined']} quarantined, {meta['late_arrivals']} late, "
                         f"{meta['duplicates_dropped']} duplicates" if "quarantined" in meta
                         else f", {meta['late_arrivals']} late" if "late_arrivals" in meta else "")
                if "state_rows" in meta:
                    extra += f", {meta['state_rows']} rows waiting in join state"
                if "waiting_for" in meta:
                    say(f"    {name:36s} waiting: {meta['waiting_for']}")
                    continue
                if "rows_written" not in meta:   # a shared table (quarantine, late arrivals) the flows added rows to
                    say(f"    {name:36s} {meta['dagster/row_count']} rows in total, Delta v{meta['delta_version']}")
                    continue
                say(
                    f"    {name:36s} +{meta['rows_written']:>6} rows{extra} -> {meta['dagster/row_count']} total, "
                    f"Delta v{meta['delta_version']}, {meta['duration_s']}s"
                )
        produced = report.produced

        step("One result from each gold table (lakehouse sql \"...\")")
        spark = get_spark(settings)
        for table, query in active_pipeline().example_queries.items():
            spec = tables.BY_NAME[table]
            say(f"    {table}: {spec.question}")
            if not has_delta_log(spark, spec.path(settings.lake_root)):
                # A small demo can send no event to a source this table reads (payments are rare): nothing to ask.
                say("      not created yet: a source it reads has no rows (a larger --events sends some)")
                continue
            say(f"    lakehouse sql \"{query}\"")
            columns, rows, _ = run_sql(spark, settings.lake_root, query)
            report.gold_rows.extend(rows)
            report.gold_results[table] = rows
            say("\n".join("      " + line for line in format_table(columns, rows).splitlines()))

        step("Late arrivals: events each flow refused because they came behind its watermark")
        say(f"    lakehouse sql \"{LATE_QUERY}\"")
        columns, rows, _ = run_sql(spark, settings.lake_root, LATE_QUERY)
        report.late_by_flow = {r[0]: r[1] for r in rows}
        say("\n".join("      " + line for line in format_table(columns, rows).splitlines()))

        step("Counts per layer (whole tables): bronze = silver + quarantine + late arrivals + duplicates")
        report.counts = layer_counts(settings)
        header = ("entity", "bronze", "silver", "quarantine", "late arrivals", "duplicates", "balanced")
        rows = [
            (c.entity, c.bronze, c.silver, c.quarantine, c.late, c.duplicates, "yes" if c.duplicates >= 0 else "NO")
            for c in report.counts
        ]
        say("\n".join("    " + line for line in format_table(header, rows).splitlines()))
        total = {k: sum(getattr(c, k) for c in report.counts) for k in ("bronze", "silver", "quarantine", "late", "duplicates")}
        say(f"    balance: bronze {total['bronze']} = silver {total['silver']} + quarantine {total['quarantine']} "
            f"+ late arrivals {total['late']} + duplicates {total['duplicates']}")
        say(f"    this run injected {produced.by_kind['duplicate']} duplicates and {produced.by_kind['malformed']} malformed records")
        say("    quarantine by reason: " + ", ".join(f"{s.split('.')[1]}/{r}={n}" for s, r, n in quarantine_reasons(settings)))

        step("Data quality: each silver and gold batch checked against its table's suite (lakehouse quality report)")
        quality_rows, report.quality_report = quality_report(settings, spark)
        say("\n".join("    " + line for line in format_table(QUALITY_HEADER, quality_rows).splitlines()))
    finally:
        stop_spark()
        if started_broker and not keep_running:
            stop_kafka()
            say(f"\n    stopped the Kafka {'cluster' if settings.kafka_nodes > 1 else 'broker'} it started (pid file "
                f"{node.pid_file}{' and its siblings' if settings.kafka_nodes > 1 else ''})")

    report.wall_s = round(time.monotonic() - started, 1)
    step(f"Done in {report.wall_s}s. Where things are:")
    say(f"    tables (Delta)      {settings.lake_root}/<layer>/<table>   query: lakehouse sql \"SELECT ...\"")
    say(f"    checkpoints         {settings.lake_root}/<layer>/_checkpoints/")
    say(f"    logs                {settings.log_dir}/ (spark.log, lakehouse.log), {node.logs_dir}/server.log")
    say(f"    Dagster (runs kept) {settings.dagster_home}   open the UI: lakehouse ui  ->  http://127.0.0.1:3000"
        f" (job catch_up, tag {runs.COMMAND_TAG}={DEMO_COMMAND})")
    say(f"    quality report      {report.quality_report or 'none (LAKEHOUSE_QUALITY is off)'}   "
        "(Great Expectations Data Docs; summary: lakehouse quality report)")
    if started_broker and keep_running:
        say(f"    Kafka still running on {node.bootstrap} (pid {node.read_pid()}); stop it: lakehouse kafka stop")
    return report
