"""The sensors pipeline changed: a doors source added (which gold_events_per_minute reads, as it reads every event
source) and gold_readings_placed removed. Nothing else differs, so no other table is rebuilt."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.types import StringType

from lakehouse.schemas.sources import Source, column, envelope

import warehouse_sensors as before

DOORS = Source(
    topic="warehouse.doors.v1",
    entity="doors",
    description="Loading-bay doors opening and closing, keyed by door.",
    fields=(*envelope(), column("door_id", StringType(), "The door."), column("state", StringType(), "open or closed.")),
    required=("event_id", "occurred_at", "sent_at", "door_id", "state"),
    key="door_id",
    partitions=1,
    rules={"known_state": "state IN ('open', 'closed')"},
)

EVENT_SOURCES = (before.READINGS, DOORS)
GOLD = tuple(g for g in before.GOLD if g.name not in ("gold_readings_placed", "gold_events_per_minute")) + (
    before.events_per_minute(EVENT_SOURCES),)

PIPELINE = replace(before.PIPELINE, name="warehouse_sensors_doors", sources=(before.READINGS, before.DEVICES, DOORS),
                   gold=GOLD, params=(), module="")
