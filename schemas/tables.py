"""Delta table specs: layer, unique key, partitioning; one place that says where each table lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from lakehouse.schemas import from_pipeline

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
    time_range: tuple[str, str] | None = None   # columns whose min and max give the event time the table covers
    question: str = ""                    # the business question a gold table answers
    zorder_by: tuple[str, ...] = ()       # columns its queries filter on: nightly OPTIMIZE clusters files by them
    suite: str | None = None              # the expectation suite its batches are checked against (quality/suites.py);
                                          # None: the suite named after the table

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

# The active pipeline's tables (LAKEHOUSE_PIPELINE): bronze and silver follow from its sources, gold is declared.
__getattr__ = from_pipeline(__name__, {
    "GOLD": lambda p: p.gold_specs,
    "ALL": lambda p: all_tables(p.sources, p.gold_specs),
    "BY_NAME": lambda p: {spec.name: spec for spec in all_tables(p.sources, p.gold_specs)},
})


def all_tables(declared: Iterable[Any], gold: Iterable[TableSpec] | None = None) -> tuple[TableSpec, ...]:
    """Every table: each source's bronze and silver, then quarantine, late arrivals, gold and the quality results."""
    declared = tuple(declared)
    if gold is None:
        from lakehouse.schemas.pipeline import active_pipeline

        gold = active_pipeline().gold_specs
    return (
        *(s.bronze_table for s in declared),
        *(s.silver_table for s in declared),
        *(s.dimension_table for s in declared if s.dimension is not None),
        # A changelog's flows each remember the keys deleted in the database.
        *(s.deletes_table(t) for s in declared if s.changelog for t in (s.silver_table, s.dimension_table)),
        QUARANTINE,
        LATE_ARRIVALS,
        *gold,
        QUALITY_RESULTS,
        STREAM_PROGRESS,
    )


QUALITY_RESULTS = TableSpec(
    "quality_results", "silver",
    "One row per expectation per validated batch: table, suite, lane, micro-batch id, Kafka offsets or partitions, "
    "severity, success, observed value.",
    ("table", "lane", "flow", "batch_id", "expectation", "validated_at"),
)


STREAM_PROGRESS = TableSpec(
    "stream_progress", "silver",
    "One row per micro-batch of every query (continuous or catch-up): input rows, rows per second, batch duration "
    "and its parts, Kafka end offsets and lag per partition, state rows and memory, watermark.",
    ("query", "run_id", "batch_id"), time_range=("recorded_at", "recorded_at"),
)
