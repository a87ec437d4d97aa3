"""The quality report: a summary per table from the results table, and GX's Data Docs as HTML."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.quality.results import gx_context
from lakehouse.quality.table_checks import read_delta


@dataclass
class TableSummary:
    """How one table's batches fared: validations, failed expectations by severity, rows dropped, last batch."""

    table: str
    batches: int
    expectations: int
    failed_warn: int
    failed_fail: int
    dropped: int
    last_validated_at: str
    failing: list[str]


def summarize(spark: SparkSession, results_path: str) -> list[TableSummary]:
    """One summary per table that has results, from the Delta results table."""
    if (results := read_delta(spark, results_path)) is None:
        return []
    per_table = results.groupBy("table").agg(
        F.countDistinct("lane", "flow", "batch_id", "validated_at").alias("batches"),
        F.countDistinct("expectation").alias("expectations"),
        F.count(F.when(~F.col("success") & (F.col("severity") == "warn"), 1)).alias("failed_warn"),
        F.count(F.when(~F.col("success") & (F.col("severity") == "fail"), 1)).alias("failed_fail"),
        F.coalesce(F.sum("dropped"), F.lit(0)).alias("dropped"),
        F.max("validated_at").alias("last"),
        F.sort_array(F.collect_set(F.when(~F.col("success"), F.concat_ws(":", "expectation", "severity")))).alias("failing"),
    ).orderBy("table").collect()
    return [TableSummary(r["table"], r["batches"], r["expectations"], r["failed_warn"], r["failed_fail"],
                         int(r["dropped"]), str(r["last"])[:19], list(r["failing"])) for r in per_table]


def build_data_docs(gx_root: str) -> Path | None:
    """Render GX's Data Docs from the stored validation results; the path of index.html (None: nothing stored)."""
    if not (Path(gx_root) / "gx").exists():
        return None
    context = gx_context(gx_root)
    context.build_data_docs()
    for site in context.get_docs_sites_urls():
        url = site.get("site_url") or ""
        if url.startswith("file://"):
            return Path(url[len("file://"):])
    return None
