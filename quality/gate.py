"""The quality gate the flows call where data moves: screen a parsed batch, validate what a batch writes."""

from __future__ import annotations

import logging
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.quality.evaluate import drop_marks, evaluate, samples, totals
from lakehouse.quality.results import DOCS_KEEP, Recorder, Validation, now
from lakehouse.quality.suites import Suite, build_suites
from lakehouse.schemas.tables import TableSpec

log = logging.getLogger(__name__)


class QualityBreach(RuntimeError):
    """A fail-severity expectation failed: the batch was not written and the table's query stops."""


class Gate:
    """Implements streaming.context.QualityGate with the suites of quality/suites.py."""

    def __init__(self, results_path: str, gx_root: str | None = None, suites: Mapping[str, Suite] | None = None,
                 run_id: str | None = None, docs_keep: int = DOCS_KEEP):
        self.suites = dict(suites if suites is not None else build_suites())
        self.recorder = Recorder(results_path, gx_root, docs_keep)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.history: list[Validation] = []     # every validation this gate made, for the asset check
        # A suite's Spark columns, built once: building them costs thousands of calls into the JVM
        # (about 0.5 s for a silver suite), which every micro-batch would pay again.
        self._columns: dict[tuple[str, str], Any] = {}
        self._holding = False

    def _built(self, kind: str, suite: Suite, build: Callable[[], Any]) -> Any:
        key = (kind, suite.name)
        if key not in self._columns:
            self._columns[key] = build()
        return self._columns[key]

    def suite_for(self, table: TableSpec) -> Suite | None:
        return self.suites.get(table.suite or table.name)

    def screen(self, table: TableSpec, parsed: DataFrame) -> DataFrame:
        """Set reason/detail on valid rows that break a drop-severity rule, so they go to quarantine."""
        suite = self.suite_for(table)
        rules = suite.of("drop") if suite else ()
        if not rules:
            return parsed
        return parsed.withColumns(self._built("screen", suite, lambda: drop_marks(parsed.columns, rules)))

    def totals(self, table: TableSpec) -> list[Column]:
        """The aggregate columns `validate` needs over the rows it checks (none without a suite)."""
        suite = self.suite_for(table)
        return self._built("totals", suite, lambda: totals(suite)) if suite else []

    def validate(self, table: TableSpec, rows: DataFrame, batch, dropped: Mapping[str, int] | None = None,
                 screened: DataFrame | None = None, figures: Mapping[str, Any] | None = None) -> Validation | None:
        """Check `rows` (what the batch writes) against the table's suite; record; raise on a fail-severity breach.

        `dropped` counts the rows `screen` sent to quarantine, by rule; `screened` is the screened batch,
        from which a few of them are shown. `figures` are the `totals` columns over `rows` when the
        caller computed them in its own aggregation.
        """
        suite = self.suite_for(table)
        if suite is None:
            return None
        if figures is None:
            figures = rows.agg(*self.totals(table)).first().asDict()
        outcomes = evaluate(rows, suite, figures)
        for o in outcomes:
            o.dropped = (dropped or {}).get(o.expectation.name, 0)
            if o.dropped and screened is not None:
                o.samples = samples(screened.where(F.col("reason") == o.expectation.name), o.expectation.columns)
        validation = Validation(suite, table.name, batch.flow, batch.lane, batch.batch_id, batch.scope,
                                tuple(batch.offsets), outcomes, now(), self.run_id)
        self.recorder.add(validation)
        self.history.append(validation)
        broken = [o for o in outcomes if o.expectation.severity == "fail" and not o.success]
        if broken:
            self.recorder.flush(rows.sparkSession)
            raise QualityBreach(
                f"{table.name}: {'; '.join(f'{o.expectation.name} failed for {o.observed}' for o in broken)} in "
                f"{batch.describe()}; nothing of this batch was written and the query stopped (fix the input, "
                f"or relax the expectation's severity in quality/suites.py).")
        for o in outcomes:
            if not o.success and o.expectation.severity == "warn":
                log.warning("%s: %s failed for %s in %s (severity warn: recorded, rows kept)", table.name,
                            o.expectation.name, o.observed, batch.describe())
        if self.recorder.due():
            self.recorder.flush(rows.sparkSession)
        return validation

    def flush(self, spark) -> int:
        """Write the pending results (the runner calls this when a flow's run ends), unless they are held."""
        return 0 if self._holding else self.recorder.flush(spark)

    @contextmanager
    def holding_results(self, spark) -> Iterator[None]:
        """Within it, a flow's run ending writes nothing: the results are written once, when it exits.

        A catch-up's flows each ended with a Delta commit and a set of Data Docs files of their own, one
        after another (writes are serialized), about half a second each. Results still go out every
        FLUSH_SECONDS and before a failing batch stops its query.
        """
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            self.recorder.flush(spark)
