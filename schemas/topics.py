"""Kafka topic specs: name, key, partitions, retention and cleanup policy, and the schema each carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from lakehouse.schemas import from_pipeline
from lakehouse.schemas.events import EventSchema

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

    def config(self, replay_window_ms: int = 0) -> dict[str, str]:
        """The topic-level configuration the broker should hold for this topic.

        A topic that deletes by time keeps records at least the replay window (LAKEHOUSE_REPLAY_WINDOW, in
        ms); the spec's own retention wins when it is longer (-1: forever).
        """
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms if self.retention_ms < 0 else max(self.retention_ms, replay_window_ms)),
            # The broker stamps each record when it appends it: bronze's third timestamp.
            "message.timestamp.type": "LogAppendTime",
            **self.extra_config,
        }


# The active pipeline's topics (LAKEHOUSE_PIPELINE), one per declared source.
__getattr__ = from_pipeline(__name__, {
    "ALL": lambda p: tuple(source.topic_spec for source in p.sources),
    "BY_NAME": lambda p: {source.topic: source.topic_spec for source in p.sources},
})
