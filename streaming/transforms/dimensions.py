"""Dimensions: change events as versions with validity intervals (SCD2), and joins as of an event's time.

A dimension keeps one row per key and version: the key, its attributes, `valid_from` (the change's event
time), `valid_to` (the next version's valid_from; NULL for the current one), `is_current`, and the change's
event id and Kafka coordinates. `to_dimension_changes` is the dimension flow's transform (it runs on the
silver stream); `scd2_versions` is the pure step of the per-micro-batch writer
(streaming/dimension_batches.py); `enrich_as_of` joins events with the versions in force at their time.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

LINEAGE = ("event_id", "topic", "partition", "offset")
# valid_from, valid_to and is_current sit between the attributes and the lineage.
INTERVAL = ("valid_from", "valid_to", "is_current")


def dimension_columns(key: str, attributes: Sequence[str]) -> list[str]:
    """The columns of a dimension table, in order."""
    return [key, *attributes, *INTERVAL, *LINEAGE]


def to_dimension_changes(
    changes: DataFrame, *, key: str, attributes: Sequence[str], event_time: str = "occurred_at"
) -> DataFrame:
    """Change events as dimension versions: key, attributes, valid_from (the change's event time), lineage."""
    return changes.select(
        key, *attributes, F.col(event_time).alias("valid_from"), *LINEAGE,
    )


def scd2_versions(existing: DataFrame, changes: DataFrame, *, key: str, attributes: Sequence[str]) -> DataFrame:
    """Every version of the keys in `existing` and `changes`, each with its validity interval recomputed.

    `existing` holds dimension rows (with valid_to and is_current, which are ignored), `changes` the output
    of `to_dimension_changes`. A version is identified by (key, valid_from, event_id); one that appears in
    both is kept once. Versions are ordered by valid_from, ties broken by event_id, so a change that arrives
    after a later one still lands in its place: valid_to is the next version's valid_from.
    """
    version = [key, *attributes, "valid_from", *LINEAGE]
    both = existing.select(*version).unionByName(changes.select(*version))
    # One row per version: the copy at the lowest Kafka coordinates, whichever side it came from.
    identity = [key, "valid_from", "event_id"]
    rest = [c for c in version if c not in identity]
    unique = both.groupBy(*identity).agg(
        F.min_by(F.struct(*rest), F.struct("topic", "partition", "offset")).alias("_v")
    ).select(*identity, "_v.*")
    order = Window.partitionBy(key).orderBy(F.col("valid_from").asc(), F.col("event_id").asc())
    valid_to = F.lead("valid_from").over(order)
    return unique.select(
        key, *attributes, "valid_from", valid_to.alias("valid_to"), valid_to.isNull().alias("is_current"), *LINEAGE,
    )


def enrich_as_of(
    events: DataFrame, versions: DataFrame, *, key: str, event_time: str, attributes: Mapping[str, str]
) -> DataFrame:
    """Each event with the dimension's attributes as they were at its event time (NULL where no version covered it).

    A left join on `key` where valid_from <= event_time < coalesce(valid_to, +infinity); `attributes` maps a
    dimension column to the output column it becomes. Unlike a plain join with the dimension's latest
    state, a change after the event never alters its enrichment, also when the events are replayed.
    Works on static DataFrames and on a stream joined with a static dimension (e.g. inside foreachBatch).
    """
    clash = sorted(set(attributes.values()) & set(events.columns))
    if clash:
        raise ValueError(f"enrich_as_of: output columns {', '.join(clash)} already exist in the events")
    dim = versions.select(
        F.col(key).alias("_dim_key"),
        F.col("valid_from").alias("_dim_valid_from"),
        F.col("valid_to").alias("_dim_valid_to"),
        *(F.col(column).alias(output) for column, output in attributes.items()),
    )
    at = F.col(event_time)
    condition = (
        (F.col(key) == F.col("_dim_key"))
        & (F.col("_dim_valid_from") <= at)
        & (F.col("_dim_valid_to").isNull() | (at < F.col("_dim_valid_to")))
    )
    return events.join(dim, condition, "left").drop("_dim_key", "_dim_valid_from", "_dim_valid_to")
