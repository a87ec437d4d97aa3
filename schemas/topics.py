"""Kafka topic specs: name, key, partitions, retention and cleanup policy, and the schema each carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from schemas.events import ORDERS_V1, PAGE_VIEWS_V1, EventSchema

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is configured; the live topic is created from it and checked against it."""

    schema: EventSchema
    key_field: str          # one key's events share a partition, so they keep their order
    partitions: int
    retention_ms: int = 7 * DAY_MS
    cleanup_policy: str = "delete"   # "compact" for changelogs (later issues)
    extra_config: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def asset_name(self) -> str:
        """A Dagster-safe name: shop.orders.v1 -> shop_orders_v1."""
        return self.name.replace(".", "_").replace("-", "_")

    def config(self) -> dict[str, str]:
        """The topic-level configuration the broker should hold for this topic."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            # The broker stamps each record when it appends it: bronze's third timestamp.
            "message.timestamp.type": "LogAppendTime",
            **self.extra_config,
        }


PAGE_VIEWS = TopicSpec(
    schema=PAGE_VIEWS_V1,
    key_field="customer_id",
    partitions=3,
    description="Every page a shopper sees, keyed by customer.",
)

ORDERS = TopicSpec(
    schema=ORDERS_V1,
    key_field="customer_id",
    partitions=3,
    description="Placed orders with their lines, keyed by customer.",
)

ALL = (PAGE_VIEWS, ORDERS)
BY_NAME = {spec.name: spec for spec in ALL}
