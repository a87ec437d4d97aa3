"""`lakehouse quality report`: a summary per table of the expectation results, and the HTML Data Docs."""

from __future__ import annotations

import argparse

from lakehouse.infra.settings import Settings


def quality_report(settings: Settings, spark) -> tuple[list[tuple], str | None]:
    """The summary rows per table and the path of the Data Docs' index.html (None: no results yet)."""
    from lakehouse.quality.report import build_data_docs, summarize
    from lakehouse.schemas.tables import QUALITY_RESULTS

    rows = [(s.table, s.batches, s.expectations, s.failed_warn, s.failed_fail, s.dropped, s.last_validated_at,
             ", ".join(s.failing) or "-")
            for s in summarize(spark, QUALITY_RESULTS.path(settings.lake_root))]
    index = build_data_docs(settings.quality_dir, keep=settings.quality_docs_keep)
    return rows, str(index) if index else None


HEADER = ("table", "batches", "expectations", "warn failed", "fail failed", "rows dropped", "last validated (UTC)",
          "failing expectations")
TREND = ("lakehouse sql \"SELECT table, date_trunc('hour', validated_at) AS hour, count_if(NOT success) AS failed, "
         "sum(unexpected_count) AS unexpected FROM quality_results GROUP BY 1, 2 ORDER BY 2 DESC, 1\"")


def cmd_quality(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.spark import get_spark
    from lakehouse.serving.sql import format_table

    from lakehouse.orchestration.quality_checks import table_checks

    spark = get_spark(settings, "lakehouse-quality")
    rows, index = quality_report(settings, spark)
    if not rows:
        print("No validation results yet: materialize some tables first (lakehouse run, or lakehouse demo).")
        return 0
    print("Per batch (each silver and gold batch against its table's suite):")
    print(format_table(HEADER, rows))
    checks = table_checks(spark, settings.lake_root)
    print("\nWhole tables (job quality_checks in the UI):")
    print(format_table(("table", "rule", "verdict", "what"), [
        (c.table, c.name, "ok" if c.passed else ("FAILED" if c.severity == "fail" else "warning"), c.description)
        for c in checks]))
    print(f"\nHTML report (Great Expectations Data Docs): {index or 'not written (LAKEHOUSE_QUALITY_DIR is empty)'}")
    print(f"Trends over time: {TREND}")
    failed = sum(r[4] for r in rows) + sum(1 for c in checks if not c.passed and c.severity == "fail")
    return 1 if failed else 0


def add_quality_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse quality report`."""
    p = sub.add_parser(
        "quality", help="data-quality results per table and the HTML report (Great Expectations Data Docs)",
        description="Every silver and gold batch is checked against its table's expectation suite "
                    "(quality/suites.py) where it is written. `report` prints, per table, the batches validated, "
                    "the expectations that failed (warn: recorded; fail: the query stopped), the rows dropped to "
                    "quarantine, and builds the HTML Data Docs under LAKEHOUSE_QUALITY_DIR. Exit 1 if a "
                    "fail-severity expectation has failed. The results are also a table: quality_results.")
    p.add_argument("action", choices=["report"], help="report: the summary and the HTML Data Docs")
    p.set_defaults(fn=cmd_quality)
