"""Rules about whole tables, which no single batch can check: the accounting identity, references, freshness.

- accounting (silver): every bronze record is in exactly one place: silver, quarantine, late arrivals,
  or a duplicate of an event silver holds. A record in none of them is lost; the check names how many.
- accounting (gold): every silver event is counted in the gold table or listed among its flow's
  unreconciled late arrivals (silver = counted + late arrivals).
- references: every row of a silver table refers to a row another holds, as the pipeline declares (warns).
- freshness: the newest event in the table is at most a given age.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas import tables
from lakehouse.schemas.pipeline import Reference, active_pipeline
from lakehouse.schemas.sources import Source
from lakehouse.schemas.tables import LATE_ARRIVALS, QUARANTINE, TableSpec

COORDS = ["topic", "partition", "offset"]


@dataclass
class TableCheck:
    """One whole-table rule's verdict with the figures behind it."""

    name: str
    table: str
    passed: bool
    severity: str                     # "fail" (an error) or "warn"
    description: str
    figures: dict[str, object] = field(default_factory=dict)


# What Delta says when no table is committed at a path.
_ABSENT = ("PATH_NOT_FOUND", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE")


def read_delta(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path` as it is now, or None if none is committed there.

    Not DeltaTable.isDeltaTable first: it answers from a log the session caches without updating it, so
    a long-lived session (lakehouse serve) would miss a table another process created after it asked.
    """
    try:
        return spark.read.format("delta").load(path)
    except AnalysisException as exc:
        if exc.getCondition() in _ABSENT:
            return None
        raise


def _read(spark: SparkSession, spec: TableSpec, lake_root: str) -> DataFrame | None:
    return read_delta(spark, spec.path(lake_root))


def silver_accounting(spark: SparkSession, source: Source, lake_root: str) -> TableCheck | None:
    """bronze = silver + quarantine + late arrivals + duplicates, record by record (by Kafka coordinates)."""
    bronze = _read(spark, source.bronze_table, lake_root)
    if bronze is None:
        return None
    silver_table = source.silver_table
    silver = _read(spark, silver_table, lake_root)
    quarantine, late = _read(spark, QUARANTINE, lake_root), _read(spark, LATE_ARRIVALS, lake_root)
    empty = bronze.sparkSession.createDataFrame([], "topic string, partition int, offset long")
    placed = {
        "silver": silver.select(*COORDS) if silver is not None else empty,
        "quarantine": quarantine.where(F.col("schema") == source.topic).select(*COORDS) if quarantine is not None else empty,
        "late_arrivals": late.where(F.col("table") == silver_table.name).select(*COORDS) if late is not None else empty,
    }
    rows = bronze.select(*COORDS, F.get_json_object(F.col("value").cast("string"), "$.event_id").alias("event_id"))
    figures: dict[str, object] = {"bronze": rows.count()}
    rest = rows
    for name, coords in placed.items():
        figures[name] = coords.count()
        rest = rest.join(coords, COORDS, "left_anti")
    ids = silver.select("event_id").distinct() if silver is not None else empty.select(F.lit("").alias("event_id"))
    duplicates = rest.join(ids, "event_id", "left_semi").count()
    unaccounted = rest.count() - duplicates
    figures.update(duplicates=duplicates, unaccounted=unaccounted)
    return TableCheck(
        "accounting", silver_table.name, unaccounted == 0, "fail",
        f"bronze {figures['bronze']} = silver {figures['silver']} + quarantine {figures['quarantine']} + late arrivals "
        f"{figures['late_arrivals']} + duplicates {duplicates}" + (f"; {unaccounted} records are in none of them"
                                                                     if unaccounted else ""),
        figures)


def gold_accounting(spark: SparkSession, table: str, lake_root: str, counts: tuple[str, str, str] | None = None
                    ) -> TableCheck | None:
    """silver = counted in gold + the flow's unreconciled late arrivals.

    `counts` is what the pipeline declares for the table (Pipeline.gold_counts): the silver table, what one of
    its events adds to the gold count (SQL), and the SQL aggregate that counts the gold table.
    """
    if counts is None:
        counts = active_pipeline().gold_counts.get(table)
    if counts is None:
        return None
    silver_name, per_event, counted = counts
    gold, silver = _read(spark, tables.BY_NAME[table], lake_root), _read(spark, tables.BY_NAME[silver_name], lake_root)
    if gold is None or silver is None:
        return None
    late = _read(spark, LATE_ARRIVALS, lake_root)
    unreconciled = 0
    if late is not None:
        mine = late.where(F.col("flow") == table)
        if "reconciled_at" in late.columns:
            mine = mine.where(F.col("reconciled_at").isNull())
        late_events = mine.select("event_id").distinct()
        unreconciled = silver.join(late_events, "event_id", "left_semi").agg(F.expr(f"sum({per_event})")).first()[0] or 0
    events = silver.agg(F.expr(f"sum({per_event})")).first()[0] or 0
    in_gold = gold.agg(F.expr(counted)).first()[0] or 0
    missing = events - in_gold - unreconciled
    return TableCheck(
        "accounting", table, missing == 0, "fail",
        f"{silver_name} {events} = counted in {table} {in_gold} + unreconciled late arrivals {unreconciled}"
        + (f"; {missing} not accounted for" if missing else ""),
        {"silver": events, "counted": in_gold, "late_unreconciled": unreconciled, "unaccounted": missing})


def references(spark: SparkSession, rule: Reference, lake_root: str) -> TableCheck | None:
    """Every row of the rule's child table refers to a row its parent table holds (warn: kept, and listed)."""
    child, parent = _read(spark, tables.BY_NAME[rule.child], lake_root), _read(spark, tables.BY_NAME[rule.parent], lake_root)
    if child is None:
        return None
    total = child.count()
    orphans = child if parent is None else child.join(
        parent.select(F.col(rule.column)).distinct(), rule.column, "left_anti")
    n = orphans.count()
    samples = [r[0] for r in orphans.select(rule.sample).limit(5).collect()]
    return TableCheck("references", rule.child, n == 0, "warn",
                      f"{n} of {total} rows of {rule.child} refer to a {rule.column} {rule.parent} does not hold"
                      + (f", e.g. {', '.join(samples)}" if samples else ""),
                      {"rows": total, "orphans": n})


def freshness(spark: SparkSession, spec: TableSpec, lake_root: str, max_age_s: float,
              now: datetime | None = None) -> TableCheck | None:
    """The newest event time in the table is at most `max_age_s` old."""
    df = _read(spark, spec, lake_root)
    column = spec.time_range[1] if spec.time_range else ("occurred_at" if df is not None and "occurred_at" in df.columns
                                                          else None)
    if df is None or column is None:
        return None
    newest = df.agg(F.max(column)).first()[0]
    now = now or datetime.now(timezone.utc)
    if newest is None:
        return TableCheck("freshness", spec.name, False, "warn", f"{spec.name} holds no events", {"age_s": -1})
    newest = newest if newest.tzinfo else newest.replace(tzinfo=timezone.utc)
    age = (now - newest).total_seconds()
    return TableCheck("freshness", spec.name, age <= max_age_s, "warn",
                      f"newest {column} is {newest.isoformat()}, {age / 3600:.1f} h old (limit {max_age_s / 3600:.1f} h)",
                      {"newest": newest.isoformat(), "age_s": round(age, 1), "limit_s": max_age_s})
