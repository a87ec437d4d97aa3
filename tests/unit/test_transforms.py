"""Bronze, silver, quarantine and gold transforms on static frames shaped like Spark's Kafka source."""

from __future__ import annotations

import json
import random
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

from lakehouse.streaming.transforms.bronze import to_bronze
from lakehouse.pipelines.shop.gold import GOLD_BY_NAME
from lakehouse.pipelines.shop.transforms import to_product_page_views
from lakehouse.streaming.transforms.sequences import merge_sessions, sliding_count
from lakehouse.streaming.transforms.windows import windowed_rows
from lakehouse.pipelines.shop import ORDERS, PAGE_VIEWS
from lakehouse.streaming.transforms.silver import parse_events, to_quarantine, to_silver
from lakehouse.pipelines import shop

ORDERS_V1, PAGE_VIEWS_V1 = ORDERS.schema, PAGE_VIEWS.schema


def to_revenue_per_minute(orders):
    return windowed_rows(GOLD_BY_NAME["gold_revenue_per_minute"], orders, {})


def to_page_views_per_product_minute(views):
    return windowed_rows(GOLD_BY_NAME["gold_page_views_per_product_minute"], views, {})


def to_revenue_hopping(orders, *, size, slide):
    return windowed_rows(GOLD_BY_NAME["gold_revenue_hopping"], orders,
                         {"hopping_window_size": size, "hopping_window_slide": slide})


def parse_orders(bronze, **bounds):
    return parse_events(bronze, schema=ORDERS_V1, **bounds)


def parse_page_views(bronze, **bounds):
    return parse_events(bronze, schema=PAGE_VIEWS_V1, **bounds)


def to_silver_orders(parsed):
    return to_silver(parsed, schema=ORDERS_V1)


def to_silver_page_views(parsed):
    return to_silver(parsed, schema=PAGE_VIEWS_V1)

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


def line(product: str, quantity: object, unit_price_cents: object) -> dict:
    return {"product_id": product, "quantity": quantity, "unit_price_cents": unit_price_cents}


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


# ---------------------------------------------------------------- parsing and quarantine

PLAUSIBLE = {"event_time_floor": "2000-01-01T00:00:00Z", "max_event_time_ahead": "1 day"}


def parsed(spark, topic: str, values: list[bytes | None], partition: int = 0):
    parse = parse_orders if topic == ORDERS else parse_page_views
    return parse(to_bronze(kafka_frame(spark, topic, values, partition)), **PLAUSIBLE)


def quarantined(spark, topic: str, values: list[bytes | None], partition: int = 0):
    schema = ORDERS_V1 if topic == ORDERS else PAGE_VIEWS_V1
    return to_quarantine(parsed(spark, topic, values, partition), schema=schema)


def with_(payload: dict, **changes) -> dict:
    return {**payload, **changes}


def test_quarantine_orders_gives_the_expected_reason_per_record(spark):
    """Each crafted bad order (the drill's poison pills included) gets its own reason and detail; valid ones pass."""
    good = order("e-0")
    overflow = order("e-12", lines=[("p", 2, 4611686018427387904)], total=-4)
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
        encode(overflow),                                                         # 12 quantity x price overflows
        encode(with_(order("e-13"), customer_id=12345)),                          # 13 number for a string
        encode(with_(order("e-14"), customer_id={"id": "c-1"})),                  # 14 object for a string
        encode(order("e-15")) + b"garbage",                                       # 15 trailing bytes
        encode(order("e-16")) + b" " + encode(order("e-16b")),                    # 16 two documents
        encode(order("e-17")) + b"," + encode(order("e-17b")),                    # 17 two documents, a comma
        encode(order("e-18", occurred_at="9999-12-31T23:59:59Z")),                # 18 far future
        encode(order("e-19", occurred_at="1970-01-01T00:00:00.000Z")),            # 19 before the floor
        encode(order("e-20", lines=[("p-0001", 2**40, 1)], total=2**40)),         # 20 quantity beyond int
        encode(with_(order("e-21"), total_cents=2.5)),                            # 21 fraction for an integer
        encode(with_(order("e-22"), lines=[{"product_id": "p", "quantity": "2", "unit_price_cents": 5}])),  # 22
        b"[1,2]",                                                                 # 23 not an object
        None,                                                                     # 24 tombstone
        encode(order("e-25", sent_at="9999-12-31T23:59:59Z")),                    # 25 implausible send time
        encode(with_(order("e-26"), coupon="SPRING")),                            # 26 unknown field: valid
        encode(order("e-27")) + b"]x{}",                                          # 27 bytes after a closing bracket
        encode(with_(order("e-28"), total_cents=10**30)),                         # 28 integer beyond long
        b'{"event_id":"e-29","event_id":"again"}',                                # 29 repeated key
        encode(order("e-30", occurred_at="2026-05-03T10:00:00.000Z")),            # 30 two days ahead of the broker
        # Lines whose merged JSON kind is not exactly the declared one are checked element by element.
        encode(order("e-31", lines=[("p-0001", 1, 5), ("p-0002", 1, 2**70)], total=5)),  # 31 price beyond long
        encode(with_(order("e-32"), lines=[line("p-0001", 1, 5), line("p-0002", 1, 2.5)])),  # 32 a fraction
        encode(with_(order("e-33"), lines=[line("p-0001", 1, 5), 5])),           # 33 a number for a line
        encode(with_(order("e-34"), lines=[line("p-0001", 1, 5), None], total_cents=5)),  # 34 a null line
        encode(order("e-35", lines=[("p-0001", 1, 5), ("p-0002", 2**31, 1)], total=2**31 + 5)),  # 35 beyond int
        encode(with_(order("e-36", lines=[("p-0001", 1, 5)]),
                     lines=[{**line("p-0001", 1, 5), "note": "gift"}])),          # 36 a line's unknown field: valid
    ]
    assert reasons_by_offset(quarantined(spark, ORDERS, values)) == {
        1: ("malformed_json", None),
        2: ("invalid_encoding", None),
        3: ("missing_field", "customer_id"),
        4: ("bad_timestamp", "occurred_at"),
        5: ("contract_violation", "total_matches_lines"),
        6: ("contract_violation", "quantity_positive"),
        7: ("contract_violation", "known_currency"),
        9: ("empty_value", None),
        10: ("contract_violation", "order_has_lines"),
        11: ("contract_violation", "price_not_negative"),
        12: ("contract_violation", "amounts_in_range"),
        13: ("wrong_type", "customer_id"),
        14: ("wrong_type", "customer_id"),
        15: ("trailing_data", None),
        16: ("trailing_data", None),
        17: ("trailing_data", None),
        18: ("implausible_event_time", "occurred_at"),
        19: ("implausible_event_time", "occurred_at"),
        20: ("out_of_range", "lines"),
        21: ("wrong_type", "total_cents"),
        22: ("wrong_type", "lines"),
        23: ("wrong_type", "$"),
        24: ("empty_value", None),
        25: ("implausible_timestamp", "sent_at"),
        27: ("trailing_data", None),
        28: ("out_of_range", "total_cents"),
        29: ("malformed_json", None),
        30: ("implausible_event_time", "occurred_at"),
        31: ("out_of_range", "lines"),
        32: ("wrong_type", "lines"),
        33: ("wrong_type", "lines"),
        34: ("contract_violation", "quantity_positive"),
        35: ("out_of_range", "lines"),
    }


def test_event_time_bounds_are_parameters(spark):
    """The plausibility floor and how far ahead of the broker an event may be are the caller's to set."""
    values = [encode(order("e-0", occurred_at="2026-05-01T12:00:00.000Z")),   # 2 h ahead of the broker
              encode(order("e-1", occurred_at="2020-01-01T00:00:00.000Z"))]
    bronze = to_bronze(kafka_frame(spark, ORDERS, values))
    strict = parse_orders(bronze, event_time_floor="2021-01-01T00:00:00Z", max_event_time_ahead="1 hour")
    assert reasons_by_offset(to_quarantine(strict, schema=ORDERS_V1)) == {
        0: ("implausible_event_time", "occurred_at"),
        1: ("implausible_event_time", "occurred_at"),
    }
    loose = parse_orders(bronze, event_time_floor="2000-01-01T00:00:00Z", max_event_time_ahead="3 hours")
    assert to_quarantine(loose, schema=ORDERS_V1).count() == 0


def test_quarantine_keeps_raw_bytes_and_coordinates(spark):
    """A quarantined record carries its original key, value bytes, headers, coordinates and schema name."""
    bad = b"\xff\xfe" + encode(order("e-1"))
    (row,) = quarantined(spark, ORDERS, [encode(order("e-0")), bad], partition=1).collect()
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
        encode(page_view("v-9", occurred_at="9999-12-31T23:59:59Z")),              # 9 far future
        encode(with_(page_view("v-10"), product_id=7)),                            # 10 number for a string
        encode(page_view("v-11")) + b"{...}garbage",                               # 11 trailing bytes
    ]
    assert reasons_by_offset(quarantined(spark, PAGE_VIEWS, values)) == {
        1: ("contract_violation", "product_page_has_product"),
        3: ("malformed_json", None),
        4: ("missing_field", "customer_id"),
        5: ("bad_timestamp", "occurred_at"),
        6: ("invalid_encoding", None),
        7: ("contract_violation", "known_page_type"),
        9: ("implausible_event_time", "occurred_at"),
        10: ("wrong_type", "product_id"),
        11: ("trailing_data", None),
    }


def test_every_record_is_either_valid_or_has_a_reason(spark):
    """Parsing keeps every input row: silver rows plus quarantined rows equal the input, none in both."""
    values = [encode(order(f"e-{i}")) for i in range(5)] + [b"{", b"", None, b"[]", b"null", b"1e999"]
    frame = parsed(spark, ORDERS, values)
    silver = to_silver(frame, schema=ORDERS_V1).select("offset").collect()
    bad = to_quarantine(frame, schema=ORDERS_V1).select("offset").collect()
    assert sorted([r.offset for r in silver] + [r.offset for r in bad]) == list(range(len(values)))
    assert {r.offset for r in silver} == set(range(5))


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
    """One silver row per payload, computed in plain Python from the JSON."""
    return [
        (p["event_id"], utc(p["occurred_at"]), p["order_id"], p["customer_id"], p["currency"],
         [(li["product_id"], li["quantity"], li["unit_price_cents"]) for li in p["lines"]], p["total_cents"],
         utc(p["occurred_at"]).date(), sum(li["quantity"] for li in p["lines"]))
        for p in payloads
    ]


def test_silver_orders_are_typed_and_counted_in_a_stream(spark, tmp_path):
    """Parsing and to_silver_orders (streaming) type instants, add event_date and item_count, keep lineage."""
    first = order("e-1", occurred_at="2026-05-01T23:59:59.500Z", lines=[("p-0001", 2, 150), ("p-0002", 3, 999)])
    second = order("e-2", occurred_at="2026-05-02T00:00:00.000Z", currency="USD", lines=[("p-0009", 1, 4200)])
    values = [encode(first), encode(order("bad", currency="XXX")), encode(with_(second, coupon="X"))]
    silver = run_stream(spark, tmp_path, kafka_rows(ORDERS, values),
                        lambda bronze: to_silver_orders(parse_orders(bronze, **PLAUSIBLE)))

    types = {f.name: f.dataType for f in silver.schema.fields}
    assert types["occurred_at"] == TimestampType()
    assert types["sent_at"] == TimestampType()
    assert types["event_date"] == DateType()
    assert types["item_count"] == IntegerType()
    assert "coupon" not in types and "reason" not in types   # unknown fields stay out of silver
    for lineage in ("topic", "partition", "offset", "appended_at", "ingested_at"):
        assert lineage in types

    expected = expected_silver_orders([first, second])
    assertDataFrameEqual(silver.select(*SILVER_ORDER_COLUMNS.fieldNames()),
                         spark.createDataFrame(expected, SILVER_ORDER_COLUMNS))
    assert sorted(row[7] for row in expected) == [date(2026, 5, 1), date(2026, 5, 2)]
    assert {r["event_id"]: r["offset"] for r in silver.collect()} == {"e-1": 0, "e-2": 2}


def test_silver_orders_on_a_static_frame(spark):
    """Parsing and to_silver_orders also work on a static (batch) frame."""
    first = order("e-1", lines=[("p-0001", 2, 150), ("p-0002", 3, 999)])
    second = order("e-2", currency="USD", lines=[("p-0009", 1, 4200)])
    silver = to_silver_orders(parsed(spark, ORDERS, [encode(first), encode(second)]))
    try:
        silver.collect()
    except AnalysisException as exc:
        pytest.fail(f"to_silver_orders cannot run on a batch frame: {str(exc).splitlines()[0]}")
    expected = expected_silver_orders([first, second])
    assertDataFrameEqual(silver.select(*SILVER_ORDER_COLUMNS.fieldNames()),
                         spark.createDataFrame(expected, SILVER_ORDER_COLUMNS))


def test_silver_page_views_keep_valid_events_only(spark, tmp_path):
    """Parsing and to_silver_page_views (streaming) keep the valid page views and none of the quarantined ones."""
    values = [
        encode(page_view("v-1")),
        encode(page_view("v-2", page_type="home", product=None)),
        encode(page_view("v-3", product=None)),
        b"{",
    ]
    silver = run_stream(spark, tmp_path, kafka_rows(PAGE_VIEWS, values),
                        lambda bronze: to_silver_page_views(parse_page_views(bronze, **PLAUSIBLE)))
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
    gold = to_revenue_per_minute(spark.createDataFrame(orders, SILVER_ORDERS_SCHEMA))
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
    gold = to_page_views_per_product_minute(to_product_page_views(spark.createDataFrame(views, schema)))
    assertDataFrameEqual(gold, spark.createDataFrame(expected, expected_schema))
    assert sorted(n for *_, n in expected) == [1, 1, 1, 2]


def test_hopping_revenue_counts_each_order_in_every_window_that_covers_it(spark):
    """15-minute windows every minute: each window's revenue equals a plain-Python sum over the orders inside it."""
    rng = random.Random(5)
    base = utc("2026-05-01T10:00:00.000Z").replace(tzinfo=None)  # as Spark returns them (session time zone UTC)
    orders = [(f"e-{i}", base + timedelta(seconds=rng.uniform(0, 1800)), rng.choice(["EUR", "USD"]),
               rng.randrange(100, 5000), 1) for i in range(60)]
    got = {(r.window_start, r.currency): (r.revenue_cents, r.orders) for r in to_revenue_hopping(
        spark.createDataFrame(orders, SILVER_ORDERS_SCHEMA), size="15 minutes", slide="1 minute").collect()}
    expected: dict[tuple[datetime, str], list[int]] = defaultdict(lambda: [0, 0])
    for _, ts, currency, total, _ in orders:
        first = minute_of(ts) - timedelta(minutes=14)
        for k in range(15):
            acc = expected[(first + timedelta(minutes=k), currency)]
            acc[0] += total
            acc[1] += 1
    assert got == {key: tuple(v) for key, v in expected.items()}


def test_the_sliding_count_is_per_event_over_the_look_back_before_each_order(spark):
    """Each order's count equals, in plain Python, the customer's orders in [t - 30 min, t); flagged at the threshold."""
    rng = random.Random(9)
    base = utc("2026-05-01T10:00:00.000Z").replace(tzinfo=None)
    orders = [(f"o-{i}", rng.choice(["c-1", "c-2", "c-3"]), base + timedelta(seconds=rng.randrange(0, 7200, 30)))
              for i in range(80)]
    df = spark.createDataFrame(orders, "order_id string, customer_id string, ordered_at timestamp")
    got = {r.order_id: (r.orders_before, r.flagged)
           for r in sliding_count(df, by=["customer_id"], time="ordered_at", window_micros=30 * 60 * 10**6,
                                 count="orders_before", flag="flagged", threshold=4).collect()}
    expected = {}
    for oid, customer, t in orders:
        n = sum(1 for _, c, u in orders if c == customer and t - timedelta(minutes=30) <= u < t)
        expected[oid] = (n, n >= 4)
    assert got == expected
    assert any(flag for _, flag in expected.values()) and not all(flag for _, flag in expected.values())


def test_sessions_merge_activity_with_gaps_under_the_gap_whatever_order_it_comes_in(spark):
    """Sessions equal a plain-Python sweep; merging sessions already built with new events gives the same sessions."""
    rng = random.Random(3)
    base = utc("2026-05-01T10:00:00.000Z").replace(tzinfo=None)
    events = [(rng.choice(["c-1", "c-2"]), base + timedelta(minutes=rng.randrange(0, 300)), rng.random() < 0.2)
              for _ in range(70)]
    expected = []
    for customer in ("c-1", "c-2"):
        current = None
        for _, t, is_order in sorted(e for e in events if e[0] == customer):
            if current and t - current[1] < timedelta(minutes=30):
                current[1] = t
                current[2 + is_order] += 1
            else:
                current = [t, t, int(not is_order), int(is_order)]
                expected.append((customer, current))
    expected = {(c, s[0]): (s[1], s[2], s[3]) for c, s in expected}
    schema = "customer_id string, session_start timestamp, session_end timestamp, page_views long, orders long"
    rows = [(c, t, t, int(not o), int(o)) for c, t, o in events]
    gap = 30 * 60 * 10**6
    COUNTS = ["page_views", "orders"]

    def sessions(df):
        return {(r.customer_id, r.session_start): (r.session_end, r.page_views, r.orders)
                for r in merge_sessions(df, by=["customer_id"], gap_micros=gap, counts=COUNTS).collect()}

    assert sessions(spark.createDataFrame(rows, schema)) == expected
    # In two parts: the sessions of the first half, merged with the events of the second.
    first = merge_sessions(spark.createDataFrame(rows[::2], schema), by=["customer_id"], gap_micros=gap, counts=COUNTS)
    assert sessions(first.unionByName(spark.createDataFrame(rows[1::2], schema))) == expected
    assert len(expected) > 4
