"""The sensors pipeline with doors, changed again: readings gain a column (battery_pct, which producers sent all
along and silver left out) and the zone transform names zones in capitals."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from lakehouse.schemas.sources import column

import warehouse_sensors as first
import warehouse_sensors_doors as before

READINGS = replace(first.READINGS, fields=(*first.READINGS.fields,
                                           column("battery_pct", IntegerType(), "Battery left, 0-100.")))


def with_zone(readings: DataFrame, *, dim_devices: DataFrame) -> DataFrame:
    """Each reading with the zone, in capitals, its device hung in at the reading's time."""
    return first.with_zone(readings, dim_devices=dim_devices).withColumn("zone", F.upper("zone"))


def _reading(gold):
    """The same table, reading the new readings source (and the new zone transform where it used the old)."""
    reads = tuple(READINGS if s is first.READINGS else s for s in gold.reads)
    return replace(gold, reads=reads, transform=with_zone if gold.transform is first.with_zone else gold.transform)


EVENT_SOURCES = (READINGS, before.DOORS)
GOLD = tuple(_reading(g) for g in before.GOLD)

PIPELINE = replace(before.PIPELINE, name="warehouse_sensors_v3", sources=(READINGS, first.DEVICES, before.DOORS),
                   gold=GOLD, params=(), module="")
