"""Bounded reads of the lake's tables: one table by its spec, or every table as a view by its name."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from schemas import tables
from schemas.tables import TableSpec


def read_table(spark: SparkSession, table: TableSpec, lake_root: str) -> DataFrame:
    """The table's current snapshot."""
    return spark.read.format("delta").load(table.path(lake_root))


def register_tables(spark: SparkSession, lake_root: str) -> list[str]:
    """Create (or replace) a temporary view per existing table; returns the names registered."""
    names = []
    for spec in tables.ALL:
        if DeltaTable.isDeltaTable(spark, spec.path(lake_root)):
            read_table(spark, spec, lake_root).createOrReplaceTempView(spec.name)
            names.append(spec.name)
    return names
