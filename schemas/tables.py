"""Delta table specs: layer, unique key, partitioning; one place that says where each table lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

Layer = Literal["bronze", "silver", "gold"]


@dataclass(frozen=True)
class TableSpec:
    """One Delta table under the lake root."""

    name: str
    layer: Layer
    description: str
    keys: tuple[str, ...]                 # what makes a row unique
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    def path(self, lake_root: str) -> str:
        """Where the table lives: <lake_root>/<layer>/<name> (a folder or an object-store URI)."""
        return f"{lake_root.rstrip('/')}/{self.layer}/{self.name}"


KAFKA_COORDINATES = ("topic", "partition", "offset")

QUARANTINE = TableSpec(
    "quarantine", "silver", "Records that failed parsing or their contract: reason, raw bytes, Kafka coordinates.",
    KAFKA_COORDINATES,
)
LATE_ARRIVALS = TableSpec(
    "late_arrivals", "silver",
    "Valid events that arrived behind a flow's watermark: the flow, event time, watermark, lateness, Kafka coordinates.",
    ("flow", "topic", "partition", "offset"),
)
GOLD_REVENUE_PER_MINUTE = TableSpec(
    "gold_revenue_per_minute", "gold", "Revenue per one-minute event-time window and currency.",
    ("window_start", "currency"),
)
GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE = TableSpec(
    "gold_page_views_per_product_minute", "gold", "Product-page views per one-minute event-time window and product.",
    ("window_start", "product_id"),
)

GOLD = (GOLD_REVENUE_PER_MINUTE, GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE)


_FROM_SOURCES = {"BRONZE_PAGE_VIEWS", "BRONZE_ORDERS", "SILVER_PAGE_VIEWS", "SILVER_ORDERS", "ALL", "BY_NAME"}


def __getattr__(name: str) -> Any:
    if name not in _FROM_SOURCES:  # e.g. the import system probing for __path__
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Bronze and silver tables follow from the source declarations (schemas/sources.py), imported lazily.
    from schemas import sources

    per_source = {
        "BRONZE_PAGE_VIEWS": lambda: sources.PAGE_VIEWS.bronze_table,
        "BRONZE_ORDERS": lambda: sources.ORDERS.bronze_table,
        "SILVER_PAGE_VIEWS": lambda: sources.PAGE_VIEWS.silver_table,
        "SILVER_ORDERS": lambda: sources.ORDERS.silver_table,
        "ALL": lambda: all_tables(sources.SOURCES),
        "BY_NAME": lambda: {spec.name: spec for spec in all_tables(sources.SOURCES)},
    }
    return per_source[name]()


def all_tables(declared: Iterable[Any]) -> tuple[TableSpec, ...]:
    """Every table: each source's bronze and silver, then quarantine, late arrivals and gold."""
    declared = tuple(declared)
    return (
        *(s.bronze_table for s in declared),
        *(s.silver_table for s in declared),
        QUARANTINE,
        LATE_ARRIVALS,
        *GOLD,
    )
