"""What a streaming or batch run needs to know about its surroundings, passed in explicitly."""

from __future__ import annotations

import re
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ContextManager, Mapping, Protocol

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.schemas.tables import TableSpec

_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
_PART = re.compile(r"\s*(\d+)\s*(second|minute|hour|day|week)s?\s*", re.IGNORECASE)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def instant_of(micros: int) -> datetime:
    """An instant in microseconds since the epoch as a UTC datetime, exact (integer arithmetic, no float)."""
    return _EPOCH + timedelta(microseconds=micros)


def iso_micros(micros: int | None) -> str | None:
    """An instant in microseconds since the epoch as ISO-8601 UTC (None stays None)."""
    if micros is None:
        return None
    return instant_of(micros).isoformat()


def timestamp_literal(micros: int) -> str:
    """A SQL TIMESTAMP literal for an instant in microseconds, exact, in UTC whatever the session's time zone.

    Literals, not a column or a join, are what Delta skips a table's files by (their min/max statistics).
    """
    return f"TIMESTAMP '{instant_of(micros).strftime('%Y-%m-%d %H:%M:%S.%f')}Z'"


def duration_micros(text: str) -> int:
    """Microseconds in a Spark interval string such as "10 minutes" or "1 hour 30 minutes"."""
    parts = _PART.findall(text)
    if not parts or _PART.sub("", text).strip():
        raise ValueError(f"{text!r} is not a duration such as '10 minutes' or '1 hour'")
    return sum(int(n) * _UNIT_SECONDS[unit.lower()] for n, unit in parts) * 1_000_000


@dataclass(frozen=True)
class BatchScope:
    """Which data a validated batch covered: the flow, its micro-batch id, the lane, and the Kafka offsets."""

    flow: str
    batch_id: int
    lane: str = "stream"                   # stream, or the batch lane's purpose: backfill, verify, replay
    scope: str | None = None               # the batch lane's partition range, e.g. 2026-11-20..2026-11-22
    offsets: tuple[tuple[str, int, int, int], ...] = ()   # (topic, partition, first offset, last offset)

    def describe(self) -> str:
        """`micro-batch 7 of flow silver_orders (shop.orders.v1 partition 0 offsets 120-180, ...)`."""
        where = ", ".join(f"{t} partition {p} offsets {a}-{b}" for t, p, a, b in self.offsets) or "no Kafka offsets"
        what = f"micro-batch {self.batch_id}" if self.lane == "stream" else f"the {self.lane} of {self.scope or 'all days'}"
        return f"{what} of flow {self.flow} ({where})"


class QualityGate(Protocol):
    """Expectations applied where data moves (quality/ implements it; the streaming lane only calls it).

    `screen` marks the rows of a parsed silver batch that fail a drop-severity expectation (reason =
    the expectation's name), so the silver writer sends them to quarantine like any bad record.
    `validate` checks the rows a batch is about to write against the table's suite, records the
    results, and raises when a fail-severity expectation fails, before anything is written; a writer
    that aggregates those rows anyway adds the `totals` columns and passes what they gave as `figures`.
    """

    def screen(self, table: "TableSpec", parsed: "DataFrame") -> "DataFrame": ...

    def totals(self, table: "TableSpec") -> "list[Column]": ...

    def validate(self, table: "TableSpec", rows: "DataFrame", batch: BatchScope, *,
                 dropped: Mapping[str, int] | None = None, screened: "DataFrame | None" = None,
                 figures: Mapping[str, object] | None = None) -> object: ...

    def flush(self, spark: object) -> int: ...

    def holding_results(self, spark: object) -> ContextManager[None]: ...


@dataclass(frozen=True)
class FlowContext:
    """Addresses and tunables for running flows; built from the settings by the caller."""

    lake_root: str
    kafka_bootstrap: str
    kafka_fetch_max_wait_ms: int = 10       # see infra/settings.py: the broker's wait that ended each read task
    silver_dedup_watermark: str = "1 hour"
    gold_watermark: str = "10 minutes"
    gold_watermarks: Mapping[str, str] = field(default_factory=dict)   # per-flow overrides
    params: Mapping[str, object] = field(default_factory=lambda: _pipeline_params())  # the pipeline's parameters
    event_time_floor: str = "2000-01-01T00:00:00Z"
    event_time_max_ahead: str = "1 day"
    max_offsets_per_trigger: int = 0        # 0: no cap
    max_files_per_trigger: int = 0          # 0: Delta's default
    max_bytes_per_trigger: str = "0"        # soft cap per batch on a Delta source, e.g. "128m"; "0": none
    input_root: str | None = None           # where inputs and lookups are read; None: lake_root (the batch
                                            # lane reads the live lake and writes a shadow one)

    input_roots: Mapping[str, str] = field(default_factory=dict)   # table name -> root, for single tables
                                                                    # (a replay reads the tables it rebuilt)
    quality: QualityGate | None = None      # the tables' expectations; None: none are checked
    lane: str = "stream"                    # who runs the flows: the stream, or the batch lane's purpose

    def batch_scope(self, flow: str, batch_id: int, rows: "DataFrame | None" = None,
                    offsets: tuple[tuple[str, int, int, int], ...] | None = None) -> BatchScope:
        """The scope of one batch; the Kafka offsets it covered are given, or read from `rows`' coordinates."""
        if offsets is None:
            offsets = offsets_covered(rows) if rows is not None else ()
        return BatchScope(flow, batch_id, self.lane, None, offsets)

    @property
    def inputs(self) -> str:
        """The lake root a flow reads its input tables and lookups from."""
        return self.input_root or self.lake_root

    def input_path(self, table: "TableSpec") -> str:
        """Where a flow reads the input or lookup table `table`."""
        return table.path(self.input_roots.get(table.name, self.inputs))

    def watermark_for(self, flow: str) -> str:
        """The watermark delay of a stateful gold flow: its override, else the gold default."""
        return self.gold_watermarks.get(flow, self.gold_watermark)

    def holding_results(self, spark: object) -> ContextManager[None]:
        """The quality gate's `holding_results` (validation results written once, at the end); nothing without a gate."""
        return self.quality.holding_results(spark) if self.quality is not None else nullcontext()


def _pipeline_params() -> dict[str, object]:
    """The active pipeline's parameter values (LAKEHOUSE_<NAME>, else each one's default)."""
    from lakehouse.schemas.pipeline import active_pipeline

    return active_pipeline().param_values()


def offsets_covered(rows: "DataFrame") -> tuple[tuple[str, int, int, int], ...]:
    """(topic, partition, first offset, last offset) of the rows' Kafka coordinates; () if they carry none."""
    from pyspark.sql import functions as F

    if not {"topic", "partition", "offset"} <= set(rows.columns):
        return ()
    found = rows.groupBy("topic", "partition").agg(F.min("offset").alias("a"), F.max("offset").alias("b")).collect()
    return tuple(sorted((r["topic"], r["partition"], r["a"], r["b"]) for r in found))
