"""Register every Delta table of the lake as a view by its name, for SQL."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from schemas import tables


def register_tables(spark: SparkSession, lake_root: str) -> list[str]:
    """Create (or replace) a temporary view per existing table; returns the names registered."""
    names = []
    for spec in tables.ALL:
        path = spec.path(lake_root)
        if DeltaTable.isDeltaTable(spark, path):
            spark.read.format("delta").load(path).createOrReplaceTempView(spec.name)
            names.append(spec.name)
    return names
