"""Dimensions on a few static rows: SCD2 recomputation, the MERGE writer (out of order, replayed), as-of joins."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from lakehouse.pipelines.shop import PRODUCTS
from lakehouse.schemas.tables import TableSpec
from lakehouse.streaming.dimension_batches import DimensionWriter
from lakehouse.streaming.transforms.dimensions import enrich_as_of, scd2_versions, to_dimension_changes
from lakehouse.pipelines import shop

T0 = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
ATTRS = ("name", "category", "list_price_cents")

SILVER = StructType([
    StructField("event_id", StringType()),
    StructField("occurred_at", TimestampType()),
    StructField("product_id", StringType()),
    StructField("name", StringType()),
    StructField("category", StringType()),
    StructField("list_price_cents", LongType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
])


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def change(spark, *rows):
    """Silver change events (event_id, minutes after T0, product, price, offset) as the dim flow's transform sees them."""
    data = [(eid, at(m), pid, f"Product {pid}", "books", price, "shop.products.v1", 0, off)
            for eid, m, pid, price, off in rows]
    return to_dimension_changes(spark.createDataFrame(data, SILVER), key="product_id", attributes=ATTRS)


def chains(rows) -> dict[str, list[tuple]]:
    """key -> [(valid_from, valid_to, is_current, price, event_id)] in valid_from order."""
    out: dict[str, list[tuple]] = {}
    for r in sorted(rows, key=lambda r: (r.product_id, r.valid_from, r.event_id)):
        out.setdefault(r.product_id, []).append((r.valid_from, r.valid_to, r.is_current, r.list_price_cents, r.event_id))
    return out


def utc(values):
    """PySpark returns timestamps as naive datetimes in the local time zone: make them aware instants."""
    return [v.astimezone(timezone.utc) if isinstance(v, datetime) else v for v in values]


def read_chains(spark, path):
    rows = spark.read.format("delta").load(path).collect()
    return {k: [tuple(utc(v)) for v in vs] for k, vs in chains(rows).items()}


def test_scd2_versions_chain_each_key_and_place_an_out_of_order_change(spark):
    """valid_to is the next version's valid_from per key; a change that arrives later but happened earlier is placed
    between the versions around it, and a version present on both sides is kept once."""
    spark = spark
    first = change(spark, ("e1", 0, "p-1", 100, 1), ("e3", 20, "p-1", 300, 3), ("e9", 5, "p-2", 900, 9))
    existing = scd2_versions(first.limit(0), first, key="product_id", attributes=ATTRS)
    late = change(spark, ("e2", 10, "p-1", 200, 4), ("e3", 20, "p-1", 300, 3))
    got = {k: [tuple(utc(v)) for v in vs]
           for k, vs in chains(scd2_versions(existing, late, key="product_id", attributes=ATTRS).collect()).items()}
    assert got == {
        "p-1": [(at(0), at(10), False, 100, "e1"), (at(10), at(20), False, 200, "e2"), (at(20), None, True, 300, "e3")],
        "p-2": [(at(5), None, True, 900, "e9")],
    }


def test_scd2_versions_break_ties_in_event_time_by_event_id(spark):
    """Two changes at the same instant: the one with the smaller event id gets an empty interval, the other holds."""
    spark = spark
    both = change(spark, ("b", 0, "p-1", 200, 2), ("a", 0, "p-1", 100, 1))
    got = chains(scd2_versions(both.limit(0), both, key="product_id", attributes=ATTRS).collect())
    assert [(v[4], *utc([v[1]]), v[2]) for v in got["p-1"]] == [("a", at(0), False), ("b", None, True)]


def test_the_writer_merges_batches_out_of_order_and_skips_a_replayed_batch(spark, tmp_path):
    """Batch 0 seeds, batch 1 adds a later version, batch 2 one in between; replaying batch 2 writes nothing."""
    spark = spark
    table = TableSpec("dim_products", "silver", "test", ("product_id", "valid_from", "event_id"))
    writer = DimensionWriter(table=table, lake_root=str(tmp_path), key="product_id", attributes=ATTRS,
                             app_id="dim_products-test", schema=PRODUCTS.dimension_schema)
    path = table.path(str(tmp_path))
    writer(change(spark, ("e1", 0, "p-1", 100, 1), ("e9", 0, "p-2", 900, 2)), 0)
    # The table was new: batch 0 was appended; replayed by a restarted writer, Delta skips it by its txn id.
    [first] = DeltaTable.forPath(spark, path).history(1).collect()
    assert first["operation"] == "WRITE" and first["operationMetrics"]["numOutputRows"] == "2"
    restarted = DimensionWriter(table=table, lake_root=str(tmp_path), key="product_id", attributes=ATTRS,
                                app_id="dim_products-test", schema=PRODUCTS.dimension_schema)
    restarted(change(spark, ("e1", 0, "p-1", 100, 1), ("e9", 0, "p-2", 900, 2)), 0)
    assert DeltaTable.forPath(spark, path).history(1).collect()[0]["version"] == first["version"]
    assert restarted.stats.skipped_batches == 1
    writer(change(spark, ("e3", 20, "p-1", 300, 5)), 1)
    assert read_chains(spark, path)["p-1"] == [(at(0), at(20), False, 100, "e1"), (at(20), None, True, 300, "e3")]
    writer(change(spark, ("e2", 10, "p-1", 200, 4)), 2)
    expected = {
        "p-1": [(at(0), at(10), False, 100, "e1"), (at(10), at(20), False, 200, "e2"), (at(20), None, True, 300, "e3")],
        "p-2": [(at(0), None, True, 900, "e9")],
    }
    assert read_chains(spark, path) == expected
    assert (writer.stats.versions_inserted, writer.stats.versions_closed) == (4, 2)

    version = DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
    writer(change(spark, ("e4", 15, "p-1", 250, 6)), 2)   # batch 2 again (a replay), even with other rows
    assert DeltaTable.forPath(spark, path).history(1).collect()[0]["version"] == version
    assert read_chains(spark, path) == expected
    assert writer.stats.skipped_batches == 1 and writer.stats.versions_inserted == 4
    columns = {f.name: f.metadata.get("comment") for f in spark.read.format("delta").load(path).schema.fields}
    assert list(columns) == ["product_id", *ATTRS, "valid_from", "valid_to", "is_current", "event_id", "topic",
                             "partition", "offset"]
    assert columns["valid_to"] and columns["list_price_cents"]


VERSIONS = [
    # product, valid_from, valid_to, price, category
    ("p-1", at(0), at(10), 100, "books"),
    ("p-1", at(10), at(20), 200, "books"),
    ("p-1", at(20), None, 300, "toys"),
    ("p-2", at(5), None, 900, "home"),
]


def versions_df(spark):
    schema = "product_id string, valid_from timestamp, valid_to timestamp, list_price_cents bigint, category string"
    return spark.createDataFrame(VERSIONS, schema)


def test_enrich_as_of_takes_the_version_in_force_at_each_event(spark):
    """Boundaries are [valid_from, valid_to); before the first version or for an unknown key the attributes are NULL."""
    spark = spark
    events = spark.createDataFrame([
        ("o-1", "p-1", at(-1)),    # before any version
        ("o-2", "p-1", at(0)),     # exactly at the first version
        ("o-3", "p-1", at(9.99)),
        ("o-4", "p-1", at(10)),    # exactly at a change: the new version
        ("o-5", "p-1", at(500)),   # the current version
        ("o-6", "p-2", at(4)),
        ("o-7", "p-2", at(6)),
        ("o-8", "p-9", at(6)),     # no such product
    ], "order_id string, product_id string, occurred_at timestamp")
    out = enrich_as_of(events, versions_df(spark), key="product_id", event_time="occurred_at",
                       attributes={"list_price_cents": "list_price_at_order", "category": "category_at_order"})
    assert out.columns == ["order_id", "product_id", "occurred_at", "list_price_at_order", "category_at_order"]
    got = {r.order_id: (r.list_price_at_order, r.category_at_order) for r in out.collect()}
    assert got == {"o-1": (None, None), "o-2": (100, "books"), "o-3": (100, "books"), "o-4": (200, "books"),
                   "o-5": (300, "toys"), "o-6": (None, None), "o-7": (900, "home"), "o-8": (None, None)}
    assert out.count() == events.count()   # a left join that never multiplies an event


def test_enrich_as_of_ignores_a_change_after_the_event(spark):
    """Adding a version that starts after an event (and closing the one it had) leaves that event's enrichment as it was;
    a plain join on the key with the latest version would not."""
    spark = spark
    events = spark.createDataFrame([("o-1", "p-2", at(6))], "order_id string, product_id string, occurred_at timestamp")
    kwargs = dict(key="product_id", event_time="occurred_at", attributes={"list_price_cents": "price"})
    before = enrich_as_of(events, versions_df(spark), **kwargs).collect()
    changed = [v if v[0] != "p-2" else ("p-2", at(5), at(30), 900, "home") for v in VERSIONS] + \
        [("p-2", at(30), None, 1500, "home")]
    schema = "product_id string, valid_from timestamp, valid_to timestamp, list_price_cents bigint, category string"
    after = enrich_as_of(events, spark.createDataFrame(changed, schema), **kwargs).collect()
    assert [r.price for r in before] == [r.price for r in after] == [900]
    latest = spark.createDataFrame(changed, schema).where("valid_to IS NULL")
    assert [r.list_price_cents for r in events.join(latest, "product_id").collect()] == [1500]


def test_enrich_as_of_refuses_an_output_column_that_exists():
    """Naming an output after an event column is a mistake said in one sentence, not a silent overwrite."""
    class Columns:  # only .columns is read before the check
        columns = ["order_id", "price"]

    with pytest.raises(ValueError, match="price"):
        enrich_as_of(Columns(), Columns(), key="product_id", event_time="occurred_at", attributes={"x": "price"})
