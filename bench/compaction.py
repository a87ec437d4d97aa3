"""Bench: a gold query on a table of many small files, before and after OPTIMIZE ZORDER BY its filter column.

    .venv/bin/python -m bench.compaction [--days 30] [--files 400] [--repeats 7]

Builds a gold-like table (revenue per minute, product category and currency, like
gold_category_revenue_per_minute) in many small files whose rows are spread over the whole time range,
as a table that many small MERGE batches and late arrivals have rewritten ends up; then runs the
project's own compaction (batch.maintenance.compact_table: OPTIMIZE ZORDER BY window_start). The query
sums one hour of revenue per currency. Both layouts are timed in the same run: the table before
compaction is read by time travel (its version before OPTIMIZE; VACUUM has not run, so its files are
all there), after a warm-up of each, alternating before/after for --repeats rounds. The figure is the
ratio of the medians. It writes <home>/bench/results/compaction.json (the project's state folder,
LAKEHOUSE_HOME, by default .lakehouse/; outside git) and prints the summary row for docs/benchmarks.md,
whose compaction row the maintainer updates by hand. A figure, never a test: the tests assert behaviour,
not speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("bench") / "results" / "compaction.json"   # under the project's state folder (Settings.home)
TABLE_MD = ROOT / "docs" / "benchmarks.md"   # one current figure per bench, updated by hand; no bench writes it
# The columns of the summary row a bench prints (bench.harness.record prints them above the row).
HEADER = """| date (UTC) | command | setup | before | after | figure | machine |
|---|---|---|---|---|---|---|
"""


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, load {load:.1f}"


def build_table(spark, path: str, *, days: int, files: int) -> None:
    """Revenue per minute x 8 categories x 3 currencies over `days`, in `files` files spanning the whole range."""
    from pyspark.sql import functions as F

    minutes = days * 24 * 60
    (spark.range(minutes * 8 * 3)
     .selectExpr(
         f"timestamp'2026-11-01 00:00:00' + make_interval(0, 0, 0, 0, 0, CAST(id % {minutes} AS INT)) AS window_start",
         f"element_at(array('books','toys','garden','food','tools','music','sport','home'), "
         f"CAST(floor(id / {minutes}) % 8 AS INT) + 1) AS category",
         f"element_at(array('EUR','USD','GBP'), CAST(floor(id / {minutes * 8}) AS INT) + 1) AS currency",
         "CAST(abs(hash(id)) % 100000 AS BIGINT) AS revenue_cents",
         "CAST(abs(hash(id, 1)) % 20 + 1 AS BIGINT) AS units",
         "CAST(abs(hash(id, 2)) % 5 + 1 AS BIGINT) AS orders",
     )
     .withColumn("window_end", F.expr("window_start + INTERVAL 1 MINUTE"))
     .repartition(files)            # round-robin: every small file holds minutes from the whole month
     .write.format("delta").save(path))


def timed(spark, sql: str) -> float:
    started = time.perf_counter()
    spark.sql(sql).collect()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30, help="days of one-minute windows (default 30)")
    parser.add_argument("--files", type=int, default=400, help="small files before compaction (default 400)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds, each before then after (default 7)")
    parser.add_argument("--max-file-mb", type=int, default=2,
                        help="OPTIMIZE's target file size in MB (default 2: this table is small, so Z-order yields "
                             "several files whose window_start ranges do not overlap)")
    parser.add_argument("--no-record", action="store_true",
                        help="print only; do not write the JSON (<home>/bench/results/compaction.json)")
    args = parser.parse_args(argv)

    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark
    from lakehouse.batch.maintenance import compact_table, layout
    from lakehouse.schemas.tables import TableSpec

    started_at = datetime.now(timezone.utc)
    where = machine()
    home = tempfile.mkdtemp(prefix="bench-compaction-")
    settings = Settings(home=home, jars_dir=Settings.from_env().jars_dir)
    spark = get_spark(settings, "bench-compaction")
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(args.max_file_mb * 1024 * 1024))
    spec = TableSpec("bench_category_revenue_per_minute", "gold", "bench table", ("window_start", "category", "currency"),
                     zorder_by=("window_start",))
    lake = f"{home}/lake"
    path = spec.path(lake)
    try:
        build_table(spark, path, days=args.days, files=args.files)
        compaction = compact_table(spark, spec, lake)
        assert compaction.status == "compacted", compaction
        after_layout = layout(spark, path)
        before_version = compaction.version - 1
        hour = "window_start >= timestamp'2026-11-15 12:00:00' AND window_start < timestamp'2026-11-15 13:00:00'"
        query = "SELECT currency, sum(revenue_cents) AS revenue_cents FROM delta.`{path}`{version} WHERE " + hour + \
                " GROUP BY currency"
        before_sql = query.format(path=path, version=f" VERSION AS OF {before_version}")
        after_sql = query.format(path=path, version="")
        assert sorted(spark.sql(before_sql).collect()) == sorted(spark.sql(after_sql).collect()), "answers differ"
        for _ in range(2):       # warm-up: JIT, snapshot caches, file system caches for both layouts
            timed(spark, before_sql)
            timed(spark, after_sql)
        before_s, after_s = [], []
        for _ in range(args.repeats):
            before_s.append(timed(spark, before_sql))
            after_s.append(timed(spark, after_sql))
        med_before, med_after = statistics.median(before_s), statistics.median(after_s)
        result = {
            "bench": "compaction",
            "date": started_at.isoformat(timespec="seconds"),
            "machine": where,
            "table": {"rows": args.days * 24 * 60 * 8 * 3, "days": args.days, "zorder_by": list(spec.zorder_by),
                      "optimize_max_file_bytes": args.max_file_mb * 1024 * 1024},
            "files_before": compaction.files_before, "bytes_before": compaction.bytes_before,
            "files_after": after_layout.files, "bytes_after": after_layout.bytes,
            "optimize_s": compaction.duration_s,
            "query": "sum(revenue_cents) per currency over one hour (filter on window_start)",
            "repeats": args.repeats,
            "before_s": [round(t, 4) for t in before_s], "after_s": [round(t, 4) for t in after_s],
            "median_before_s": round(med_before, 4), "median_after_s": round(med_after, 4),
            "speedup": round(med_before / med_after, 2),
        }
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)

    print(json.dumps(result, indent=2))
    if not args.no_record:
        path = Path(Settings.from_env().home) / RESULTS
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        row = (f"| {started_at:%Y-%m-%d %H:%M} | `python -m bench.compaction` | {result['table']['rows']:,} rows, "
               f"one-hour filter on `window_start`, median of {args.repeats} alternating runs after a warm-up | "
               f"{result['files_before']} files, {result['bytes_before'] / 1e6:.1f} MB, "
               f"{med_before * 1000:.0f} ms | {result['files_after']} files (Z-ordered), "
               f"{result['bytes_after'] / 1e6:.1f} MB, {med_after * 1000:.0f} ms | "
               f"{result['speedup']}x faster | {where} |\n")
        print(f"wrote {path}")
        print(f"\nThe run's summary row; update the bench's row in {TABLE_MD.relative_to(ROOT)} from it by hand:\n"
              + HEADER + row, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
