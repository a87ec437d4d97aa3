"""The worst records a producer can send, through the real broker and the real flows: nothing stops, nothing vanishes.

Each test here failed on the foundation's code: an overflowing order stopped silver for good, an old
event vanished as a "duplicate", a far-future time moved the watermark to 9999 and broke delta-rs,
and wrongly typed or trailing-garbage values were accepted as valid.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Producer

from lakehouse.schemas import tables, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import Mix, generate, iso
from lakehouse.streaming.kafka_topics import admin_client, ensure_topics
from lakehouse.streaming.runner import run_flow
from tests.integration.other_engines import read_with_delta_rs_and_duckdb
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def kafka(broker):
    """The module's broker with the shop topics deleted and created anew: each test reads only its own records."""
    admin = admin_client(broker.kafka_bootstrap)
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t.name for t in topics.ALL if t.name in existing]
    if doomed:
        for future in admin.delete_topics(doomed).values():
            future.result()
    deadline = time.monotonic() + 60
    while True:
        try:
            ensure_topics(broker.kafka_bootstrap, topics.ALL)
            break
        except Exception:  # noqa: BLE001 - deletion is asynchronous: the name stays taken for a moment
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return broker


def send(bootstrap: str, topic: str, values: list[bytes | None]) -> list[tuple[str, int, int]]:
    """Send raw values (keyed c-<n>) and return each one's (topic, partition, offset), in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "log_level": 0})
    coords: dict[int, tuple[str, int, int]] = {}

    def delivered(i: int):
        def callback(err, msg):
            assert err is None, err
            coords[i] = (msg.topic(), msg.partition(), msg.offset())
        return callback

    for i, value in enumerate(values):
        producer.produce(topic, key=f"c-{i % 7:05d}".encode(), value=value, on_delivery=delivered(i))
    assert producer.flush(30) == 0
    return [coords[i] for i in range(len(values))]


def order(event_id: str, occurred: datetime, *, lines=None, total=None, **extra) -> dict:
    lines = lines if lines is not None else [{"product_id": "p-0001", "quantity": 2, "unit_price_cents": 150}]
    payload = {
        "event_id": event_id, "occurred_at": iso(occurred), "sent_at": iso(occurred), "order_id": f"o-{event_id}",
        "customer_id": "c-00001", "currency": "EUR", "lines": lines,
        "total_cents": total if total is not None else sum(li["quantity"] * li["unit_price_cents"] for li in lines),
    }
    return {**payload, **extra}


def page_view(event_id: str, occurred: datetime, **extra) -> dict:
    payload = {
        "event_id": event_id, "occurred_at": iso(occurred), "sent_at": iso(occurred), "customer_id": "c-00001",
        "session_id": "s-1", "page_type": "product", "product_id": "p-0001", "url": "/p/p-0001", "referrer": "ad",
    }
    return {**payload, **extra}


def encode(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def run(spark, ctx: FlowContext, *names: str) -> dict:
    return {name: run_flow(spark, BY_NAME[name], ctx) for name in names}


def rows(spark, ctx, spec, *columns):
    return spark.read.format("delta").load(spec.path(ctx.lake_root)).select(*columns).collect()


def quarantine_by_coords(spark, ctx) -> dict[tuple[str, int, int], tuple[str, str | None]]:
    return {(r.topic, r.partition, r.offset): (r.reason, r.detail)
            for r in rows(spark, ctx, tables.QUARANTINE, "topic", "partition", "offset", "reason", "detail")}


def test_an_overflowing_order_is_quarantined_and_later_orders_keep_flowing(spark, kafka, tmp_path):
    """Finding 1: quantity x price beyond a long goes to quarantine; orders before and after reach silver and gold."""
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=kafka.kafka_bootstrap)
    before = [order(f"before-{i}", START + timedelta(seconds=i)) for i in range(5)]
    poison = {"event_id": "x", "occurred_at": "2026-11-22T10:00:00Z", "sent_at": "2026-11-22T10:00:00Z",
              "order_id": "o", "customer_id": "c", "currency": "EUR",
              "lines": [{"product_id": "p", "quantity": 2, "unit_price_cents": 4611686018427387904}], "total_cents": -4}
    after = [order(f"after-{i}", START + timedelta(seconds=30 + i)) for i in range(5)]
    coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in before + [poison] + after])
    run(spark, ctx, "bronze_orders", "silver_orders", "gold_revenue_per_minute")

    assert quarantine_by_coords(spark, ctx) == {coords[5]: ("contract_violation", "amounts_in_range")}
    assert {r.event_id for r in rows(spark, ctx, shop.ORDERS.silver_table, "event_id")} == \
        {p["event_id"] for p in before + after}
    # A later run with more orders still goes through every layer.
    later = [order(f"later-{i}", START + timedelta(seconds=60 + i)) for i in range(3)]
    send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(p) for p in later])
    run(spark, ctx, "bronze_orders", "silver_orders", "gold_revenue_per_minute")
    gold = rows(spark, ctx, shop.GOLD_REVENUE_PER_MINUTE, "orders", "revenue_cents")
    assert sum(r.orders for r in gold) == len(before + after + later)
    assert sum(r.revenue_cents for r in gold) == sum(p["total_cents"] for p in before + after + later)


def test_an_event_far_behind_the_others_is_a_late_arrival_not_a_duplicate(spark, kafka, tmp_path):
    """Finding 2: a valid event older than the dedup watermark lands in late_arrivals with its lateness and coordinates."""
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=kafka.kafka_bootstrap)
    send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [encode(order(f"n-{i}", START + timedelta(minutes=i))) for i in range(10)])
    run(spark, ctx, "bronze_orders", "silver_orders")
    newest = START + timedelta(minutes=9)

    old = START - timedelta(days=2)
    late_coords, floor_coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, [
        encode(order("two-days-old", old)),
        encode(order("epoch", datetime(1970, 1, 1, tzinfo=timezone.utc))),
    ])
    second = run(spark, ctx, "bronze_orders", "silver_orders")["silver_orders"].silver
    assert (second.late, second.duplicates, second.quarantined, second.silver) == (1, 0, 1, 0)

    [late] = rows(spark, ctx, tables.LATE_ARRIVALS, "*")
    assert (late.topic, late.partition, late.offset) == late_coords
    assert (late.flow, late.table, late.event_id) == ("silver_orders", "silver_orders", "two-days-old")
    watermark = newest - timedelta(hours=1)     # the newest event silver holds, minus the 1-hour dedup delay
    assert late.watermark.replace(tzinfo=timezone.utc) == watermark
    assert late.event_time.replace(tzinfo=timezone.utc) == old
    assert late.lateness_ms == (watermark - old) // timedelta(milliseconds=1)
    assert quarantine_by_coords(spark, ctx) == {floor_coords: ("implausible_event_time", "occurred_at")}


def test_a_far_future_event_is_quarantined_and_cannot_move_the_watermark(spark, kafka, tmp_path):
    """Finding 3: an event in year 9999 is quarantined; later normal events still reach silver; delta-rs reads every table."""
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=kafka.kafka_bootstrap)
    first = [page_view(f"a-{i}", START + timedelta(seconds=i)) for i in range(5)]
    future = page_view("future", datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc))
    coords = send(kafka.kafka_bootstrap, shop.PAGE_VIEWS.topic_spec.name, [encode(p) for p in first + [future]])
    run(spark, ctx, "bronze_page_views", "silver_page_views", "gold_page_views_per_product_minute")
    later = [page_view(f"b-{i}", START + timedelta(minutes=1, seconds=i)) for i in range(5)]
    send(kafka.kafka_bootstrap, shop.PAGE_VIEWS.topic_spec.name, [encode(p) for p in later])
    second = run(spark, ctx, "bronze_page_views", "silver_page_views", "gold_page_views_per_product_minute")

    assert quarantine_by_coords(spark, ctx) == {coords[5]: ("implausible_event_time", "occurred_at")}
    assert second["silver_page_views"].silver.late == 0
    assert {r.event_id for r in rows(spark, ctx, shop.PAGE_VIEWS.silver_table, "event_id")} == \
        {p["event_id"] for p in first + later}
    specs = (shop.PAGE_VIEWS.silver_table, tables.QUARANTINE, shop.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE)
    elsewhere = read_with_delta_rs_and_duckdb([spec.path(ctx.lake_root) for spec in specs])
    for spec in specs:
        assert elsewhere[spec.path(ctx.lake_root)]["rows"] == len(rows(spark, ctx, spec, "*"))
    newest = elsewhere[shop.PAGE_VIEWS.silver_table.path(ctx.lake_root)]["timestamps"]["occurred_at"][1]
    assert datetime.fromisoformat(newest).astimezone(timezone.utc) == START + timedelta(minutes=1, seconds=4)


def test_wrong_types_and_trailing_bytes_are_quarantined_with_their_own_reasons(spark, kafka, tmp_path):
    """Finding 4: numbers or objects for strings, bytes after the document and two documents are not valid events."""
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=kafka.kafka_bootstrap)
    good = order("good", START)
    values = [
        encode(good),
        encode(order("num", START, customer_id=12345)),
        encode(order("obj", START, customer_id={"id": "c-1"})),
        encode(order("garbage", START)) + b"garbage",
        encode(order("two", START)) + encode(order("docs", START)),
        encode(order("extra", START, coupon="SPRING")),           # an unknown field is allowed, and left out
    ]
    coords = send(kafka.kafka_bootstrap, shop.ORDERS.topic_spec.name, values)
    run(spark, ctx, "bronze_orders", "silver_orders")
    assert quarantine_by_coords(spark, ctx) == {
        coords[1]: ("wrong_type", "customer_id"),
        coords[2]: ("wrong_type", "customer_id"),
        coords[3]: ("trailing_data", None),
        coords[4]: ("trailing_data", None),
    }
    silver = spark.read.format("delta").load(shop.ORDERS.silver_table.path(ctx.lake_root))
    assert {r.event_id for r in silver.select("event_id").collect()} == {"good", "extra"}
    assert "coupon" not in silver.columns


# ---------------------------------------------------------------- property: random bad payloads

STRING_FIELDS = {
    shop.ORDERS.topic_spec.name: ("event_id", "order_id", "customer_id", "currency"),
    shop.PAGE_VIEWS.topic_spec.name: ("event_id", "customer_id", "session_id", "page_type", "url"),
}
REQUIRED = {schema.name: schema.required for schema in (shop.ORDERS.topic_spec.schema, shop.PAGE_VIEWS.topic_spec.schema)}
NOT_A_STRING = (12345, -1.5, True, {"id": "x"}, ["a"], 10**40)


def mutate(rng: random.Random, topic: str, payload: dict) -> tuple[bytes | None, str]:
    """A broken version of a valid payload, and the reason silver must give it."""
    kind = rng.randrange(10)
    text = encode(payload)
    if kind == 0:
        return text[: rng.randrange(1, len(text))], "malformed_json"
    if kind == 1:
        return text + rng.choice([b"x", b"}", b"]x{}", b",{}", b" " + text, b"\x00"]), "trailing_data"
    if kind == 2:
        return rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + text, "invalid_encoding"
    if kind == 3:
        gone = rng.choice(REQUIRED[topic])
        return encode({k: v for k, v in payload.items() if k != gone}), "missing_field"
    if kind == 4:
        field = rng.choice(STRING_FIELDS[topic])
        return encode({**payload, field: rng.choice(NOT_A_STRING)}), "wrong_type"
    if kind == 5:
        when = rng.choice(["9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z", "1899-12-31T23:00:00Z", "3000-01-01T00:00:00Z"])
        return encode({**payload, "occurred_at": when}), "implausible_event_time"
    if kind == 6:
        return encode({**payload, "occurred_at": rng.choice(["yesterday", "2026-13-45T99:00:00Z", "", "0"])}), "bad_timestamp"
    if kind == 7:
        return rng.choice([None, b""]), "empty_value"
    if kind == 8:
        depth = rng.choice([5, 200, 5000])
        nested = encode({**payload, "customer_id": None}).replace(b"null", b"[" * depth + b"]" * depth, 1)
        # Deeper than the JSON parser's limit (1000 levels) is not a document it accepts.
        return nested, "wrong_type" if depth < 1000 else "malformed_json"
    if topic == shop.ORDERS.topic_spec.name:
        big = rng.choice([2**31, 2**40, 2**63, 10**30])
        line = {"product_id": "p", "quantity": big, "unit_price_cents": 1}
        return encode({**payload, "lines": [line], "total_cents": 1}), "out_of_range"
    return encode({**payload, "page_type": rng.choice(["landing", "PRODUCT", ""])}), "contract_violation"


def test_random_bad_payloads_never_stop_the_flows_and_every_record_is_accounted_for(spark, kafka, tmp_path):
    """A few hundred random broken and type-confused payloads among valid ones, over several micro-batches:
    no query fails, each record is in exactly one of silver, quarantine (with the reason it was built to
    get), late arrivals or the true duplicates, and every table reads back in delta-rs and DuckDB."""
    rng = random.Random(2026)
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=kafka.kafka_bootstrap,
                      max_offsets_per_trigger=60, max_files_per_trigger=2)
    sent: dict[tuple[str, int, int], tuple[str, str | None]] = {}   # coords -> (kind, expected reason or event id)
    planned = []
    for topic, make in ((shop.ORDERS.topic_spec.name, order), (shop.PAGE_VIEWS.topic_spec.name, page_view)):
        values, meaning, valid_values = [], [], []
        for i in range(200):
            # Event time moves forward; one in 25 valid events is 2-3 hours behind (late for a 1-hour dedup watermark).
            when = START + timedelta(seconds=20 * i)
            payload = make(f"{topic}-{i}", when)
            roll = rng.random()
            if roll < 0.45:
                value, reason = mutate(rng, topic, payload)
                values.append(value)
                meaning.append(("bad", reason))
            elif roll < 0.5 and valid_values:
                values.append(rng.choice(valid_values[-10:]))     # a producer's retry of a recent event
                meaning.append(("copy", None))
            else:
                if rng.random() < 0.04:
                    payload = make(f"{topic}-{i}", when - timedelta(hours=rng.uniform(2, 3)))
                values.append(encode(payload))
                valid_values.append(values[-1])
                meaning.append(("valid", payload["event_id"]))
        planned.append((topic, values, meaning))
    # In two halves: a watermark moves only between the commits a flow reads (a new flow's first read of
    # its source counts as one), so the second half's late events are behind the first half's.
    for part in (slice(0, 100), slice(100, None)):
        for topic, values, meaning in planned:
            for coords, m in zip(send(kafka.kafka_bootstrap, topic, values[part]), meaning[part]):
                sent[coords] = m
        results = run(spark, ctx, "bronze_orders", "bronze_page_views", "silver_orders", "silver_page_views",
                      "gold_revenue_per_minute", "gold_page_views_per_product_minute")
        assert results["silver_orders"].batches > 1      # the caps split each run into micro-batches

    silver = {}
    for spec in (shop.ORDERS.silver_table, shop.PAGE_VIEWS.silver_table):
        for r in rows(spark, ctx, spec, "topic", "partition", "offset", "event_id", "occurred_at"):
            silver[(r.topic, r.partition, r.offset)] = r
    quarantine = quarantine_by_coords(spark, ctx)
    # Silver's own late arrivals (gold flows list theirs in the same table, under their own flow names).
    late = {(r.topic, r.partition, r.offset): r for r in rows(spark, ctx, tables.LATE_ARRIVALS, "*")
            if r.flow.startswith("silver_")}
    bronze = {(r.topic, r.partition, r.offset) for spec in (shop.ORDERS.bronze_table, shop.PAGE_VIEWS.bronze_table)
              for r in rows(spark, ctx, spec, "topic", "partition", "offset")}
    assert bronze == set(sent)
    assert not (set(silver) & set(quarantine)) and not (set(silver) & set(late)) and not (set(quarantine) & set(late))

    # Quarantine holds exactly the broken records, each with the reason it was built to get.
    assert {c: reason for c, (reason, _) in quarantine.items()} == \
        {c: m[1] for c, m in sent.items() if m[0] == "bad"}
    # Every valid event is in silver or late arrivals; what is left over are true duplicates of silver rows.
    silver_ids = Counter(r.event_id for r in silver.values())
    assert max(silver_ids.values()) == 1
    late_ids = {r.event_id for r in late.values()}
    valid_ids = {m[1] for m in sent.values() if m[0] == "valid"}
    assert valid_ids <= set(silver_ids) | late_ids
    leftover = bronze - set(silver) - set(quarantine) - set(late)
    assert all(sent[c][0] in ("copy", "valid") for c in leftover)
    assert sum(1 for m in sent.values() if m[0] == "valid") > 150
    # A late arrival is behind the watermark of its batch by exactly its lateness.
    assert late, "the log was built so that some valid events arrive behind the watermark"
    newest = max(r.occurred_at for r in silver.values())
    for r in late.values():
        assert r.lateness_ms > 0
        assert (r.watermark - r.event_time) // timedelta(milliseconds=1) == r.lateness_ms
        assert r.watermark <= newest - timedelta(hours=1)
    # Other engines read every timestamp that reached the lake.
    specs = (shop.ORDERS.silver_table, shop.PAGE_VIEWS.silver_table, tables.QUARANTINE, tables.LATE_ARRIVALS,
             shop.GOLD_REVENUE_PER_MINUTE, shop.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE)
    elsewhere = read_with_delta_rs_and_duckdb([spec.path(ctx.lake_root) for spec in specs])
    for spec in specs:
        read = elsewhere[spec.path(ctx.lake_root)]
        assert read["rows"] == len(rows(spark, ctx, spec, "*"))
        assert read["timestamps"], f"{spec.name} has timestamp columns"
        for low, high in read["timestamps"].values():
            assert low is None or datetime.fromisoformat(low).year >= 2000
            assert high is None or datetime.fromisoformat(high).year <= 2100
