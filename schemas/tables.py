"""Delta table specs: layer, unique key, partitioning; one place that says where each table lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

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


_KAFKA_COORDS = ("topic", "partition", "offset")

BRONZE_PAGE_VIEWS = TableSpec(
    "bronze_page_views", "bronze", "Raw page-view records from Kafka, unparsed, with their coordinates.", _KAFKA_COORDS
)
BRONZE_ORDERS = TableSpec(
    "bronze_orders", "bronze", "Raw order records from Kafka, unparsed, with their coordinates.", _KAFKA_COORDS
)
SILVER_PAGE_VIEWS = TableSpec(
    "silver_page_views", "silver", "Parsed, validated, deduplicated page views.", ("event_id",), ("event_date",)
)
SILVER_ORDERS = TableSpec(
    "silver_orders", "silver", "Parsed, validated, deduplicated orders.", ("event_id",), ("event_date",)
)
QUARANTINE = TableSpec(
    "quarantine", "silver", "Records that failed parsing or their contract: reason, raw bytes, Kafka coordinates.",
    _KAFKA_COORDS,
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

ALL = (
    BRONZE_PAGE_VIEWS,
    BRONZE_ORDERS,
    SILVER_PAGE_VIEWS,
    SILVER_ORDERS,
    QUARANTINE,
    LATE_ARRIVALS,
    GOLD_REVENUE_PER_MINUTE,
    GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE,
)
BY_NAME = {spec.name: spec for spec in ALL}
