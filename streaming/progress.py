"""Every micro-batch's progress, kept as rows of the Delta table stream_progress (query with `lakehouse sql`)."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable

from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.sql.streaming import StreamingQueryListener

from lakehouse.schemas.tables import STREAM_PROGRESS

log = logging.getLogger(__name__)

_LONGS = T.MapType(T.StringType(), T.LongType())
SCHEMA = T.StructType([
    T.StructField("recorded_at", T.TimestampType()),      # when the batch's trigger fired (Spark's progress timestamp)
    T.StructField("mode", T.StringType()),                # continuous or catch-up
    T.StructField("query", T.StringType()),               # the flow's name (its query's name)
    T.StructField("run_id", T.StringType()),
    T.StructField("batch_id", T.LongType()),
    T.StructField("input_rows", T.LongType()),
    T.StructField("input_rows_per_s", T.DoubleType()),
    T.StructField("processed_rows_per_s", T.DoubleType()),
    T.StructField("batch_ms", T.LongType()),              # triggerExecution: the whole micro-batch
    T.StructField("duration_ms", _LONGS),                 # its parts: latestOffset, getBatch, addBatch, walCommit, ...
    T.StructField("kafka_end_offsets", _LONGS),           # "topic/partition" -> offset the batch read up to
    T.StructField("kafka_lag", _LONGS),                   # "topic/partition" -> records behind the newest offset
    T.StructField("lag_records", T.LongType()),           # their sum (null for a flow that reads tables)
    T.StructField("state_rows", T.LongType()),            # Spark state store rows (null: the query keeps none)
    T.StructField("state_memory_bytes", T.LongType()),
    T.StructField("watermark", T.StringType()),
])


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw else {}
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def progress_row(progress: Any, mode: str) -> dict[str, Any]:
    """One stream_progress row from a StreamingQueryProgress."""
    ends: dict[str, int] = {}
    lag: dict[str, int] = {}
    for source in progress.sources:
        if not source.description.startswith("KafkaV2"):
            continue
        end, latest = _offsets(source.endOffset), _offsets(source.latestOffset)
        for topic, parts in end.items():
            if not isinstance(parts, dict):
                continue
            for partition, offset in parts.items():
                key = f"{topic}/{partition}"
                ends[key] = int(offset)
                newest = (latest.get(topic) or {}).get(partition)
                if newest is not None:
                    lag[key] = max(0, int(newest) - int(offset))
    operators = progress.stateOperators or []
    durations = {k: int(v) for k, v in (progress.durationMs or {}).items()}
    return {
        "recorded_at": datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).astimezone(timezone.utc)
        .replace(tzinfo=None),
        "mode": mode,
        "query": progress.name,
        "run_id": str(progress.runId),
        "batch_id": int(progress.batchId),
        "input_rows": int(progress.numInputRows),
        "input_rows_per_s": float(progress.inputRowsPerSecond or 0.0),
        "processed_rows_per_s": float(progress.processedRowsPerSecond or 0.0),
        "batch_ms": durations.get("triggerExecution"),
        "duration_ms": durations,
        "kafka_end_offsets": ends,
        "kafka_lag": lag,
        "lag_records": sum(lag.values()) if lag else None,
        "state_rows": sum(int(op.numRowsTotal) for op in operators) if operators else None,
        "state_memory_bytes": sum(int(op.memoryUsedBytes) for op in operators) if operators else None,
        "watermark": (progress.eventTime or {}).get("watermark"),
    }


class ProgressRecorder(StreamingQueryListener):
    """Collects each query's progress as it is reported and appends it to stream_progress when flushed.

    Spark calls the listener on its own thread: it only buffers. `flush` writes the buffer as one Delta
    append (a micro-batch of metrics), so recording costs one small write every few seconds, not one per batch.
    `on_progress` also sees every row as it arrives (the stream's reporter). `flows_of` names the flows a
    query runs (a topic's query runs several): each gets the query's row under its own name, so the table
    holds one row per flow and batch however the flows were grouped into queries.
    """

    def __init__(self, lake_root: str, *, mode: str, on_progress: Callable[[dict[str, Any]], None] | None = None,
                 idle_too: bool = False, keep: bool = True, flows_of: Callable[[dict], list[str]] | None = None):
        self.path = STREAM_PROGRESS.path(lake_root)
        self.mode = mode
        self.on_progress = on_progress
        self.idle_too = idle_too          # record batches that read nothing (continuous mode polls every trigger)
        self.keep = keep                  # False: only forward rows to on_progress, write nothing
        self.flows_of = flows_of
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            row = progress_row(event.progress, self.mode)
        except Exception:  # noqa: BLE001 - a metric must never stop a stream
            log.debug("could not read a progress event", exc_info=True)
            return
        if self.on_progress is not None:
            self.on_progress(row)
        if self.keep and (row["input_rows"] or self.idle_too):
            names = self.flows_of(row) if self.flows_of is not None else [row["query"]]
            with self._lock:
                self._rows.extend({**row, "query": name} for name in names)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass

    def extend(self, rows: list[dict[str, Any]]) -> None:
        """Record rows made after the fact (a catch-up run's recentProgress, see FlowRun.progress)."""
        with self._lock:
            self._rows.extend(rows)

    def flush(self, spark: SparkSession) -> int:
        """Append what was collected to stream_progress; returns the rows written."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        try:
            spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(self.path)
        except Exception as exc:  # noqa: BLE001 - keep them for the next flush rather than lose them
            with self._lock:
                self._rows[:0] = rows
            log.warning("could not append %d rows to %s (%s); will retry", len(rows), self.path,
                        str(exc).splitlines()[0][:200])
            return 0
        return len(rows)
