"""The shop-event generator: determinism, fault shares, faults that are really faulty, dimensions and payments.

References are computed here in plain Python from the records produced, never with the generator's helpers.
"""

from __future__ import annotations

import json
import bisect
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import pytest

from lakehouse.schemas import reasons
from lakehouse.pipelines.shop.generator import Mix, ShopGenerator, generate

START = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
SENT_AT = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
EVENTS_PER_SECOND = 10.0
FAULTY = Mix(duplicate=0.1, malformed=0.1, late=0.05, out_of_order=0.05)
COUNT = 3000

ORDERS = "shop.orders.v1"
PAGE_VIEWS = "shop.page_views.v1"
PAYMENTS = "shop.payments.v1"
PRODUCTS = "shop.products.v1"
CUSTOMERS = "shop.customers.v1"
KEY_FIELD = {ORDERS: "customer_id", PAGE_VIEWS: "customer_id", PAYMENTS: "customer_id",
             PRODUCTS: "product_id", CUSTOMERS: "customer_id"}
SEEDED = 50 + 200   # default products + customers: one seed version each, first in the run

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


def is_tick(record) -> bool:
    """A record of the clock's own tick: a page view or an order, or a duplicate drawn in its place."""
    return record.topic in (PAGE_VIEWS, ORDERS) or record.kind == "duplicate"


def with_ticks(records, events_per_second: float = EVENTS_PER_SECOND):
    """(record, clock of the tick it belongs to): one tick per tick record; others take the next tick's clock."""
    out, tick = [], 0
    for record in records:
        out.append((record, START + timedelta(seconds=tick / events_per_second)))
        tick += is_tick(record)
    return out


@pytest.fixture(scope="module")
def faulty_records():
    return generate(COUNT, seed=11, start=START, events_per_second=EVENTS_PER_SECOND, mix=FAULTY)


def test_same_seed_and_start_give_identical_records():
    """Two generators with the same seed and start yield the same records and the same bytes."""
    kwargs = dict(seed=3, start=START, mix=FAULTY, events_per_second=1.0, dimension_changes=0.05)
    first = generate(1500, **kwargs)
    second = generate(1500, **kwargs)
    assert {r.topic for r in first} == {ORDERS, PAGE_VIEWS, PAYMENTS, PRODUCTS, CUSTOMERS}
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
    """Malformed, duplicate, late and out-of-order shares of the clock's ticks are close to the Mix asked for."""
    ticks = [r for r in faulty_records if is_tick(r)]
    kinds = Counter(r.kind for r in ticks)
    assert len(ticks) > (COUNT - SEEDED) * 0.9   # the rest: seeds, payments and dimension changes
    assert kinds["malformed"] / len(ticks) == pytest.approx(0.10, abs=0.025)
    assert kinds["duplicate"] / len(ticks) == pytest.approx(0.10, abs=0.025)
    valid = [r for r in ticks if r.kind == "valid"]
    assert len(valid) / len(ticks) == pytest.approx(0.80, abs=0.03)
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


def test_keys_are_the_declared_key(faulty_records):
    """The Kafka key of every record is its event's customer_id (products: product_id)."""
    assert {r.topic for r in faulty_records} == set(KEY_FIELD)
    for record in faulty_records:
        assert record.key == record.event[KEY_FIELD[record.topic]].encode()


def test_event_time_follows_the_clock_with_late_and_out_of_order_offsets(faulty_records):
    """On-time events carry the clock; late ones are 15-40 min behind it, out-of-order ones up to 45 s."""
    slack = 0.002  # instants are written with milliseconds
    late = out_of_order = 0
    for record, clock in with_ticks(faulty_records):
        if record.kind != "valid" or record.topic not in (PAGE_VIEWS, ORDERS):
            continue
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


# ---------------------------------------------------------------- dimensions and payments

PAY_EPS = 2.0  # slow enough that most orders' payments come due within the run
PAY_COUNT = 20000


def instant(record_or_text) -> datetime:
    text = record_or_text if isinstance(record_or_text, str) else record_or_text.event["occurred_at"]
    return parse_instant(text)


@pytest.fixture(scope="module")
def paying_run():
    """A long, slow run with faults, many payments and a high rate of dimension changes."""
    gen = ShopGenerator(seed=17, start=START, events_per_second=PAY_EPS, mix=FAULTY, dimension_changes=0.03)
    it = iter(gen)
    return gen, [next(it) for _ in range(PAY_COUNT)]


def test_the_run_starts_by_seeding_every_product_and_customer_an_hour_early():
    """The first records are one version of every product, then of every customer, stamped start - 1 h."""
    records = generate(SEEDED + 10, seed=4, start=START)
    seeds = records[:SEEDED]
    assert [r.topic for r in seeds] == [PRODUCTS] * 50 + [CUSTOMERS] * 200
    assert [r.event["product_id"] for r in seeds[:50]] == [f"p-{n:04d}" for n in range(1, 51)]
    assert [r.event["customer_id"] for r in seeds[50:]] == [f"c-{n:05d}" for n in range(1, 201)]
    assert all(r.kind == "valid" and instant(r) == START - timedelta(hours=1) for r in seeds)
    categories = Counter(r.event["category"] for r in seeds[:50])
    assert set(categories) <= {"electronics", "books", "home", "garden", "toys", "fashion"} and len(categories) >= 4
    assert all(isinstance(r.event["list_price_cents"], int) and r.event["list_price_cents"] > 0 for r in seeds[:50])
    tiers = Counter(r.event["tier"] for r in seeds[50:])
    assert set(tiers) == {"standard", "silver", "gold"} and tiers["standard"] > tiers["gold"]
    assert all(len(r.event["country"]) == 2 and r.event["country"].isupper() for r in seeds[50:])
    assert all(r.topic not in (PRODUCTS, CUSTOMERS) for r in records[SEEDED:SEEDED + 3])


def test_dimension_changes_come_at_the_asked_rate_stamped_at_the_clock(paying_run):
    """After the seeds, products change only their list price and customers only their tier, at the tick's clock."""
    gen, records = paying_run
    current: dict[tuple[str, str], dict] = {}
    changes = 0
    stamped = list(with_ticks(records, PAY_EPS))
    for (record, clock) in stamped[SEEDED:]:
        if record.topic not in (PRODUCTS, CUSTOMERS):
            continue
        changes += 1
        key = (record.topic, record.event[KEY_FIELD[record.topic]])
        before = current.setdefault(key, next(r.event for r, _ in stamped[:SEEDED]
                                              if (r.topic, r.event[KEY_FIELD[r.topic]]) == key))
        changed = {f for f in record.event if f not in ("event_id", "occurred_at") and record.event[f] != before[f]}
        assert changed == ({"list_price_cents"} if record.topic == PRODUCTS else {"tier"}), record
        assert instant(record) == clock
        current[key] = record.event
    ticks = sum(is_tick(r) for r in records)
    assert changes / ticks == pytest.approx(0.03, abs=0.008)
    assert gen.product_versions and sum(len(v) for v in gen.product_versions.values()) + \
        sum(len(v) for v in gen.customer_versions.values()) == SEEDED + changes


def test_unit_prices_follow_the_list_price_at_the_order_time(paying_run):
    """Every order line's unit price is the list price of the product's version in force at the order's event time."""
    _, records = paying_run
    history: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for r in records:
        if r.topic == PRODUCTS:
            history[r.event["product_id"]].append((instant(r), r.event["list_price_cents"]))
    priced_by_a_change = backdated_before_a_change = 0
    for r in records:
        if r.kind != "valid" or r.topic != ORDERS:
            continue
        at = instant(r)
        for line in r.event["lines"]:
            versions = sorted(history[line["product_id"]])
            i = bisect.bisect_right([t for t, _ in versions], at) - 1
            assert i >= 0, "no version covers the order"
            assert line["unit_price_cents"] == versions[i][1], (r.event["order_id"], line)
            priced_by_a_change += i > 0
            # A change emitted before this (backdated) order but in force only after its event time.
            backdated_before_a_change += any(
                at < t for t, _ in versions[i + 1:]
                if any(p.topic == PRODUCTS and instant(p) == t for p in records[:r.index])
            ) if (r.late or r.out_of_order) else 0
    assert priced_by_a_change > 100
    assert backdated_before_a_change > 0


def classify(order: dict, payments: list[dict]) -> str:
    """An order's payment outcome, from its payment events: their statuses and delays after the order."""
    placed = instant(order["occurred_at"])
    shape = [(p["status"], (instant(p["occurred_at"]) - placed).total_seconds()) for p in payments]
    shape.sort(key=lambda s: s[1])
    slack = 0.002
    if not shape:
        return "unpaid"
    if len(shape) == 1:
        status, after = shape[0]
        if status == "succeeded" and 20 - slack <= after <= 600 + slack:
            return "paid"
        if status == "failed" and 20 - slack <= after <= 600 + slack:
            return "failed"
        if status == "succeeded" and 31 * 60 - slack <= after <= 50 * 60 + slack:
            return "paid_late"
    if len(shape) == 2 and [s for s, _ in shape] == ["failed", "succeeded"]:
        retry = shape[1][1] - shape[0][1]
        if 20 - slack <= shape[0][1] <= 600 + slack and 60 - slack <= retry <= 180 + slack:
            return "retried"
    return f"unexpected {shape}"


def test_payments_follow_their_orders_with_the_stated_timing_shares(paying_run):
    """Orders whose payments have all come due: each matches one stated outcome, in the stated shares; a payment
    carries its order's customer, amount and currency."""
    gen, records = paying_run
    ticks = sum(is_tick(r) for r in records)
    end = START + timedelta(seconds=(ticks - 1) / PAY_EPS)
    orders = {r.event["order_id"]: r.event for r in records if r.kind == "valid" and r.topic == ORDERS}
    payments: dict[str, dict[str, dict]] = defaultdict(dict)   # order id -> event id -> payment (malformed too)
    for r in records:
        if r.topic == PAYMENTS and r.kind != "duplicate":
            assert r.event["order_id"] in orders
            payments[r.event["order_id"]][r.event["event_id"]] = r.event
    complete = [o for o in orders.values() if instant(o["occurred_at"]) + timedelta(minutes=51) < end]
    assert len(complete) > 1500
    outcomes = Counter(classify(o, list(payments[o["order_id"]].values())) for o in complete)
    assert set(outcomes) == {"paid", "retried", "failed", "unpaid", "paid_late"}, outcomes
    n = len(complete)
    for outcome, share in (("paid", 0.75), ("retried", 0.08), ("failed", 0.05), ("unpaid", 0.07), ("paid_late", 0.05)):
        assert outcomes[outcome] / n == pytest.approx(share, abs=0.03), (outcome, outcomes)
    for order_id, by_id in payments.items():
        order = orders[order_id]
        for p in by_id.values():
            assert (p["customer_id"], p["amount_cents"], p["currency"]) == \
                (order["customer_id"], order["total_cents"], order["currency"])
    # The generator's own plan agrees with what it emitted (a check on the exposed truth, not a reference).
    assert all(gen.payment_plans[o["order_id"]].outcome == classify(o, list(payments[o["order_id"]].values()))
               for o in complete)


def test_payments_are_emitted_once_the_clock_passes_them(paying_run):
    """A payment comes after its order and no earlier than its own time: its time is at most the clock of the tick
    it is emitted with, and later than the clock of the tick before (unless its order came late)."""
    _, records = paying_run
    seen_orders: dict[str, datetime] = {}
    step = timedelta(seconds=1 / PAY_EPS)
    payments = 0
    for record, clock in with_ticks(records, PAY_EPS):
        if record.topic == ORDERS and record.kind == "valid":
            seen_orders[record.event["order_id"]] = clock
        if record.topic != PAYMENTS or record.kind == "duplicate":
            continue
        payments += 1
        assert record.event["order_id"] in seen_orders
        at = instant(record)
        assert at <= clock
        assert at > clock - step or seen_orders[record.event["order_id"]] >= clock - step
    assert payments > 2000


def test_corruptions_apply_only_to_records_with_the_field(paying_run):
    """Payments are corrupted too, never in a way that needs a field they lack; dimension changes are never broken."""
    _, records = paying_run
    broken = Counter((r.topic, r.corruption) for r in records if r.kind == "malformed")
    assert {c for t, c in broken if t == PAYMENTS} == {"truncated_json", "invalid_utf8", "missing_field", "bad_timestamp"}
    assert not any(t in (PRODUCTS, CUSTOMERS) for t, _ in broken)
    for r in records:
        if r.corruption == "product_page_without_product":
            assert r.topic == PAGE_VIEWS and r.event["page_type"] == "product"
        if r.corruption == "wrong_total":
            assert r.topic == ORDERS


def test_generator_rejects_a_dimension_change_rate_outside_zero_to_one():
    """dimension_changes is a share of ticks."""
    with pytest.raises(ValueError):
        ShopGenerator(start=START, dimension_changes=1.5)
