"""The tables many flows write (quarantine, late arrivals, quality results, stream progress), created before any flow writes.

Delta refuses the second of two commits that both create a table ("DELTA_PROTOCOL_CHANGED ... multiple
writers are writing to an empty directory"). Flows that run at once (several in a catch-up, all of them
in a stream) would otherwise race to create these tables with their first rows. Each is created here,
empty, with the schema its writers produce (their own transforms applied to no rows), so a first
append only ever appends.
"""

from __future__ import annotations

import logging
import threading

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.tables import LATE_ARRIVALS, QUALITY_RESULTS, QUARANTINE, STREAM_PROGRESS
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.sinks import nullable

log = logging.getLogger(__name__)

# The Kafka source's own columns with includeHeaders (Spark's Structured Streaming + Kafka guide).
KAFKA_COLUMNS = T.StructType([
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
    T.StructField("headers", T.ArrayType(T.StructType([
        T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())]))),
])

SHARED_TABLES = (QUARANTINE, LATE_ARRIVALS, QUALITY_RESULTS, STREAM_PROGRESS)
# Their columns do not depend on the source: any event schema gives them (a changelog source has no event time).
_ANY_EVENTS = EventSchema(name="any", entity="any", payload=T.StructType([
    T.StructField("event_id", T.StringType()), T.StructField("occurred_at", T.StringType())]),
    required=("event_id", "occurred_at"), timestamps=("occurred_at",))

_creating = threading.Lock()


def _empty_frames(spark: SparkSession) -> dict[str, DataFrame]:
    """Each shared table's rows as its writers build them, from no records at all."""
    schema = _ANY_EVENTS
    from lakehouse.quality.results import RESULT_SCHEMA
    from lakehouse.streaming.progress import SCHEMA as PROGRESS_SCHEMA
    from lakehouse.streaming.transforms.bronze import to_bronze
    from lakehouse.streaming.transforms.silver import parse_events, to_late_arrivals, to_quarantine, to_silver

    bronze = to_bronze(spark.createDataFrame([], KAFKA_COLUMNS))
    parsed = parse_events(bronze, schema=schema, event_time_floor="2000-01-01", max_event_time_ahead="1 day")
    late = to_late_arrivals(to_silver(parsed, schema=schema), flow="", table="", event_time=schema.event_time,
                            watermark_micros=0)
    return {
        QUARANTINE.name: to_quarantine(parsed, schema=schema),
        LATE_ARRIVALS.name: late,
        QUALITY_RESULTS.name: spark.createDataFrame([], RESULT_SCHEMA),
        STREAM_PROGRESS.name: spark.createDataFrame([], PROGRESS_SCHEMA),
    }


def ensure_shared_tables(spark: SparkSession, lake_root: str) -> list[str]:
    """Create each shared table that does not exist yet, empty; returns the names of those it created.

    Another process creating the same table at the same time is harmless: its commit or this one is refused, and the
    table then exists either way.
    """
    with _creating:
        missing = [t for t in SHARED_TABLES if not has_delta_log(spark, t.path(lake_root))]
        if not missing:
            return []
        frames = _empty_frames(spark)
        created = []
        for table in missing:
            path = table.path(lake_root)
            try:
                # A log-only commit (no Spark job): 6.1 s cold and 2.4 s warm for the four tables, against 23.5 s
                # and 8.4 s for appends of empty frames.
                columns = nullable(frames[table.name].schema)
                DeltaTable.createIfNotExists(spark).location(path).addColumns(columns).execute()
                created.append(table.name)
            except Exception:  # noqa: BLE001 - lost the race to another process: fine if the table now exists
                if not has_delta_log(spark, path):
                    raise
        if created:
            log.info("created the shared tables %s, empty, before any flow writes to them", ", ".join(created))
        return created
