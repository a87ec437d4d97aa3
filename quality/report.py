"""The quality report: a summary per table from the results table, and GX's Data Docs as HTML."""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.quality import docs_assets
from lakehouse.quality.results import DOCS_KEEP, gx_context
from lakehouse.quality.table_checks import read_delta

log = logging.getLogger(__name__)


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


SITE = "local_site"
SITE_DIR = "uncommitted/data_docs/local_site/"
VIEWS = "lakehouse.quality.docs_views"


def site_config(offline: bool = True) -> dict:
    """GX's local site, with views that load the pages' assets from the site itself (offline), no how-to pop-ups."""
    def view(name: str) -> dict:
        return {"view": {"module_name": VIEWS, "class_name": name}} if offline else {}

    return {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": SITE_DIR},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", **view("OfflineIndexPageView")},
        "site_section_builders": {"expectations": view("OfflinePageView"), "validations": view("OfflinePageView"),
                                  "profiling": "None"},
    }


def _configure(context, offline: bool) -> None:
    """Point the project's site at the offline views (or at GX's own when the assets are missing)."""
    wanted = site_config(offline)
    sites = context.list_data_docs_sites()
    if sites.get(SITE) == wanted:
        return
    if SITE in sites:
        context.update_data_docs_site(SITE, wanted)
    else:
        context.add_data_docs_site(SITE, wanted)


def prune(context, keep: int) -> list:
    """Drop all but the newest `keep` validations of each suite (one per table) from GX's store and the site."""
    store = context.validation_results_store
    by_suite: dict[str, list] = {}
    for key in store.list_keys():
        by_suite.setdefault(key.expectation_suite_identifier.name, []).append(key)
    site = Path(context.root_directory) / SITE_DIR
    dropped = []
    for keys in by_suite.values():
        for key in sorted(keys, key=lambda k: k.run_id.run_time, reverse=True)[keep:]:
            store.remove_key(key)
            *folders, batch = key.to_tuple()
            _remove_page(site.joinpath("validations", *folders), f"{batch}.html")
            dropped.append(key)
    return dropped


def _remove_page(folder: Path, name: str) -> None:
    """Delete a validation's page and the run folders it leaves empty."""
    (folder / name).unlink(missing_ok=True)
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:   # not empty, or already gone
            return


def _assets_ready() -> bool:
    """Whether the Data Docs assets are in the environment, fetching them if not (one try per process)."""
    global _FETCH_FAILED
    if docs_assets.ready():
        return True
    if _FETCH_FAILED:
        return False
    try:
        docs_assets.fetch_docs_assets()
        return True
    except (docs_assets.AssetsMissing, OSError, subprocess.SubprocessError) as err:
        _FETCH_FAILED = True
        log.warning("Data Docs will load their scripts and styles from public CDNs: %s", err)
        return False


_FETCH_FAILED = False


def build_data_docs(gx_root: str, keep: int = DOCS_KEEP, new: list | None = None) -> Path | None:
    """Render the Data Docs' newest `keep` validations per table (only `new`'s pages, if given); index.html or None."""
    # Rendering only the pages of what was just stored keeps a stream's refresh under a second; the
    # index is rebuilt from the whole (bounded) store each time.
    if not (Path(gx_root) / "gx").exists():
        return None
    context = gx_context(gx_root)
    offline = _assets_ready()
    _configure(context, offline)
    dropped = set(prune(context, keep))
    fresh = [k for k in new or () if k not in dropped]
    context.build_data_docs(site_names=[SITE], resource_identifiers=fresh or None)
    index = Path(context.root_directory) / SITE_DIR / "index.html"
    if offline:
        docs_assets.install_into(index.parent)
    return index if index.exists() else None
