"""A second pipeline, of another domain, in a package of its own: warehouse thermometers and the zones they hang in.

The tests point the engine at it with LAKEHOUSE_PIPELINE=warehouse_sensors (this folder's parent on the path),
with no edit to the engine: a readings source, a changelog of where each device hangs (an SCD2 dimension),
a windowed table declared as its aggregates and joined as of each reading's time with the device's zone,
an as-of enriched table, and a hopping window whose size is a parameter.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

from pyspark.sql import DataFrame
from pyspark.sql.types import DoubleType, IntegerType, StringType

from lakehouse.quality.suites import between, not_null
from lakehouse.schemas.gold import LINEAGE, Enriched, Gold, Windowed, avg_of, count, count_if, max_of, min_of, sum_of
from lakehouse.schemas.pipeline import Demo, Param, Pipeline
from lakehouse.schemas.sources import Dimension, Source, column, envelope
from lakehouse.streaming.transforms.dimensions import enrich_as_of

READINGS = Source(
    topic="warehouse.readings.v1",
    entity="readings",
    description="Temperature and humidity readings of the warehouse's thermometers, keyed by device.",
    fields=(
        *envelope(),
        column("device_id", StringType(), "Thermometer that took the reading."),
        column("celsius", DoubleType(), "Temperature in degrees Celsius."),
        column("humidity_pct", IntegerType(), "Relative humidity, 0-100."),
    ),
    required=("event_id", "occurred_at", "sent_at", "device_id", "celsius"),
    key="device_id",
    partitions=2,
    rules={"plausible_temperature": "celsius BETWEEN -60 AND 80",
           "humidity_in_range": "humidity_pct IS NULL OR humidity_pct BETWEEN 0 AND 100"},
)

DEVICES = Source(
    topic="warehouse.devices.v1",
    entity="devices",
    description="Where each thermometer hangs, keyed by device; compacted.",
    fields=(*envelope(), column("device_id", StringType(), "The thermometer."),
            column("zone", StringType(), "The warehouse zone it hangs in.")),
    required=("event_id", "occurred_at", "sent_at", "device_id", "zone"),
    key="device_id",
    partitions=1,
    cleanup_policy="compact",
    dedup_watermark="7 days",
    dimension=Dimension(key="device_id", attributes=("zone",), description="Devices and their zones over time."),
)

HOP = Param("sensors_hop_size", "10 minutes", "Length of the hopping per-device temperature window.")


def with_zone(readings: DataFrame, *, dim_devices: DataFrame) -> DataFrame:
    """Each reading with the zone its device hung in at the reading's time ("unplaced" before the first)."""
    from pyspark.sql import functions as F

    placed = enrich_as_of(readings, dim_devices, key="device_id", event_time="occurred_at", attributes={"zone": "zone"})
    return placed.withColumn("zone", F.coalesce("zone", F.lit("unplaced")))


EVENT_SOURCES = (READINGS,)


def to_events(*silvers: DataFrame) -> DataFrame:
    """Every event of the sources read, as one stream: its id, time and Kafka coordinates."""
    out = silvers[0].select(*LINEAGE)
    for more in silvers[1:]:
        out = out.unionByName(more.select(*LINEAGE))
    return out


def events_per_minute(sources: tuple) -> Gold:
    """Events per minute and topic, over every event source of the pipeline (as the shop's processing delay)."""
    return Gold("gold_events_per_minute", "Events per one-minute window and topic, over every event source.",
                "How many events does each source send, minute by minute?", reads=sources, rows=to_events,
                kind=Windowed(size="1 minute", by=("topic",), aggregates={"events": count()}))


GOLD = (
    Gold("gold_zone_climate_per_minute", "Per minute and zone: readings, mean, least and greatest temperature, hot "
         "readings, humidity total (tumbling, zone as of the reading).",
         "How warm is each zone, minute by minute?", reads=(READINGS,), lookups=(DEVICES,), transform=with_zone,
         kind=Windowed(size="1 minute", by=("zone",), aggregates={
             "readings": count(), "avg_celsius": avg_of("celsius"), "min_celsius": min_of("celsius"),
             "max_celsius": max_of("celsius"), "hot_readings": count_if("celsius > 30"),
             "humidity_total": sum_of("humidity_pct")}),
         expectations=lambda: [between("readings", 1, None)],
         example="SELECT zone, max(max_celsius) AS hottest FROM gold_zone_climate_per_minute GROUP BY zone"),
    Gold("gold_device_temperature_hopping", "Per device, mean temperature over the last LAKEHOUSE_SENSORS_HOP_SIZE, a "
         "window every 5 minutes (hopping).", "Which device runs warm over the last ten minutes?", reads=(READINGS,),
         kind=Windowed(size=HOP, slide="5 minutes", by=("device_id",),
                       aggregates={"readings": count(), "avg_celsius": avg_of("celsius")})),
    Gold("gold_readings_placed", "Each reading with the zone its device hung in at the time (as-of join).",
         "Where was each reading taken?", reads=(READINGS,), lookups=(DEVICES,),
         kind=Enriched(compute=lambda readings, *, dim_devices: with_zone(
             readings.select("event_id", "occurred_at", "device_id", "celsius"), dim_devices=dim_devices)),
         keys=("event_id",), time_range=("occurred_at", "occurred_at"),
         expectations=lambda: not_null("zone", severity="warn")),
    events_per_minute(EVENT_SOURCES),
)


@dataclass(frozen=True)
class Record:
    """One record to send: a valid event of one of the two topics."""

    index: int
    topic: str
    key: bytes
    event: dict[str, Any]
    kind: str = "valid"
    headers: tuple = field(default=())

    def encode(self, sent_at: datetime) -> bytes:
        return json.dumps({**self.event, "sent_at": sent_at.astimezone(timezone.utc).isoformat()}).encode()


def events(*, seed: int = 7, start: datetime | None = None, events_per_second: float = 1.0, **_: Any) -> Iterator[Record]:
    """Each device's placement, then readings every 1/events_per_second s of event time, some very hot."""
    rng = random.Random(seed)
    start = start or datetime.now(timezone.utc)
    devices = [f"d-{n}" for n in range(4)]
    for n, device in enumerate(devices):
        yield Record(n, DEVICES.topic, device.encode(), {"event_id": f"place-{device}", "device_id": device,
                     "zone": f"zone-{n % 2}", "occurred_at": (start - timedelta(hours=1)).isoformat()})
    n = len(devices)
    while True:
        device = rng.choice(devices)
        at = start + timedelta(seconds=(n - len(devices)) / events_per_second)
        yield Record(n, READINGS.topic, device.encode(), {
            "event_id": f"r-{seed}-{n}", "device_id": device, "occurred_at": at.isoformat(),
            "celsius": round(rng.uniform(10, 35), 1), "humidity_pct": rng.randint(20, 80)})
        n += 1


PIPELINE = Pipeline(
    name="warehouse_sensors",
    description="Warehouse thermometers: readings per zone and device.",
    sources=(READINGS, DEVICES),
    gold=GOLD,
    demo=Demo(events=events, topics=(DEVICES.topic, READINGS.topic)),
)
