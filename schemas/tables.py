"""Delta table specs: layer, unique key, partitioning; one place that says where each table lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from schemas import from_sources

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


# Bronze and silver tables follow from the source declarations (schemas/sources.py).
__getattr__ = from_sources(__name__, {
    "BRONZE_PAGE_VIEWS": lambda s: s.PAGE_VIEWS.bronze_table,
    "BRONZE_ORDERS": lambda s: s.ORDERS.bronze_table,
    "SILVER_PAGE_VIEWS": lambda s: s.PAGE_VIEWS.silver_table,
    "SILVER_ORDERS": lambda s: s.ORDERS.silver_table,
    "ALL": lambda s: all_tables(s.SOURCES),
    "BY_NAME": lambda s: {spec.name: spec for spec in all_tables(s.SOURCES)},
})


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
