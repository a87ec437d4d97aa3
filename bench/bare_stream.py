"""The barest continuous Spark job, the floor of bench.freshness --floor: every shop topic, one query, into one Delta table.

    .venv/bin/python -m bench.bare_stream TABLE_PATH [--hops N]

Reads the settings from LAKEHOUSE_* variables as `lakehouse stream` does (the same Spark session
configuration, Kafka bootstrap and LAKEHOUSE_STREAM_TRIGGER), subscribes to every topic of
schemas.topics.ALL from the earliest offsets (with the flows' kafka.fetch.max.wait.ms) and appends key,
value, topic, partition, offset and the broker's timestamp to a Delta table at TABLE_PATH: no parsing, no
headers, no dedup, no quarantine, one query instead of a flow per table and layer. Runs until SIGTERM.

With --hops N (default 1) it is a chain of N queries, as the layers are: the first as above, each other one
a Delta stream of the table before it appended unchanged to the next table (TABLE_PATH_2, ... TABLE_PATH_N),
on the same trigger. A silver table is two hops from Kafka (bronze, then silver), a gold table three.
Not a product path: a bench's yardstick.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    hops = 1
    if len(args) == 3 and args[1] == "--hops" and args[2].isdigit() and int(args[2]) >= 1:
        hops, args = int(args[2]), args[:1]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = Path(args[0])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from infra.settings import Settings
    from infra.spark import get_spark
    from schemas import topics

    settings = Settings.from_env()
    spark = get_spark(settings, "bare_stream")
    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
               .option("subscribe", ",".join(t.name for t in topics.ALL))
               .option("startingOffsets", "earliest")
               .option("kafka.fetch.max.wait.ms", str(settings.kafka_fetch_max_wait_ms))   # as the flows read
               .load()
               .select("key", "value", "topic", "partition", "offset", "timestamp"))
    for hop in range(2, hops + 1):
        # A Delta stream needs its source table to exist: each table of the chain is created empty first.
        spark.createDataFrame([], records.schema).write.format("delta").mode("append").save(str(hop_table(table, hop - 1)))
    query = (records.writeStream.format("delta").queryName("bare")
             .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
             .trigger(processingTime=settings.stream_trigger)
             .start(str(table)))
    queries = [query]
    for hop in range(2, hops + 1):
        source, table = table, hop_table(Path(args[0]), hop)
        queries.append(spark.readStream.format("delta").load(str(source))
                       .writeStream.format("delta").queryName(f"bare_{hop}")
                       .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
                       .trigger(processingTime=settings.stream_trigger)
                       .start(str(table)))
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


def hop_table(first: Path, hop: int) -> Path:
    """The table that hop `hop` (1-based) of the chain writes: the first table itself, then `<first>_<hop>`."""
    return first if hop == 1 else first.with_name(f"{first.name}_{hop}")


if __name__ == "__main__":
    raise SystemExit(main())
