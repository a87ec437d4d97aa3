"""Versioned event schemas; a new version is a new name, never an edit. Each follows from a source declaration."""

from __future__ import annotations

from dataclasses import dataclass
from pyspark.sql.types import StructType

from lakehouse.schemas import from_pipeline


@dataclass(frozen=True)
class EventSchema:
    """The JSON payload of one event type: its fields, which are required, which are instants, its rules."""

    name: str                          # e.g. shop.orders.v1 (also the topic it travels on)
    entity: str                        # e.g. orders: names the bronze/silver tables
    payload: StructType                # as written by producers; instants are ISO-8601 strings
    required: tuple[str, ...]
    timestamps: tuple[str, ...] = ("occurred_at", "sent_at")
    event_time: str = "occurred_at"
    rules: tuple[tuple[str, str], ...] = ()      # (name, SQL predicate that holds for a valid event)
    derived: tuple[tuple[str, str], ...] = ()    # (silver column, SQL expression)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.payload.fieldNames())


# The active pipeline's schemas (LAKEHOUSE_PIPELINE), one per declared source.
__getattr__ = from_pipeline(__name__, {"ALL": lambda p: tuple(source.schema for source in p.sources)})
