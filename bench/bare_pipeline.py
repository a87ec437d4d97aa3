"""The floor of bench.pipeline --floor: the catch-up's work done by the barest Spark jobs, one static job per table.

The same log, the same pure transforms, the same tables, and nothing of the machinery that makes the
pipeline incremental and safe: no streaming query, checkpoint, micro-batch cap, watermark, late-arrivals
capture, MERGE, txn id, recorded position, quality gate or Dagster. Each table is one `spark.read`, the
project's transform and one Delta overwrite, in four stages (bronze, silver, dimensions, gold), each
stage's tables `parallel` at once as a catch-up runs its flows:

- bronze: every topic read whole from Kafka (`batch.recompute.read_kafka_range`), `to_bronze`;
- silver: `parse_events` once per record (persisted), the valid rows (`to_silver`) without duplicate
  event ids to silver and the rest (`to_quarantine`) to quarantine;
- dimensions: `to_dimension_changes`, then `scd2_versions` with no earlier versions;
- gold: each gold table's own pure transform over its whole silver input (`_gold`, by table name), the
  stateful flows' steps replaced by the one-batch transform they keep exact (sliding counts, sessions)
  or by a plain static join (orders with their payments).

What it leaves out is what the pipeline adds on top of the engine; what it keeps is the work itself.

With `gold_as_queries`, each gold table is instead the barest streaming query doing its work: its first
input read as a Delta stream (availableNow, a checkpoint of its own), and in foreachBatch the same
computation over that batch (the other inputs read whole) and one Delta overwrite. That is the floor of a
design where every gold table is a query of its own, as the pipeline's are: what being a query costs.
With `gold_merge`, each gold table's computation is MERGEd into the table on its keys instead (the table
created empty first when absent, as the pipeline's writers do): what keeping a gold table incrementally
costs, which a stream must, since a batch cannot overwrite what earlier batches wrote.
With `gold_shared`, the gold tables that stream the same input share one such query: each batch (kept in
memory) is MERGEd into each of them one after another, so one more gold table adds one MERGE to a batch
and no query of its own. With `gold_once` too, each MERGE carries Delta's txn id (the table's app id and
the batch id, `streaming.sinks.dml_once`), which a crash-safe stream needs: a batch run again after a
crash must not add its partial sums twice. Each gold write's seconds are returned per table. With
`without`, that gold table is left out, for what one more gold table adds to the floor's gold stage.
Not a product path: a bench's yardstick, like bench.bare_stream for target 3.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from lakehouse.pipelines.shop.gold import EVENT_SOURCES, GOLD_BY_NAME
from lakehouse.streaming.transforms.windows import windowed_rows

STAGES = ("bronze", "silver", "dimensions", "gold")


def _write(df: DataFrame, path: str, partition_by: tuple[str, ...] = (), *, mode: str = "overwrite") -> int:
    """One Delta write; the rows it wrote, from the commit's own metrics (no second job)."""
    from delta.tables import DeltaTable

    writer = df.write.format("delta").mode(mode)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
    metrics = DeltaTable.forPath(df.sparkSession, path).history(1).select("operationMetrics").first()[0] or {}
    return int(metrics.get("numOutputRows", 0))


def _gold(ctx) -> dict[str, Callable[[Callable[[str], DataFrame]], DataFrame]]:
    """Gold table name -> its computation over whole inputs (`read(table name)`), by the project's pure transforms."""
    from lakehouse.streaming.context import duration_micros
    from lakehouse.pipelines.shop import transforms as gold
    from lakehouse.streaming.transforms.sequences import merge_sessions, session_intervals, sliding_count

    orders = lambda read: read("silver_orders")             # noqa: E731
    views = lambda read: read("silver_page_views")          # noqa: E731

    def velocity(read):
        kind = declared["gold_order_velocity"].kind
        return sliding_count(gold.to_timed_orders(orders(read)), by=kind.by, time=kind.time,
                             window_micros=duration_micros(ctx.params[kind.window.name]), count=kind.count,
                             flag=kind.flag, threshold=ctx.params[kind.flag_at.name])

    def sessions(read):
        kind = declared["gold_sessions"].kind
        activity = session_intervals(gold.to_activity_events(views(read), orders(read)), by=kind.by,
                                     time=kind.time, counts=kind.counts)
        return merge_sessions(activity, by=kind.by, gap_micros=duration_micros(ctx.params[kind.gap.name]),
                              counts=list(kind.counts)).select(
            "*", *[F.expr(sql).alias(name) for name, sql in kind.then.items()])

    def order_payments(read):
        o = orders(read).select("order_id", "customer_id", "total_cents", "currency",
                                F.col("occurred_at").alias("ordered_at")).alias("o")
        p = read("silver_payments").select("order_id", "payment_id", "amount_cents", "status",
                                           F.col("occurred_at").alias("paid_at")).alias("p")
        within = duration_micros(ctx.params["payment_within"])
        joined = o.join(p, (F.col("o.order_id") == F.col("p.order_id")) & (F.col("p.paid_at") >= F.col("o.ordered_at"))
                        & (F.unix_micros("p.paid_at") <= F.unix_micros("o.ordered_at") + within), "full_outer")
        return joined.select(F.coalesce("o.order_id", "p.order_id").alias("order_id"), "customer_id", "total_cents",
                             "currency", "ordered_at", "payment_id", "amount_cents", "status", "paid_at")

    def dims(read):
        return {"dim_products": read("dim_products"), "dim_customers": read("dim_customers")}

    declared = GOLD_BY_NAME

    def windows(name, rows, **dims):
        return windowed_rows(declared[name], rows, ctx.params, **dims)

    return {
        "gold_revenue_per_minute": lambda read: windows("gold_revenue_per_minute", orders(read)),
        "gold_page_views_per_product_minute": lambda read: windows(
            "gold_page_views_per_product_minute", gold.to_product_page_views(views(read))),
        "gold_revenue_hopping": lambda read: windows("gold_revenue_hopping", orders(read)),
        "gold_order_velocity": velocity,
        "gold_sessions": sessions,
        "gold_processing_delay": lambda read: gold.to_processing_delay(gold.to_delay_events(
            *(read(s.silver_table.name) for s in EVENT_SOURCES))),
        "gold_category_revenue_per_minute": lambda read: windows(
            "gold_category_revenue_per_minute", orders(read), dim_products=read("dim_products")),
        "gold_order_lines_enriched": lambda read: gold.to_enriched_order_lines(orders(read), **dims(read)),
        "gold_page_views_enriched": lambda read: gold.to_enriched_page_views(views(read), **dims(read)),
        "gold_order_payments": order_payments,
    }


def run_floor(spark: SparkSession, ctx, *, parallel: int = 3, gold_as_queries: bool = False,
              gold_merge: bool = False, gold_shared: bool = False, gold_once: bool = False,
              without: str | None = None) -> dict:
    """Every table of the catch-up by the barest static jobs (gold by bare queries with `gold_as_queries`, one
    per streamed input with `gold_shared`, by MERGE with `gold_merge`, with txn ids with `gold_once`); wall
    seconds per stage, rows written per table and each gold table's write seconds."""
    from lakehouse.batch.recompute import read_kafka_range
    from lakehouse.schemas import sources, tables
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.transforms.bronze import to_bronze
    from lakehouse.streaming.transforms.dimensions import scd2_versions, to_dimension_changes
    from lakehouse.streaming.transforms.silver import parse_events, to_quarantine, to_silver

    lake = ctx.lake_root
    specs = {t.name: t for t in tables.all_tables(sources.SOURCES)}
    if gold_once and not (gold_merge and (gold_as_queries or gold_shared)):
        raise ValueError("txn ids (gold_once) are for MERGEs in queries: give gold_merge and a query option too")
    gold = _gold(ctx)
    missing = sorted({f.target.name for f in FLOWS if f.target.layer == "gold"} - set(gold))
    if missing:
        raise RuntimeError(f"the floor has no computation for {', '.join(missing)}: add it to bench/bare_pipeline.py")
    gold.pop(without or "", None)
    rows: dict[str, int] = {}
    writes_s: dict[str, float] = {}
    quarantine = threading.Lock()   # the silver jobs share it; the first append creates it, two would collide

    def read(name: str, session: SparkSession | None = None) -> DataFrame:
        return (session or spark).read.format("delta").load(specs[name].path(lake))

    def write(df: DataFrame, name: str, *, mode: str = "overwrite") -> None:
        n = _write(df, specs[name].path(lake), specs[name].partition_by, mode=mode)
        rows[name] = rows.get(name, 0) + n

    def bronze(source) -> None:
        write(to_bronze(read_kafka_range(spark, source.topic_spec, ctx, {})), source.bronze_table.name)

    def silver(source) -> None:
        parsed = parse_events(read(source.bronze_table.name), schema=source.schema,
                              event_time_floor=ctx.event_time_floor,
                              max_event_time_ahead=ctx.event_time_max_ahead).persist()
        try:
            write(to_silver(parsed, schema=source.schema).dropDuplicates(["event_id"]), source.silver_table.name)
            with quarantine:
                write(to_quarantine(parsed, schema=source.schema), tables.QUARANTINE.name, mode="append")
        finally:
            parsed.unpersist()

    def dimension(source) -> None:
        dim = source.dimension
        changes = to_dimension_changes(read(source.silver_table.name), key=dim.key, attributes=dim.attributes,
                                       event_time=source.event_time)
        write(scd2_versions(changes.where(F.lit(False)), changes, key=dim.key, attributes=dim.attributes),
              source.dimension_table.name)

    def merge(df: DataFrame, name: str, batch_id: int | None) -> None:
        from delta.tables import DeltaTable
        from lakehouse.streaming.gold_batches import on_keys
        from lakehouse.streaming.sinks import dml_once, ensure_table, merge_metrics

        # The batch's own session: a query's txn settings must not reach another query's MERGE.
        session, spec, path = df.sparkSession, specs[name], specs[name].path(lake)
        ensure_table(df, spec, path)
        builder = (DeltaTable.forPath(session, path).alias("t").merge(df.alias("s"), on_keys(spec.keys))
                   .whenMatchedUpdateAll().whenNotMatchedInsertAll())
        with dml_once(session, f"floor-{name}", batch_id) if batch_id is not None else nullcontext():
            metrics = merge_metrics(builder.execute()) or {}
        rows[name] = rows.get(name, 0) + int(metrics.get("num_inserted_rows", 0))

    def gold_write(df: DataFrame, name: str, batch_id: int | None = None) -> None:
        started = time.perf_counter()
        if gold_merge:
            merge(df, name, batch_id if gold_once else None)
        else:
            write(df, name)
        writes_s[name] = writes_s.get(name, 0.0) + time.perf_counter() - started

    def gold_table(name: str) -> None:
        gold_write(gold[name](read), name)

    def streamed_by(name: str) -> str:
        return next(f for f in FLOWS if f.target.name == name).sources[0].name

    def gold_query(names: list[str]) -> None:
        streamed = streamed_by(names[0])

        def batch(df: DataFrame, batch_id: int) -> None:
            shared = len(names) > 1
            if shared:
                df.persist()   # read once from the source's files, not once per gold table
            try:
                for name in names:
                    gold_write(gold[name](lambda table: df if table == streamed else read(table, df.sparkSession)),
                               name, batch_id)
            finally:
                if shared:
                    df.unpersist()

        (spark.readStream.format("delta").load(specs[streamed].path(lake)).writeStream
         .option("checkpointLocation", f"{lake}/_floor_checkpoints/{names[0] if len(names) == 1 else streamed}")
         .trigger(availableNow=True).foreachBatch(batch).start().awaitTermination())

    if gold_shared:
        by_input: dict[str, list[str]] = {}
        for name in gold:
            by_input.setdefault(streamed_by(name), []).append(name)
        gold_jobs = [lambda names=names: gold_query(names) for names in by_input.values()]
    else:
        gold_jobs = [lambda n=n: gold_query([n]) if gold_as_queries else gold_table(n) for n in gold]

    stages = {
        "bronze": [lambda s=s: bronze(s) for s in sources.SOURCES],
        "silver": [lambda s=s: silver(s) for s in sources.SOURCES],
        "dimensions": [lambda s=s: dimension(s) for s in sources.SOURCES if s.dimension is not None],
        "gold": gold_jobs,
    }
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="floor") as pool:
        for stage in STAGES:
            t0 = time.perf_counter()
            for future in [pool.submit(job) for job in stages[stage]]:
                future.result()
            seconds[stage] = round(time.perf_counter() - t0, 3)
    return {"total_s": time.perf_counter() - started, "stages_s": seconds, "rows": rows,
            "gold_writes_s": {name: round(s, 3) for name, s in writes_s.items()}}
