"""Versioned event schemas; a new version is a new name, never an edit. Each follows from a source declaration."""

from __future__ import annotations

from dataclasses import dataclass
from pyspark.sql.types import StructType

from lakehouse.schemas import from_sources


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


# The shop's schemas are declared with their sources (schemas/sources.py).
__getattr__ = from_sources(__name__, {
    "PAGE_VIEWS_V1": lambda s: s.PAGE_VIEWS.schema,
    "ORDERS_V1": lambda s: s.ORDERS.schema,
    "ALL": lambda s: tuple(source.schema for source in s.SOURCES),
    "PAGE_TYPES": lambda s: s.PAGE_TYPES,
    "CURRENCIES": lambda s: s.CURRENCIES,
    "ORDER_LINE": lambda s: s.ORDER_LINE,
})
