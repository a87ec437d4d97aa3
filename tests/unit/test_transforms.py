"""Bronze, silver, quarantine and gold transforms on static frames shaped like Spark's Kafka source."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.testing import assertDataFrameEqual

from streaming.transforms.bronze import to_bronze
from streaming.transforms.gold import to_gold_page_views_per_product_minute, to_gold_revenue_per_minute
from streaming.transforms.silver import (
    to_quarantine_orders,
    to_quarantine_page_views,
    to_silver_orders,
    to_silver_page_views,
)

ORDERS = "shop.orders.v1"
PAGE_VIEWS = "shop.page_views.v1"
APPENDED = datetime(2026, 5, 1, 10, 5, 0, tzinfo=timezone.utc)

KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
    ]))),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def order(event_id: str, *, occurred_at: str = "2026-05-01T10:00:00.000Z", customer: str = "c-00001",
          currency: str = "EUR", lines: list[tuple[str, int, int]] | None = None, total: int | None = None,
          sent_at: str = "2026-05-01T10:00:01.000Z") -> dict:
    lines = lines if lines is not None else [("p-0001", 2, 150), ("p-0002", 1, 999)]
    return {
        "event_id": event_id,
        "occurred_at": occurred_at,
        "sent_at": sent_at,
        "order_id": f"o-{event_id}",
        "customer_id": customer,
        "currency": currency,
        "lines": [{"product_id": p, "quantity": q, "unit_price_cents": u} for p, q, u in lines],
        "total_cents": total if total is not None else sum(q * u for _, q, u in lines),
    }


def page_view(event_id: str, *, page_type: str = "product", product: str | None = "p-0001",
              occurred_at: str = "2026-05-01T10:00:00.000Z", customer: str = "c-00001") -> dict:
    return {
        "event_id": event_id,
        "occurred_at": occurred_at,
        "sent_at": "2026-05-01T10:00:01.000Z",
        "customer_id": customer,
        "session_id": f"s-{customer}-1",
        "page_type": page_type,
        "product_id": product,
        "url": f"/p/{product}" if product else f"/{page_type}",
        "referrer": "direct",
    }


def without(payload: dict, field: str) -> dict:
    return {k: v for k, v in payload.items() if k != field}


def encode(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def kafka_rows(topic: str, values: list[bytes | None], partition: int = 0) -> list[tuple]:
    """Kafka-source tuples: offset = position in `values`, key c-<offset>, a schema header."""
    return [
        (f"c-{offset:05d}".encode(), value, [("schema", topic.encode())], topic, partition, offset,
         APPENDED + timedelta(milliseconds=offset), 1)
        for offset, value in enumerate(values)
    ]


def kafka_frame(spark, topic: str, values: list[bytes | None], partition: int = 0):
    return spark.createDataFrame(kafka_rows(topic, values, partition), KAFKA_SCHEMA)


def reasons_by_offset(quarantine) -> dict[int, tuple[str, str | None]]:
    return {r["offset"]: (r["reason"], r["detail"]) for r in quarantine.collect()}


# ---------------------------------------------------------------- bronze

def test_bronze_keeps_every_row_and_coordinate(spark):
    """to_bronze keeps key, value, headers and coordinates of every record and renames timestamp to appended_at."""
    values = [encode(order("e-1")), b"{not json", None, b"\xff\xfe"]
    rows = kafka_rows(ORDERS, values, partition=2)
    bronze = to_bronze(spark.createDataFrame(rows, KAFKA_SCHEMA))

    assert bronze.columns == [
        "key", "value", "headers", "topic", "partition", "offset", "appended_at", "timestamp_type", "ingested_at",
    ]
    assert dict(bronze.dtypes)["appended_at"] == "timestamp"
    expected_schema = StructType(KAFKA_SCHEMA.fields[:6] + [
        StructField("appended_at", TimestampType()),
        StructField("timestamp_type", IntegerType()),
    ])
    assertDataFrameEqual(bronze.drop("ingested_at"), spark.createDataFrame(rows, expected_schema))
    assert bronze.where(F.col("ingested_at").isNull()).count() == 0


# ---------------------------------------------------------------- quarantine

def test_quarantine_orders_gives_the_expected_reason_per_record(spark):
    """Each crafted bad order lands in quarantine with its reason and detail; valid orders do not."""
    good = order("e-0")
    values = [
        encode(good),                                                             # 0 valid
        encode(order("e-1"))[:40],                                                # 1 truncated
        b"\xff\xfe" + encode(order("e-2")),                                       # 2 not UTF-8
        encode(without(order("e-3"), "customer_id")),                             # 3 missing field
        encode(order("e-4", occurred_at="yesterday")),                            # 4 bad timestamp
        encode(order("e-5", lines=[("p-0001", 2, 150)], total=301)),              # 5 total != lines
        encode(order("e-6", lines=[("p-0001", 0, 150), ("p-0002", 1, 999)])),     # 6 quantity 0
        encode(order("e-7", currency="XXX")),                                     # 7 unknown currency
        encode(order("e-8", lines=[("p-0003", 3, 1000)], currency="GBP")),        # 8 valid
        b"",                                                                      # 9 empty value
        encode(order("e-10", lines=[])),                                          # 10 no lines
        encode(order("e-11", lines=[("p-0001", 1, -5)], total=-5)),               # 11 negative price
    ]
    quarantine = to_quarantine_orders(to_bronze(kafka_frame(spark, ORDERS, values)))
    assert reasons_by_offset(quarantine) == {
        1: ("malformed_json", None),
        2: ("invalid_encoding", None),
        3: ("missing_field", "customer_id"),
        4: ("bad_timestamp", "occurred_at"),
        5: ("contract_violation", "total_matches_lines"),
        6: ("contract_violation", "quantity_positive"),
        7: ("contract_violation", "known_currency"),
        9: ("malformed_json", None),
        10: ("contract_violation", "order_has_lines"),
        11: ("contract_violation", "price_not_negative"),
    }


def test_quarantine_keeps_raw_bytes_and_coordinates(spark):
    """A quarantined record carries its original key, value bytes, headers, coordinates and schema name."""
    bad = b"\xff\xfe" + encode(order("e-1"))
    rows = kafka_rows(ORDERS, [encode(order("e-0")), bad], partition=1)
    quarantine = to_quarantine_orders(to_bronze(spark.createDataFrame(rows, KAFKA_SCHEMA)))
    (row,) = quarantine.collect()
    assert (row["topic"], row["partition"], row["offset"]) == (ORDERS, 1, 1)
    assert bytes(row["key"]) == b"c-00001"
    assert bytes(row["value"]) == bad
    assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [("schema", ORDERS.encode())]
    assert row["schema"] == ORDERS
    assert row["quarantined_at"] is not None


def test_quarantine_page_views_gives_the_expected_reason_per_record(spark):
    """Each crafted bad page view lands in quarantine with its reason and detail; valid ones do not."""
    values = [
        encode(page_view("v-0")),                                                  # 0 valid product page
        encode(page_view("v-1", product=None)),                                    # 1 product page, no product
        encode(page_view("v-2", page_type="home", product=None)),                  # 2 valid, no product needed
        encode(page_view("v-3"))[:25],                                             # 3 truncated
        encode(without(page_view("v-4"), "customer_id")),                          # 4 missing field
        encode(page_view("v-5", occurred_at="yesterday")),                         # 5 bad timestamp
        b"\xff\xfe" + encode(page_view("v-6")),                                    # 6 not UTF-8
        encode(page_view("v-7", page_type="landing", product=None)),               # 7 unknown page type
        encode(without(page_view("v-8", page_type="cart", product=None), "product_id")),  # 8 valid, field absent
    ]
    quarantine = to_quarantine_page_views(to_bronze(kafka_frame(spark, PAGE_VIEWS, values)))
    assert reasons_by_offset(quarantine) == {
        1: ("contract_violation", "product_page_has_product"),
        3: ("malformed_json", None),
        4: ("missing_field", "customer_id"),
        5: ("bad_timestamp", "occurred_at"),
        6: ("invalid_encoding", None),
        7: ("contract_violation", "known_page_type"),
    }


def test_wrongly_typed_field_is_a_missing_field(spark):
    """A required field of the wrong JSON type is quarantined as missing_field."""
    payload = {**order("e-1"), "total_cents": "a lot"}
    quarantine = to_quarantine_orders(to_bronze(kafka_frame(spark, ORDERS, [encode(payload)])))
    assert [r["reason"] for r in quarantine.collect()] == ["missing_field"]


# ---------------------------------------------------------------- silver

def run_stream(spark, tmp_path, rows: list[tuple], transform):
    """Feed Kafka-shaped rows through bronze and `transform` as a real stream; the output as a static frame."""
    source = str(tmp_path / f"source-{uuid.uuid4().hex}")
    spark.createDataFrame(rows, KAFKA_SCHEMA).write.parquet(source)
    stream = transform(to_bronze(spark.readStream.schema(KAFKA_SCHEMA).parquet(source)))
    name = f"silver_test_{uuid.uuid4().hex}"
    query = (
        stream.writeStream.format("memory").queryName(name).outputMode("append")
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return spark.table(name)


ORDER_LINES = ArrayType(StructType([
    StructField("product_id", StringType()),
    StructField("quantity", IntegerType()),
    StructField("unit_price_cents", LongType()),
]))
SILVER_ORDER_COLUMNS = StructType([
    StructField("event_id", StringType()),
    StructField("occurred_at", TimestampType()),
    StructField("order_id", StringType()),
    StructField("customer_id", StringType()),
    StructField("currency", StringType()),
    StructField("lines", ORDER_LINES),
    StructField("total_cents", LongType()),
    StructField("event_date", DateType()),
    StructField("item_count", IntegerType()),
])


def expected_silver_orders(payloads: list[dict]) -> list[tuple]:
    """One silver row per distinct event id, computed in plain Python from the JSON payloads."""
    unique = {p["event_id"]: p for p in payloads}
    return [
        (p["event_id"], utc(p["occurred_at"]), p["order_id"], p["customer_id"], p["currency"],
         [(li["product_id"], li["quantity"], li["unit_price_cents"]) for li in p["lines"]], p["total_cents"],
         utc(p["occurred_at"]).date(), sum(li["quantity"] for li in p["lines"]))
        for p in unique.values()
    ]


def test_silver_orders_are_typed_deduplicated_and_counted(spark, tmp_path):
    """to_silver_orders (streaming) keeps one row per event id, types instants, adds event_date and item_count."""
    first = order("e-1", occurred_at="2026-05-01T23:59:59.500Z", lines=[("p-0001", 2, 150), ("p-0002", 3, 999)])
    retry = {**first, "sent_at": "2026-05-01T23:59:59.900Z"}     # a producer retry: same event, later send
    second = order("e-2", occurred_at="2026-05-02T00:00:00.000Z", currency="USD", lines=[("p-0009", 1, 4200)])
    values = [encode(first), encode(retry), encode(order("bad", currency="XXX")), encode(second)]
    silver = run_stream(spark, tmp_path, kafka_rows(ORDERS, values),
                        lambda bronze: to_silver_orders(bronze, dedup_watermark="1 hour"))

    types = {f.name: f.dataType for f in silver.schema.fields}
    assert types["occurred_at"] == TimestampType()
    assert types["sent_at"] == TimestampType()
    assert types["event_date"] == DateType()
    assert types["item_count"] == IntegerType()
    for lineage in ("topic", "partition", "offset", "appended_at", "ingested_at"):
        assert lineage in types

    expected = expected_silver_orders([first, retry, second])
    assertDataFrameEqual(silver.select(*SILVER_ORDER_COLUMNS.fieldNames()),
                         spark.createDataFrame(expected, SILVER_ORDER_COLUMNS))
    assert sorted(row[7] for row in expected) == [date(2026, 5, 1), date(2026, 5, 2)]

    kept = {r["event_id"]: r for r in silver.collect()}
    # Either copy may win, but the kept row's lineage and send time belong to the same copy.
    assert (kept["e-1"]["offset"], kept["e-1"]["sent_at"]) in {
        (0, datetime(2026, 5, 1, 10, 0, 1)),
        (1, datetime(2026, 5, 1, 23, 59, 59, 900000)),
    }
    assert (kept["e-2"]["offset"], kept["e-2"]["sent_at"]) == (3, datetime(2026, 5, 1, 10, 0, 1))


def test_silver_orders_on_a_static_frame(spark):
    """to_silver_orders also works on a static (batch) frame: one row per event id, with item_count."""
    first = order("e-1", lines=[("p-0001", 2, 150), ("p-0002", 3, 999)])
    second = order("e-2", currency="USD", lines=[("p-0009", 1, 4200)])
    values = [encode(first), encode(first), encode(second)]
    silver = to_silver_orders(to_bronze(kafka_frame(spark, ORDERS, values)), dedup_watermark="1 hour")
    try:
        silver.collect()
    except AnalysisException as exc:
        pytest.fail(f"to_silver_orders cannot run on a batch frame: {str(exc).splitlines()[0]}")
    expected = expected_silver_orders([first, second])
    assertDataFrameEqual(silver.select(*SILVER_ORDER_COLUMNS.fieldNames()),
                         spark.createDataFrame(expected, SILVER_ORDER_COLUMNS))


def test_silver_page_views_drop_invalid_and_duplicate_events(spark, tmp_path):
    """to_silver_page_views (streaming) keeps valid page views once each and none of the quarantined ones."""
    values = [
        encode(page_view("v-1")),
        encode(page_view("v-1")),
        encode(page_view("v-2", page_type="home", product=None)),
        encode(page_view("v-3", product=None)),
        b"{",
    ]
    silver = run_stream(spark, tmp_path, kafka_rows(PAGE_VIEWS, values),
                        lambda bronze: to_silver_page_views(bronze, dedup_watermark="1 hour"))
    rows = silver.select("event_id", "page_type", "product_id", "event_date").collect()
    assert sorted(tuple(r) for r in rows) == [
        ("v-1", "product", "p-0001", date(2026, 5, 1)),
        ("v-2", "home", None, date(2026, 5, 1)),
    ]


# ---------------------------------------------------------------- gold

SILVER_ORDERS_SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("occurred_at", TimestampType()),
    StructField("currency", StringType()),
    StructField("total_cents", LongType()),
    StructField("item_count", IntegerType()),
])


def minute_of(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def test_gold_revenue_per_minute_and_currency(spark):
    """Revenue, order count and items per one-minute window and currency equal a plain-Python grouping."""
    orders = [
        ("e-1", utc("2026-05-01T10:00:00.000Z"), "EUR", 1000, 2),
        ("e-2", utc("2026-05-01T10:00:59.999Z"), "EUR", 2500, 1),
        ("e-3", utc("2026-05-01T10:00:30.000Z"), "USD", 700, 3),
        ("e-4", utc("2026-05-01T10:01:00.000Z"), "EUR", 300, 1),
        ("e-5", utc("2026-05-01T10:59:59.000Z"), "GBP", 4200, 4),
        ("e-6", utc("2026-05-01T11:00:00.001Z"), "GBP", 100, 1),
        ("e-7", utc("2026-05-01T09:41:12.000Z"), "EUR", 50, 5),   # a late one
    ]
    groups: dict[tuple[datetime, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for _, ts, currency, total, items in orders:
        acc = groups[(minute_of(ts), currency)]
        acc[0] += total
        acc[1] += 1
        acc[2] += items
    expected = [(start, start + timedelta(minutes=1), cur, rev, n, items)
                for (start, cur), (rev, n, items) in groups.items()]
    expected_schema = StructType([
        StructField("window_start", TimestampType()),
        StructField("window_end", TimestampType()),
        StructField("currency", StringType()),
        StructField("revenue_cents", LongType()),
        StructField("orders", LongType()),
        StructField("items", LongType()),
    ])
    gold = to_gold_revenue_per_minute(spark.createDataFrame(orders, SILVER_ORDERS_SCHEMA), watermark="10 minutes")
    assertDataFrameEqual(gold, spark.createDataFrame(expected, expected_schema))
    assert len(expected) == 6


def test_gold_page_views_per_product_minute(spark):
    """Views per one-minute window and product equal a plain-Python count; views without a product are left out."""
    views = [
        ("v-1", utc("2026-05-01T10:00:01.000Z"), "product", "p-0001"),
        ("v-2", utc("2026-05-01T10:00:45.000Z"), "product", "p-0001"),
        ("v-3", utc("2026-05-01T10:00:59.999Z"), "product", "p-0002"),
        ("v-4", utc("2026-05-01T10:01:00.000Z"), "product", "p-0001"),
        ("v-5", utc("2026-05-01T10:00:10.000Z"), "home", None),
        ("v-6", utc("2026-05-01T10:00:20.000Z"), "cart", None),
        ("v-7", utc("2026-05-01T23:59:59.999Z"), "product", "p-0002"),
    ]
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for _, ts, _, product in views:
        if product is not None:
            counts[(minute_of(ts), product)] += 1
    expected = [(start, start + timedelta(minutes=1), product, n) for (start, product), n in counts.items()]
    schema = StructType([
        StructField("event_id", StringType()),
        StructField("occurred_at", TimestampType()),
        StructField("page_type", StringType()),
        StructField("product_id", StringType()),
    ])
    expected_schema = StructType([
        StructField("window_start", TimestampType()),
        StructField("window_end", TimestampType()),
        StructField("product_id", StringType()),
        StructField("views", LongType()),
    ])
    gold = to_gold_page_views_per_product_minute(spark.createDataFrame(views, schema), watermark="10 minutes")
    assertDataFrameEqual(gold, spark.createDataFrame(expected, expected_schema))
    assert sorted(n for *_, n in expected) == [1, 1, 1, 2]
