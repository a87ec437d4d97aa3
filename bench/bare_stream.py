"""The barest continuous Spark job, the floor of bench.freshness --floor: every shop topic, one query, into one Delta table.

    .venv/bin/python -m bench.bare_stream TABLE_PATH

Reads the settings from LAKEHOUSE_* variables as `lakehouse stream` does (the same Spark session
configuration, Kafka bootstrap and LAKEHOUSE_STREAM_TRIGGER), subscribes to every topic of
schemas.topics.ALL from the earliest offsets (with the flows' kafka.fetch.max.wait.ms) and appends key,
value, topic, partition, offset and the broker's timestamp to a Delta table at TABLE_PATH: no parsing, no
headers, no dedup, no quarantine, one query instead of a flow per table and layer. Runs until SIGTERM.
Not a product path: a bench's yardstick.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
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
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
             .option("subscribe", ",".join(t.name for t in topics.ALL))
             .option("startingOffsets", "earliest")
             .option("kafka.fetch.max.wait.ms", str(settings.kafka_fetch_max_wait_ms))   # as the flows read
             .load()
             .select("key", "value", "topic", "partition", "offset", "timestamp")
             .writeStream.format("delta").queryName("bare")
             .option("checkpointLocation", str(table.parent / "_checkpoints" / table.name))
             .trigger(processingTime=settings.stream_trigger)
             .start(str(table)))
    # The same line `lakehouse stream` logs per flow, which bench.freshness waits for.
    print(f"flow bare is streaming into {table}", flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.append(True))
    # A handler runs between Python steps, not inside a blocking wait: wait in short steps.
    while query.isActive and not stopping:
        query.awaitTermination(1)
    query.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
