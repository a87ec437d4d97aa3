"""Kafka topic specs: name, key, partitions, retention and cleanup policy, and the schema each carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from schemas.events import EventSchema

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


_FROM_SOURCES = {"PAGE_VIEWS", "ORDERS", "ALL", "BY_NAME"}


def __getattr__(name: str) -> Any:
    if name not in _FROM_SOURCES:  # e.g. the import system probing for __path__
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Topics follow from the source declarations (schemas/sources.py), imported lazily to avoid a cycle.
    from schemas import sources

    shop = {
        "PAGE_VIEWS": lambda: sources.PAGE_VIEWS.topic_spec,
        "ORDERS": lambda: sources.ORDERS.topic_spec,
        "ALL": lambda: tuple(s.topic_spec for s in sources.SOURCES),
        "BY_NAME": lambda: {s.topic: s.topic_spec for s in sources.SOURCES},
    }
    return shop[name]()
