"""The barest continuous Spark job, the floor of bench.freshness --floor: every shop topic, one query, into one Delta table.

    .venv/bin/python -m bench.bare_stream TABLE_PATH [--hops N | --work [--exactly-once]]

Reads the settings from LAKEHOUSE_* variables as `lakehouse stream` does (the same Spark session
configuration, Kafka bootstrap and LAKEHOUSE_STREAM_TRIGGER; auto, the stream's sizing, is one second here:
the floor is the freshest a query can be), subscribes to every topic of
schemas.topics.ALL from the earliest offsets (with the flows' kafka.fetch.max.wait.ms) and appends key,
value, topic, partition, offset and the broker's timestamp to a Delta table at TABLE_PATH: no parsing, no
headers, no dedup, no quarantine, one query instead of a flow per table and layer. Runs until SIGTERM.

With --hops N (default 1) it is a chain of N queries, as the layers are: the first as above, each other one
a Delta stream of the table before it appended unchanged to the next table (TABLE_PATH_2, ... TABLE_PATH_N),
on the same trigger. A silver table is two hops from Kafka (bronze, then silver), a gold table three.

With --work it is one query doing the orders path's writes in each micro-batch, one hop for all three
layers: the orders topic's records appended to TABLE_PATH (as bronze, with the batch's id), the same rows
parsed with the orders schema appended to TABLE_PATH_silver, and their revenue per minute and currency
MERGEd into TABLE_PATH_gold by adding the batch's partial sums (as gold_revenue_per_minute is kept), the
bronze and gold commits recording the batch's id. No txn ids, quarantine, dedup, watermark or quality checks: the
least work that keeps the three tables. With --exactly-once each of the three writes carries Delta's txn app id
and version, as the flows' writes do (streaming.sinks), so a replayed batch writes nothing twice: what
exactly-once adds to the floor. Not a product path: a bench's yardstick.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from lakehouse.pipelines import shop


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    hops, work, once = 1, False, False
    if len(args) == 3 and args[1] == "--hops" and args[2].isdigit() and int(args[2]) >= 1:
        hops, args = int(args[2]), args[:1]
    elif len(args) in (2, 3) and args[1] == "--work" and args[2:] in ([], ["--exactly-once"]):
        work, once, args = True, len(args) == 3, args[:1]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = Path(args[0])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark
    from lakehouse.schemas import topics

    settings = Settings.from_env()
    trigger = "1 second" if settings.stream_trigger.strip().lower() == "auto" else settings.stream_trigger
    spark = get_spark(settings, "bare_stream")
    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
               .option("subscribe", WORK_TOPIC if work else ",".join(t.name for t in topics.ALL))
               .option("startingOffsets", "earliest")
               .option("kafka.fetch.max.wait.ms", str(settings.kafka_fetch_max_wait_ms))   # as the flows read
               .load()
               .select("key", "value", "topic", "partition", "offset", "timestamp"))
    if work:
        queries = [start_work(spark, records, table, trigger, exactly_once=once)]
        return run_until_stopped(queries, table)
    for hop in range(2, hops + 1):
        # A Delta stream needs its source table to exist: each table of the chain is created empty first.
        spark.createDataFrame([], records.schema).write.format("delta").mode("append").save(str(hop_table(table, hop - 1)))
    query = (records.writeStream.format("delta").queryName("bare")
             .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
             .trigger(processingTime=trigger)
             .start(str(table)))
    queries = [query]
    for hop in range(2, hops + 1):
        source, table = table, hop_table(Path(args[0]), hop)
        queries.append(spark.readStream.format("delta").load(str(source))
                       .writeStream.format("delta").queryName(f"bare_{hop}")
                       .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
                       .trigger(processingTime=trigger)
                       .start(str(table)))
    return run_until_stopped(queries, table)


def run_until_stopped(queries: list, table: Path) -> int:
    """Say the job is streaming, as `lakehouse stream` does per flow, then run until SIGTERM."""
    # The same line `lakehouse stream` logs per flow, which bench.freshness waits for.
    print(f"flow bare is streaming into {table}", flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.append(True))
    # A handler runs between Python steps, not inside a blocking wait: wait in short steps.
    while all(q.isActive for q in queries) and not stopping:
        queries[0].awaitTermination(1)
    for q in queries:
        q.stop()
    return 0


WORK_TOPIC = "shop.orders.v1"
# What the gold MERGE of --work adds up per window and currency (gold_revenue_per_minute's partial sums).
WORK_SUMS = ("revenue_cents", "orders", "items")


def work_table(first: Path, layer: str) -> Path:
    """The table of --work that holds `layer` (bronze, silver or gold): the first table is bronze."""
    return first if layer == "bronze" else first.with_name(f"{first.name}_{layer}")


def start_work(spark, records, table: Path, trigger: str, *, exactly_once: bool = False):
    """The --work query: each micro-batch appended to bronze and silver and merged into gold, in that order."""
    from contextlib import nullcontext

    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from lakehouse.pipelines.shop import ITEM_COUNT, ORDERS
    from lakehouse.pipelines.shop import GOLD_REVENUE_PER_MINUTE
    from lakehouse.streaming.gold_batches import on_keys
    from lakehouse.streaming.positions import UserMetadata
    from lakehouse.streaming.sinks import append_once, dml_once, ensure_table
    from lakehouse.pipelines.shop.gold import GOLD_BY_NAME
    from lakehouse.streaming.transforms.windows import windowed_rows

    def append(df, path: Path, layer: str, batch_id: int, said: str) -> None:
        if exactly_once:
            append_once(df, str(path), app_id=f"bare-{layer}", batch_id=batch_id, user_metadata=said)
        else:
            df.write.format("delta").mode("append").option("userMetadata", said).save(str(path))

    gold_path = str(work_table(table, "gold"))
    payload = ORDERS.schema.payload
    on = on_keys(GOLD_REVENUE_PER_MINUTE.keys)

    def write(batch, batch_id: int) -> None:
        batch = batch.withColumn("batch", F.lit(batch_id)).persist()
        try:
            said = json.dumps({"batch": batch_id})
            append(batch, table, "bronze", batch_id, said)
            parsed = batch.select(F.from_json(F.col("value").cast("string"), payload).alias("e")).select("e.*")
            orders = (parsed.withColumn("occurred_at", F.try_to_timestamp("occurred_at"))
                      .withColumn("item_count", F.expr(ITEM_COUNT)).where(F.col("occurred_at").isNotNull()))
            append(orders, work_table(table, "silver"), "silver", batch_id, said)
            partials = windowed_rows(GOLD_BY_NAME["gold_revenue_per_minute"], orders)
            ensure_table(partials, GOLD_REVENUE_PER_MINUTE, gold_path)
            with UserMetadata(spark, said), dml_once(spark, "bare-gold", batch_id) if exactly_once else nullcontext():
                (DeltaTable.forPath(spark, gold_path).alias("t").merge(partials.alias("s"), on)
                 .whenMatchedUpdate(set={c: f"t.{c} + s.{c}" for c in WORK_SUMS}).whenNotMatchedInsertAll()
                 .execute())
        finally:
            batch.unpersist()

    return (records.writeStream.queryName("bare").foreachBatch(write)
            .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
            .trigger(processingTime=trigger).start())


def hop_table(first: Path, hop: int) -> Path:
    """The table that hop `hop` (1-based) of the chain writes: the first table itself, then `<first>_<hop>`."""
    return first if hop == 1 else first.with_name(f"{first.name}_{hop}")


if __name__ == "__main__":
    raise SystemExit(main())
