"""The shop-event generator: determinism, fault shares, and faults that are really faulty."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from schemas import reasons
from streaming.generator import Mix, ShopGenerator, generate

START = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
SENT_AT = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
EVENTS_PER_SECOND = 10.0
FAULTY = Mix(duplicate=0.1, malformed=0.1, late=0.05, out_of_order=0.05)
COUNT = 3000

ORDERS = "shop.orders.v1"
PAGE_VIEWS = "shop.page_views.v1"

# What silver must say about each corruption, written out by hand from the reason codes' meaning.
EXPECTED_REASON = {
    "truncated_json": "malformed_json",
    "invalid_utf8": "invalid_encoding",
    "missing_field": "missing_field",
    "bad_timestamp": "bad_timestamp",
    "wrong_total": "contract_violation",
    "product_page_without_product": "contract_violation",
}


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant as producers write it (…Z), parsed without the generator's help."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lines_total(event: dict) -> int:
    return sum(line["quantity"] * line["unit_price_cents"] for line in event["lines"])


@pytest.fixture(scope="module")
def faulty_records():
    return generate(COUNT, seed=11, start=START, events_per_second=EVENTS_PER_SECOND, mix=FAULTY)


def test_same_seed_and_start_give_identical_records():
    """Two generators with the same seed and start yield the same records and the same bytes."""
    first = generate(500, seed=3, start=START, mix=FAULTY)
    second = generate(500, seed=3, start=START, mix=FAULTY)
    assert [r.kind for r in first] == [r.kind for r in second]
    assert [r.event for r in first] == [r.event for r in second]
    assert [(r.topic, r.key, r.corruption, r.late, r.out_of_order) for r in first] == [
        (r.topic, r.key, r.corruption, r.late, r.out_of_order) for r in second
    ]
    assert [r.encode(SENT_AT) for r in first] == [r.encode(SENT_AT) for r in second]
    assert len({r.event["event_id"] for r in first}) > 1


def test_different_seed_gives_different_event_ids():
    """Another seed draws other event ids (no id in common over a few hundred records)."""
    ids_a = {r.event["event_id"] for r in generate(300, seed=1, start=START)}
    ids_b = {r.event["event_id"] for r in generate(300, seed=2, start=START)}
    assert ids_a and ids_b
    assert ids_a.isdisjoint(ids_b)


def test_default_seed_with_another_start_shares_no_event_or_order_id():
    """Two runs with the default seed but different starts (two `lakehouse produce` runs) repeat no id."""
    first = [r.event for r in generate(2000, start=START) if r.event]
    second = [r.event for r in generate(2000, start=START + timedelta(microseconds=1)) if r.event]
    for field in ("event_id", "order_id"):
        ids_a = {e[field] for e in first if field in e}
        ids_b = {e[field] for e in second if field in e}
        assert len(ids_a) > 100 and len(ids_b) > 100, field
        assert ids_a.isdisjoint(ids_b), field


def test_order_ids_are_unique_within_a_run(faulty_records):
    """Each valid order has its own order id (duplicates re-send the same event, so the same id)."""
    orders = [r.event["order_id"] for r in faulty_records if r.kind == "valid" and r.topic == ORDERS]
    assert len(orders) > 100 and len(set(orders)) == len(orders)


def test_observed_shares_match_the_mix(faulty_records):
    """Malformed, duplicate, late and out-of-order shares are close to the Mix asked for."""
    kinds = Counter(r.kind for r in faulty_records)
    assert sum(kinds.values()) == COUNT
    assert kinds["malformed"] / COUNT == pytest.approx(0.10, abs=0.025)
    assert kinds["duplicate"] / COUNT == pytest.approx(0.10, abs=0.025)
    valid = [r for r in faulty_records if r.kind == "valid"]
    assert len(valid) / COUNT == pytest.approx(0.80, abs=0.03)
    late = sum(r.late for r in valid)
    out_of_order = sum(r.out_of_order for r in valid)
    assert late / len(valid) == pytest.approx(0.05, abs=0.02)
    assert out_of_order / len(valid) == pytest.approx(0.05, abs=0.02)
    assert not any(r.late and r.out_of_order for r in faulty_records)
    assert not any(r.late or r.out_of_order for r in faulty_records if r.kind != "valid")


def test_no_faults_with_an_all_zero_mix():
    """With every share at 0 the generator emits only valid, on-time events."""
    records = generate(400, seed=5, start=START, mix=Mix(0.0, 0.0, 0.0, 0.0))
    assert {r.kind for r in records} == {"valid"}
    assert not any(r.late or r.out_of_order for r in records)


def test_duplicates_repeat_an_earlier_valid_event_on_same_topic_and_key(faulty_records):
    """Every duplicate re-sends the payload of an earlier valid record with the same topic and key."""
    seen: dict[str, tuple[str, bytes, dict]] = {}
    duplicates = 0
    for record in faulty_records:
        if record.kind == "valid":
            seen[record.event["event_id"]] = (record.topic, record.key, record.event)
        elif record.kind == "duplicate":
            duplicates += 1
            event_id = record.event["event_id"]
            assert event_id in seen, f"duplicate #{record.index} repeats no earlier valid event"
            topic, key, event = seen[event_id]
            assert (record.topic, record.key, record.event) == (topic, key, event)
    assert duplicates > 0


def test_malformed_records_are_broken_the_way_they_claim(faulty_records):
    """Each malformed record names a known reason and its bytes really carry that corruption."""
    malformed = [r for r in faulty_records if r.kind == "malformed"]
    assert {r.corruption for r in malformed} == set(EXPECTED_REASON)
    for record in malformed:
        assert record.expected_reason in reasons.ALL
        assert record.expected_reason == EXPECTED_REASON[record.corruption]
        raw = record.encode(SENT_AT)
        if record.corruption == "invalid_utf8":
            with pytest.raises(UnicodeDecodeError):
                raw.decode("utf-8")
            continue
        text = raw.decode("utf-8")
        if record.corruption == "truncated_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
            continue
        payload = json.loads(text)
        if record.corruption == "missing_field":
            assert "customer_id" not in payload
        elif record.corruption == "bad_timestamp":
            with pytest.raises(ValueError):
                parse_instant(payload["occurred_at"])
        elif record.corruption == "wrong_total":
            assert record.topic == ORDERS
            assert payload["total_cents"] != lines_total(payload)
        elif record.corruption == "product_page_without_product":
            assert record.topic == PAGE_VIEWS
            assert payload["page_type"] == "product"
            assert payload["product_id"] is None


def test_valid_records_encode_to_well_formed_json(faulty_records):
    """Valid and duplicate records encode to UTF-8 JSON with every field plus sent_at."""
    for record in faulty_records:
        if record.kind == "malformed":
            continue
        payload = json.loads(record.encode(SENT_AT).decode("utf-8"))
        assert payload == {**record.event, "sent_at": "2026-05-01T12:00:00.000Z"}
        parse_instant(payload["occurred_at"])


def test_valid_order_totals_equal_their_lines(faulty_records):
    """A valid order's total_cents is the sum of quantity * unit_price over its lines."""
    orders = [r for r in faulty_records if r.kind == "valid" and r.topic == ORDERS]
    assert orders
    for record in orders:
        assert record.event["lines"]
        assert all(line["quantity"] > 0 and line["unit_price_cents"] >= 0 for line in record.event["lines"])
        assert record.event["total_cents"] == lines_total(record.event)


def test_keys_are_the_customer_id(faulty_records):
    """The Kafka key of every record is its event's customer_id."""
    for record in faulty_records:
        assert record.key == record.event["customer_id"].encode()


def test_event_time_follows_the_clock_with_late_and_out_of_order_offsets(faulty_records):
    """On-time events carry the clock; late ones are 15-40 min behind it, out-of-order ones up to 45 s."""
    slack = 0.002  # instants are written with milliseconds
    late = out_of_order = 0
    for record in faulty_records:
        if record.kind != "valid":
            continue
        clock = START + timedelta(seconds=record.index / EVENTS_PER_SECOND)
        behind = (clock - parse_instant(record.event["occurred_at"])).total_seconds()
        if record.late:
            late += 1
            assert 15 * 60 - slack <= behind <= 40 * 60 + slack, (record.index, behind)
        elif record.out_of_order:
            out_of_order += 1
            assert 0 < behind <= 45 + slack, (record.index, behind)
        else:
            assert abs(behind) <= slack, (record.index, behind)
    assert late > 0 and out_of_order > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duplicate": -0.1},
        {"malformed": 2.0},
        {"late": 1.01},
        {"out_of_order": -1.0},
        {"duplicate": 0.6, "malformed": 0.6},
    ],
)
def test_mix_rejects_shares_outside_zero_to_one(kwargs):
    """Mix raises ValueError for a share below 0, above 1, or duplicate+malformed above 1."""
    with pytest.raises(ValueError):
        Mix(**kwargs)


def test_mix_accepts_the_bounds():
    """Shares of exactly 0 and 1 are allowed."""
    assert Mix(out_of_order=1.0, late=0.0, duplicate=0.0, malformed=1.0).malformed == 1.0
    assert Mix(out_of_order=0.0, late=1.0, duplicate=1.0, malformed=0.0).duplicate == 1.0


def test_generator_rejects_a_non_positive_event_rate():
    """events_per_second must be positive."""
    with pytest.raises(ValueError):
        ShopGenerator(events_per_second=0, start=START)
