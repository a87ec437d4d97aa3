"""Versioned event schemas; a new version is a new name, never an edit. Each follows from a source declaration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType


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


_FROM_SOURCES = {"PAGE_VIEWS_V1", "ORDERS_V1", "ALL", "PAGE_TYPES", "CURRENCIES", "ORDER_LINE"}


def __getattr__(name: str) -> Any:
    if name not in _FROM_SOURCES:  # e.g. the import system probing for __path__
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The shop's schemas are declared with their sources (schemas/sources.py); imported lazily so that
    # sources.py can build on this module.
    from schemas import sources

    shop = {
        "PAGE_VIEWS_V1": lambda: sources.PAGE_VIEWS.schema,
        "ORDERS_V1": lambda: sources.ORDERS.schema,
        "ALL": lambda: tuple(s.schema for s in sources.SOURCES),
        "PAGE_TYPES": lambda: sources.PAGE_TYPES,
        "CURRENCIES": lambda: sources.CURRENCIES,
        "ORDER_LINE": lambda: sources.ORDER_LINE,
    }
    return shop[name]()
