"""Where validation results go: a Delta table for trends (`lakehouse sql`) and GX's store for Data Docs.

Results are kept in memory and written in one Delta commit and one set of GX result files per flush
(at the end of a flow's run, before a failing batch stops its query, and at least every
FLUSH_SECONDS while a stream runs), so validating a micro-batch adds no commit of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BooleanType, DoubleType, LongType, StringType, StructField, StructType, TimestampType,
)

from lakehouse.quality.evaluate import Outcome
from lakehouse.quality.suites import Suite

log = logging.getLogger(__name__)

FLUSH_SECONDS = 30.0
DOCS_KEEP = 20      # validations per table that the Data Docs keep (setting quality_docs_keep)

RESULT_SCHEMA = StructType([
    StructField("table", StringType()), StructField("suite", StringType()), StructField("flow", StringType()),
    StructField("lane", StringType()), StructField("batch_id", LongType()), StructField("scope", StringType()),
    StructField("offsets", StringType()), StructField("expectation", StringType()),
    StructField("expectation_type", StringType()), StructField("columns", StringType()),
    StructField("severity", StringType()), StructField("success", BooleanType()),
    StructField("element_count", LongType()), StructField("unexpected_count", LongType()),
    StructField("unexpected_percent", DoubleType()), StructField("dropped", LongType()),
    StructField("observed", StringType()), StructField("validated_at", TimestampType()),
    StructField("run_id", StringType()),
])


@dataclass
class Validation:
    """One suite over one batch: what it covered and each expectation's outcome."""

    suite: Suite
    table: str
    flow: str
    lane: str
    batch_id: int
    scope: str | None
    offsets: tuple[tuple[str, int, int, int], ...]
    outcomes: list[Outcome]
    validated_at: datetime
    run_id: str

    @property
    def offsets_text(self) -> str:
        return "; ".join(f"{t}/{p}:{a}-{b}" for t, p, a, b in self.offsets)

    def rows(self) -> list[tuple]:
        return [(self.table, self.suite.name, self.flow, self.lane, self.batch_id, self.scope, self.offsets_text,
                 o.expectation.name, o.expectation.type, ", ".join(o.expectation.columns), o.expectation.severity,
                 o.passed, o.element_count, o.unexpected_count + o.dropped,
                 o.unexpected_percent, o.dropped, o.observed, self.validated_at, self.run_id)
                for o in self.outcomes]


class Recorder:
    """Buffers validations and writes them to the results table and GX's validation store."""

    def __init__(self, results_path: str, gx_root: str | None, docs_keep: int = DOCS_KEEP):
        self.results_path = results_path
        self.gx_root = gx_root
        self.docs_keep = docs_keep      # validations per table kept in the Data Docs
        self.pending: list[Validation] = []
        self.last_flush = time.monotonic()
        self._lock = threading.Lock()   # continuous queries call foreachBatch from their own threads
        self._writing = threading.Lock()  # one write at a time: GX's file store is not safe to write concurrently

    def add(self, validation: Validation) -> None:
        with self._lock:
            self.pending.append(validation)

    def due(self) -> bool:
        return bool(self.pending) and time.monotonic() - self.last_flush >= FLUSH_SECONDS

    def flush(self, spark: SparkSession) -> int:
        """Write what is pending; returns how many validations were written."""
        with self._writing:
            return self._flush(spark)

    def _flush(self, spark: SparkSession) -> int:
        with self._lock:
            batch, self.pending = self.pending, []
            self.last_flush = time.monotonic()
        if not batch:
            return 0
        rows = [row for v in batch for row in v.rows()]
        frame = spark.createDataFrame(rows, RESULT_SCHEMA)
        for attempt in (1, 2, 3):
            try:
                frame.write.format("delta").mode("append").option("mergeSchema", "true").save(self.results_path)
                break
            except Exception as exc:  # noqa: BLE001 - two flows' first results race to create the table; retry
                if attempt == 3 or "DELTA_PROTOCOL_CHANGED" not in str(exc) and "DELTA_METADATA_CHANGED" not in str(exc):
                    raise
        if self.gx_root:
            self._refresh_docs(batch)
        return len(batch)

    def _refresh_docs(self, batch: list[Validation]) -> None:
        """Store the validations in GX and render their pages, so the Data Docs follow every run."""
        from lakehouse.quality.report import build_data_docs

        try:
            build_data_docs(self.gx_root, keep=self.docs_keep, new=store_in_gx(self.gx_root, batch))
        except Exception as err:  # the report is a view of the results table; never stop a stream over it
            log.warning("could not store %d validation results for Data Docs in %s: %s", len(batch), self.gx_root, err)


def gx_context(gx_root: str):
    """The project's GX file context (suites, validation results, Data Docs) under the state folder."""
    import great_expectations as gx

    Path(gx_root).mkdir(parents=True, exist_ok=True)
    return gx.get_context(mode="file", project_root_dir=gx_root)


def store_in_gx(gx_root: str, validations: list[Validation]) -> list:
    """Each validation as a GX ExpectationSuiteValidationResult in the file context's store; their keys."""
    import great_expectations as gx
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier, ValidationResultIdentifier,
    )

    context = gx_context(gx_root)
    keys = []
    known = set(context.suites.all() and [s.name for s in context.suites.all()])
    for v in validations:
        if v.suite.name not in known:
            context.suites.add_or_update(gx.ExpectationSuite(
                name=v.suite.name, expectations=[e.gx.copy() for e in v.suite.expectations],
                meta={"table": v.table}))
            known.add(v.suite.name)
        results = []
        for o in v.outcomes:
            results.append(ExpectationValidationResult(
                success=o.passed,
                expectation_config=o.expectation.gx.configuration,
                result={
                    "element_count": o.element_count, "missing_count": o.missing_count,
                    "unexpected_count": o.unexpected_count + o.dropped, "unexpected_percent": o.unexpected_percent,
                    "partial_unexpected_list": list(o.samples),
                },
                meta={"severity": o.expectation.severity, "dropped_to_quarantine": o.dropped},
            ))
        passed = sum(r.success for r in results)
        what = f"batch {v.batch_id}" if v.lane == "stream" else f"{v.lane} {v.scope or ''}".strip()
        run_id = RunIdentifier(run_name=f"{v.flow} {what}", run_time=v.validated_at)
        batch_identifier = f"{v.lane}-{v.flow}-{v.batch_id}"
        result = ExpectationSuiteValidationResult(
            success=all(r.success for r in results), results=results, suite_name=v.suite.name,
            statistics={"evaluated_expectations": len(results), "successful_expectations": passed,
                        "unsuccessful_expectations": len(results) - passed,
                        "success_percent": 100.0 * passed / len(results) if results else 100.0},
            meta={"run_id": run_id, "validation_time": v.validated_at.isoformat(),
                  "batch_spec": {"data_asset_name": v.table, "batch_identifier": batch_identifier},
                  "active_batch_definition": {"datasource_name": "lake", "data_asset_name": v.table,
                                              "batch_definition_name": what},
                  "batch_markers": {"flow": v.flow, "lane": v.lane, "batch_id": v.batch_id, "scope": v.scope,
                                    "kafka_offsets": v.offsets_text},
                  "great_expectations_version": gx.__version__},
        )
        key = ValidationResultIdentifier(ExpectationSuiteIdentifier(name=v.suite.name), run_id, batch_identifier)
        context.validation_results_store.set(key, result)
        keys.append(key)
    return keys


def now() -> datetime:
    return datetime.now(timezone.utc)
