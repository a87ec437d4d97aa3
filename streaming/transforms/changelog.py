"""Changelogs: a database's change events (Debezium's envelope) as current state (SCD1) and history (SCD2).

Each change is ordered by the database's log position (`_order`: `source.lsn`, a snapshot's read before a change
at the same position: the first change after a snapshot has the snapshot's LSN), never by when it reached Kafka
or the lake, so changes that come twice, out of order or several to a key in one micro-batch give the same tables as
the database's own order. A delete removes the key's current row and closes its current version; deleted keys
are remembered (with the delete's position) so that an older change that arrives later never brings a deleted
row back. These are the pure steps of the changelog writer (streaming/changelog_batches.py), which both lanes call.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.schemas import reasons

LINEAGE = ("topic", "partition", "offset")
OPS = {"r": "read", "c": "create", "u": "update", "d": "delete"}
SOURCE = StructType([StructField("lsn", LongType()), StructField("ts_ms", LongType()),
                     StructField("txId", LongType())])


def envelope_schema(columns: StructType) -> StructType:
    """Debezium's JSON envelope of one table's rows (schemas off): before and after images, source, op."""
    return StructType([StructField("before", columns), StructField("after", columns),
                       StructField("source", SOURCE), StructField("op", StringType())])


def _reason(env: Column, is_json: Column, record_key: Column, key: str) -> tuple[Column, Column]:
    """(reason code, detail) of an envelope that is not a change this table can apply; NULL for a good one."""
    op, image = env["op"], F.when(env["op"] == "d", env["before"]).otherwise(env["after"])
    checks = [
        (~is_json | env.isNull(), reasons.MALFORMED_JSON, F.lit("not a JSON object")),
        (op.isNull(), reasons.MISSING_FIELD, F.lit("no op")),
        (~op.isin(*OPS), reasons.CONTRACT_VIOLATION, F.concat(F.lit("unknown op "), op)),
        (env["source"]["lsn"].isNull(), reasons.MISSING_FIELD, F.lit("no source.lsn (the database log position)")),
        (env["source"]["ts_ms"].isNull(), reasons.MISSING_FIELD, F.lit("no source.ts_ms (the commit time)")),
        (image.isNull(), reasons.MISSING_FIELD,
         F.when(op == "d", F.lit("a delete without its before image")).otherwise(F.lit("no after image"))),
        (image[key].isNull(), reasons.MISSING_FIELD, F.lit(f"no {key} in the row image")),
        (record_key.isNull() | (record_key != image[key]), reasons.CONTRACT_VIOLATION,
         F.lit(f"the record's key is not the row's {key}")),
    ]
    code, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for failed, name, why in reversed(checks):       # the first check that fails names the reason
        code = F.when(failed, F.lit(name)).otherwise(code)
        detail = F.when(failed, why).otherwise(detail)
    return code, detail


def parse_changes(records: DataFrame, *, key: str, columns: StructType) -> DataFrame:
    """Bronze records of a changelog topic as change rows: key, the row's columns, _op, _lsn, _changed_at, lineage,
    and `reason`/`detail` (NULL for a change that applies). Tombstones (no value) are left out: the delete
    before each one carries the change."""
    text = F.col("value").cast("string")
    env = F.from_json(text, envelope_schema(columns))
    # from_json gives a row of NULLs, not NULL, for text that is not JSON at all.
    is_json = F.coalesce(F.schema_of_variant(F.try_parse_json(text)).startswith("OBJECT<"), F.lit(False))
    record_key = F.get_json_object(F.col("key").cast("string"), f"$.{key}")
    parsed = records.where(F.col("value").isNotNull()).select(
        "*", env.alias("_env"), is_json.alias("_is_json"), record_key.alias("_key"))
    code, detail = _reason(F.col("_env"), F.col("_is_json"), F.col("_key"), key)
    image = F.when(F.col("_env.op") == "d", F.col("_env.before")).otherwise(F.col("_env.after"))
    return parsed.select(
        *(image[f.name].alias(f.name) for f in columns.fields),
        F.col("_env.op").alias("_op"),
        F.col("_env.source.lsn").alias("_lsn"),
        (F.col("_env.source.lsn") * 2 + F.when(F.col("_env.op") == "r", 0).otherwise(1)).alias("_order"),
        F.timestamp_millis(F.col("_env.source.ts_ms")).alias("_changed_at"),
        *LINEAGE, "key", "value", "headers", "appended_at", "ingested_at",
        code.alias("reason"), detail.alias("detail"),
    )


def unique_changes(changes: DataFrame, *, key: str) -> DataFrame:
    """One row per (key, log position): a change delivered twice is applied once (its lowest Kafka coordinates)."""
    identity = [key, "_order"]
    rest = [c for c in changes.columns if c not in identity]
    return changes.groupBy(*identity).agg(
        F.min_by(F.struct(*rest), F.struct(*LINEAGE)).alias("_c")).select(*identity, "_c.*")


def scd1_latest(changes: DataFrame, deletes: DataFrame, *, key: str) -> DataFrame:
    """Per key of `changes`, its newest change by log position among `changes` and the remembered `deletes`
    (key, _lsn, _order, _changed_at): what its current row must become (a delete: no row)."""
    remembered = deletes.join(changes.select(key).distinct(), key, "left_semi").select(
        key, "_lsn", "_order", "_changed_at", F.lit("d").alias("_op"))
    candidates = changes.unionByName(remembered, allowMissingColumns=True)
    newest = Window.partitionBy(key).orderBy(F.col("_order").desc())
    return candidates.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")


def scd2_history(existing: DataFrame, deletes: DataFrame, changes: DataFrame, *, key: str,
                 attributes: Sequence[str]) -> DataFrame:
    """Every version of the keys in `changes`, rebuilt in log order from the versions already in the table
    (`existing`), the remembered `deletes` and the new changes: each read, insert or update starts a version at
    its commit time; the next change ends it (`valid_to`), and a delete ends it without starting another."""
    keys = changes.select(key).distinct()
    version = [key, *attributes, "_lsn", "_order", "_changed_at"]
    starts = existing.join(keys, key, "left_semi").select(
        key, *attributes, "_lsn", "_order", F.col("valid_from").alias("_changed_at"), F.lit("u").alias("_op"),
        *LINEAGE)
    # A version closed by a delete carries that delete: it is part of the history to rebuild from.
    ended = existing.join(keys, key, "left_semi").where("_closed_by_delete").select(
        key, F.col("_end_lsn").alias("_lsn"), F.col("_end_order").alias("_order"), F.col("valid_to").alias("_changed_at"),
        F.lit("d").alias("_op"))
    remembered = deletes.join(keys, key, "left_semi").select(key, "_lsn", "_order", "_changed_at",
                                                             F.lit("d").alias("_op"))
    new = changes.select(*version, F.when(F.col("_op") == "d", "d").otherwise("u").alias("_op"), *LINEAGE)
    events = unique_changes(
        new.unionByName(starts).unionByName(ended, allowMissingColumns=True)
        .unionByName(remembered, allowMissingColumns=True), key=key)
    order = Window.partitionBy(key).orderBy("_order")
    following = events.select(
        "*",
        F.lead("_changed_at").over(order).alias("_next_at"),
        F.lead("_lsn").over(order).alias("_next_lsn"),
        F.lead("_order").over(order).alias("_next_order"),
        F.lead("_op").over(order).alias("_next_op"),
    ).where(F.col("_op") != "d")
    return following.select(
        key, *attributes,
        F.col("_changed_at").alias("valid_from"),
        F.col("_next_at").alias("valid_to"),
        F.col("_next_order").isNull().alias("is_current"),
        "_lsn",
        "_order",
        F.col("_next_lsn").alias("_end_lsn"),
        F.col("_next_order").alias("_end_order"),
        F.coalesce(F.col("_next_op") == "d", F.lit(False)).alias("_closed_by_delete"),
        *LINEAGE,
    )
