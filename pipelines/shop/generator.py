"""A deterministic shop-event generator: same seed and start, same events; chosen shares are faulty on purpose.

A run starts by seeding the two dimensions (one version of every product and customer, stamped an hour
before the start so that backdated events still find one), then ticks a clock: each tick emits one page
view or order, and before it any payment that has come due and, at a small rate, a change to a product's
list price or a customer's tier stamped at the tick. Orders price their lines at the list price in force at
their event time. Each valid order gets a payment plan drawn from PAYMENT_OUTCOMES; its payments wait in a
heap until the clock passes their time, so they interleave with the other events.
"""

from __future__ import annotations

import bisect
import heapq
import json
import random
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, Literal

from lakehouse.schemas import reasons
from lakehouse.schemas.pipeline import Mix, MixError  # noqa: F401 (the generator's fault shares; tests import them here)
from lakehouse.pipelines.shop.sources import CATEGORIES, CURRENCIES, CUSTOMERS, ORDERS, PAGE_VIEWS, PAYMENTS, PRODUCTS, TIERS

Kind = Literal["valid", "duplicate", "malformed"]


PAGE_WEIGHTS = {"home": 10, "category": 20, "product": 45, "cart": 10, "checkout": 5, "search": 10}
CURRENCY_WEIGHTS = (80, 15, 5)
REFERRERS = ("direct", "search", "ad", "email", "social")
ORDER_SHARE = 0.2  # of valid events; the rest are page views
TOPICS = (PAGE_VIEWS.topic, ORDERS.topic, PAYMENTS.topic, PRODUCTS.topic, CUSTOMERS.topic)  # what it writes to
# How far back out-of-order and late events are stamped, in seconds of event time.
OUT_OF_ORDER_S = (1.0, 45.0)
LATE_S = (15 * 60.0, 40 * 60.0)

# What happens to a valid order's payment, with its share: paid 20 s..10 min after the order; failed
# then paid on a retry 1..3 min after the failure; failed only; never paid; paid 31..50 min after the order
# (outside a 30-minute bound).
PAYMENT_OUTCOMES: tuple[tuple[str, float], ...] = (
    ("paid", 0.75), ("retried", 0.08), ("failed", 0.05), ("unpaid", 0.07), ("paid_late", 0.05),
)
PAY_AFTER_S = (20.0, 600.0)
RETRY_AFTER_S = (60.0, 180.0)
PAY_LATE_AFTER_S = (31 * 60.0, 50 * 60.0)

# The dimensions are seeded this long before the start, so late events (at most 40 min back) find a version.
SEED_LEAD = timedelta(hours=1)
COUNTRIES = ("DE", "FR", "NL", "ES", "IT", "GB", "US", "PL")
TIER_WEIGHTS = (70, 20, 10)
PRICE_CHANGE = (0.8, 1.25)   # a new list price is the old one times a factor in this range


def iso(ts: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a Z, the way producers write instants."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def _ms(ts: datetime) -> datetime:
    """The instant as it is written (milliseconds), so what the generator compares is what readers see."""
    return ts.replace(microsecond=ts.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class PaymentPlan:
    """What a valid order's payment plan was: its outcome and the (due time, status) of each payment."""

    order_id: str
    outcome: str
    payments: tuple[tuple[datetime, str], ...]


@dataclass(frozen=True)
class GeneratedRecord:
    """One record to send; `event` is the payload (sans sent_at) for valid events and duplicates."""

    index: int
    topic: str
    key: bytes
    kind: Kind
    event: dict[str, Any] | None = None
    expected_reason: str | None = None      # what silver must put in quarantine, for malformed records
    corruption: str | None = None
    late: bool = False
    out_of_order: bool = False
    headers: tuple[tuple[str, bytes], ...] = field(default=())

    def encode(self, sent_at: datetime) -> bytes:
        """The value bytes, with the send time stamped in and the corruption (if any) applied."""
        payload = dict(self.event or {})
        payload["sent_at"] = iso(sent_at)
        if self.corruption == "missing_field":
            payload.pop("customer_id", None)
        elif self.corruption == "bad_timestamp":
            payload["occurred_at"] = "22/11/2026 10:00"
        elif self.corruption == "wrong_total":
            payload["total_cents"] = payload["total_cents"] + 1
        elif self.corruption == "product_page_without_product":
            payload["product_id"] = None
        text = json.dumps(payload, separators=(",", ":"))
        if self.corruption == "truncated_json":
            return text[: len(text) // 2].encode()
        if self.corruption == "invalid_utf8":
            return b"\xff\xfe" + text.encode()
        return text.encode()


# Corruptions, the topic they apply to (None: any with the field they corrupt), and the reason silver must give.
CORRUPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("truncated_json", None, reasons.MALFORMED_JSON),
    ("invalid_utf8", None, reasons.INVALID_ENCODING),
    ("missing_field", None, reasons.MISSING_FIELD),
    ("bad_timestamp", None, reasons.BAD_TIMESTAMP),
    ("wrong_total", ORDERS.topic, reasons.CONTRACT_VIOLATION),
    ("product_page_without_product", PAGE_VIEWS.topic, reasons.CONTRACT_VIOLATION),
)


# The payload field each corruption needs (None: any payload will do).
CORRUPTED_FIELD = {"missing_field": "customer_id", "bad_timestamp": "occurred_at", "wrong_total": "total_cents",
                   "product_page_without_product": "product_id"}


class ShopGenerator:
    """Dimensions, page views, orders and payments for a fixed catalog of customers and products.

    Driven by a seed and a start. What it emitted is also kept as plain data for references in tests:
    `product_versions` and `customer_versions` (key -> the change events emitted, in order) and
    `payment_plans` (order id -> PaymentPlan, for every valid order emitted).
    """

    def __init__(
        self,
        *,
        seed: int = 7,
        start: datetime | None = None,
        events_per_second: float = 20.0,
        customers: int = 200,
        products: int = 50,
        mix: Mix = Mix(),
        dimension_changes: float = 0.01,
    ):
        if events_per_second <= 0:
            raise MixError("events per second of event time must be positive")
        if not 0.0 <= dimension_changes <= 1.0:
            raise MixError(f"the dimension-change rate must be between 0 and 1 per tick, not {dimension_changes}")
        self.rng = random.Random(seed)
        self.seed = seed
        self.start = (start or datetime.now(timezone.utc)).astimezone(timezone.utc)
        # Ids come from seed and start together, so runs with the default seed never re-send an id;
        # the events themselves follow the seed alone (same seed, same mix of topics and faults).
        self._ids = random.Random(f"{seed}@{self.start.isoformat()}")
        self.run_tag = f"{self._ids.getrandbits(48):012x}"
        self.step = 1.0 / events_per_second
        self.dimension_changes = dimension_changes
        self.customers = [f"c-{n:05d}" for n in range(1, customers + 1)]
        self.products = [f"p-{n:04d}" for n in range(1, products + 1)]
        self.mix = mix
        # The dimensions' current state: attributes per key.
        self.catalog = {
            p: {"name": f"Product {p[2:]}", "category": self.rng.choice(CATEGORIES),
                "list_price_cents": self.rng.randrange(199, 19999)}
            for p in self.products
        }
        self.profiles = {
            c: {"tier": self.rng.choices(TIERS, weights=TIER_WEIGHTS)[0], "country": self.rng.choice(COUNTRIES)}
            for c in self.customers
        }
        self.seeded_at = _ms(self.start - SEED_LEAD)
        # List price history per product: (valid from, price), in time order, for pricing backdated orders.
        self._price_history = {p: [(self.seeded_at, a["list_price_cents"])] for p, a in self.catalog.items()}
        self._price_times = {p: [self.seeded_at] for p in self.catalog}   # the histories' times, for bisect
        self.product_versions: dict[str, list[dict[str, Any]]] = {p: [] for p in self.products}
        self.customer_versions: dict[str, list[dict[str, Any]]] = {c: [] for c in self.customers}
        self.payment_plans: dict[str, PaymentPlan] = {}
        self._recent: list[GeneratedRecord] = []
        self._tick = 0
        self._due: list[tuple[datetime, int, dict[str, Any]]] = []   # payments waiting for the clock
        self._payments = 0
        self._pending: deque[tuple[str, Any]] = deque(
            [("product", p) for p in self.products] + [("customer", c) for c in self.customers]
        )

    @property
    def prices(self) -> dict[str, int]:
        """Each product's current list price."""
        return {p: a["list_price_cents"] for p, a in self.catalog.items()}

    def list_price_at(self, product: str, at: datetime) -> int:
        """The product's list price in force at `at` (the version with the latest valid_from <= at)."""
        history = self._price_history[product]
        # Not a list of the times built per call: histories grow all run, and orders ask for every line.
        i = bisect.bisect_right(self._price_times[product], at) - 1
        if i < 0:
            raise ValueError(f"{product} has no list price before {iso(at)}")
        return history[i][1]

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    # ------------------------------------------------------------ dimensions

    def _product_record(self, index: int, product: str, occurred: datetime) -> GeneratedRecord:
        event = {"event_id": self._uuid(), "occurred_at": iso(occurred), "product_id": product, **self.catalog[product]}
        self.product_versions[product].append(event)
        return GeneratedRecord(index=index, topic=PRODUCTS.topic, key=product.encode(), kind="valid", event=event,
                               headers=(("schema", PRODUCTS.topic.encode()),))

    def _customer_record(self, index: int, customer: str, occurred: datetime) -> GeneratedRecord:
        event = {"event_id": self._uuid(), "occurred_at": iso(occurred), "customer_id": customer,
                 **self.profiles[customer]}
        self.customer_versions[customer].append(event)
        return GeneratedRecord(index=index, topic=CUSTOMERS.topic, key=customer.encode(), kind="valid", event=event,
                               headers=(("schema", CUSTOMERS.topic.encode()),))

    def _change(self, index: int, clock: datetime) -> GeneratedRecord:
        """A new list price for a product or a new tier for a customer, in force from the clock's time."""
        if self.rng.random() < 0.5:
            product = self.rng.choice(self.products)
            old = self.catalog[product]["list_price_cents"]
            new = max(99, round(old * self.rng.uniform(*PRICE_CHANGE)))
            if new == old:
                new += 1
            self.catalog[product] = {**self.catalog[product], "list_price_cents": new}
            self._price_history[product].append((clock, new))
            self._price_times[product].append(clock)
            return self._product_record(index, product, clock)
        customer = self.rng.choice(self.customers)
        tier = self.rng.choice([t for t in TIERS if t != self.profiles[customer]["tier"]])
        self.profiles[customer] = {**self.profiles[customer], "tier": tier}
        return self._customer_record(index, customer, clock)

    # ------------------------------------------------------------ page views, orders, payments

    def _page_view(self, customer: str, occurred: datetime, index: int) -> dict[str, Any]:
        page_type = self.rng.choices(list(PAGE_WEIGHTS), weights=list(PAGE_WEIGHTS.values()))[0]
        product = self.rng.choice(self.products) if page_type == "product" else None
        url = {"product": f"/p/{product}", "home": "/", "search": "/search"}.get(page_type, f"/{page_type}")
        return {
            "event_id": self._uuid(),
            "occurred_at": iso(occurred),
            "customer_id": customer,
            "session_id": f"s-{customer}-{int(occurred.timestamp()) // 1800}",
            "page_type": page_type,
            "product_id": product,
            "url": url,
            "referrer": self.rng.choice(REFERRERS),
        }

    def _order(self, customer: str, occurred: datetime, index: int) -> dict[str, Any]:
        lines = []
        for product in self.rng.sample(self.products, self.rng.randint(1, 4)):
            lines.append({"product_id": product, "quantity": self.rng.randint(1, 3),
                          "unit_price_cents": self.list_price_at(product, occurred)})
        return {
            "event_id": self._uuid(),
            "occurred_at": iso(occurred),
            "order_id": f"o-{self.run_tag}-{index:08d}",
            "customer_id": customer,
            "currency": self.rng.choices(CURRENCIES, weights=CURRENCY_WEIGHTS)[0],
            "lines": lines,
            "total_cents": sum(line["quantity"] * line["unit_price_cents"] for line in lines),
        }

    def _valid(self, index: int, clock: datetime) -> GeneratedRecord:
        roll = self.rng.random()
        late = roll < self.mix.late
        out_of_order = not late and roll < self.mix.late + self.mix.out_of_order
        if late:
            clock = _ms(clock - timedelta(seconds=self.rng.uniform(*LATE_S)))
        elif out_of_order:
            clock = _ms(clock - timedelta(seconds=self.rng.uniform(*OUT_OF_ORDER_S)))
        customer = self.rng.choice(self.customers)
        is_order = self.rng.random() < ORDER_SHARE
        schema = ORDERS.schema if is_order else PAGE_VIEWS.schema
        event = (self._order if is_order else self._page_view)(customer, clock, index)
        return GeneratedRecord(
            index=index, topic=schema.name, key=customer.encode(), kind="valid", event=event,
            late=late, out_of_order=out_of_order, headers=(("schema", schema.name.encode()),),
        )

    def _plan_payments(self, order: dict[str, Any], placed: datetime) -> None:
        """Draw the order's payment outcome and put its payments in the heap, due at their event times."""
        roll, outcome = self.rng.random(), PAYMENT_OUTCOMES[-1][0]
        for name, share in PAYMENT_OUTCOMES:
            if roll < share:
                outcome = name
                break
            roll -= share
        after = lambda bounds: timedelta(seconds=self.rng.uniform(*bounds))  # noqa: E731
        payments: list[tuple[datetime, str]] = []
        if outcome == "paid":
            payments.append((_ms(placed + after(PAY_AFTER_S)), "succeeded"))
        elif outcome == "retried":
            failed_at = _ms(placed + after(PAY_AFTER_S))
            payments += [(failed_at, "failed"), (_ms(failed_at + after(RETRY_AFTER_S)), "succeeded")]
        elif outcome == "failed":
            payments.append((_ms(placed + after(PAY_AFTER_S)), "failed"))
        elif outcome == "paid_late":
            payments.append((_ms(placed + after(PAY_LATE_AFTER_S)), "succeeded"))
        self.payment_plans[order["order_id"]] = PaymentPlan(order["order_id"], outcome, tuple(payments))
        for due, status in payments:
            self._payments += 1
            payment = {
                "payment_id": f"pay-{self.run_tag}-{self._payments:08d}",
                "order_id": order["order_id"],
                "customer_id": order["customer_id"],
                "amount_cents": order["total_cents"],
                "currency": order["currency"],
                "status": status,
            }
            heapq.heappush(self._due, (due, self._payments, payment))

    def _payment(self, index: int, due: datetime, payment: dict[str, Any]) -> GeneratedRecord:
        event = {"event_id": self._uuid(), "occurred_at": iso(due), **payment}
        headers = (("schema", PAYMENTS.topic.encode()),)
        key = payment["customer_id"].encode()
        if self.rng.random() < self.mix.malformed:
            corruption, reason = self._corruption(PAYMENTS.topic, event)
            return GeneratedRecord(index=index, topic=PAYMENTS.topic, key=key, kind="malformed", event=event,
                                   expected_reason=reason, corruption=corruption, headers=headers)
        record = GeneratedRecord(index=index, topic=PAYMENTS.topic, key=key, kind="valid", event=event,
                                 headers=headers)
        self._recent = (self._recent + [record])[-50:]
        return record

    def _corruption(self, topic: str, event: dict[str, Any]) -> tuple[str, str]:
        """A corruption that applies to this record (its topic, and a field it has to corrupt) and its reason."""
        options = [
            (name, reason) for name, only, reason in CORRUPTIONS
            if only in (None, topic) and event.get(CORRUPTED_FIELD.get(name, "event_id")) is not None
        ]
        return self.rng.choice(options)

    def _main(self, index: int, clock: datetime) -> GeneratedRecord:
        """The tick's page view or order: valid, a duplicate of a recent record, or malformed."""
        roll = self.rng.random()
        if roll < self.mix.malformed:
            base = self._valid(index, clock)
            corruption, reason = self._corruption(base.topic, base.event)
            return GeneratedRecord(
                index=index, topic=base.topic, key=base.key, kind="malformed", event=base.event,
                expected_reason=reason, corruption=corruption, headers=base.headers,
            )
        if roll < self.mix.malformed + self.mix.duplicate and self._recent:
            original = self.rng.choice(self._recent)
            return GeneratedRecord(
                index=index, topic=original.topic, key=original.key, kind="duplicate", event=original.event,
                headers=original.headers,
            )
        record = self._valid(index, clock)
        if record.topic == ORDERS.topic:
            self._plan_payments(record.event, datetime.fromisoformat(record.event["occurred_at"].replace("Z", "+00:00")))
        # Duplicates repeat a recent event, as a producer retrying after a lost acknowledgement would.
        self._recent = (self._recent + [record])[-50:]
        return record

    def _advance(self) -> None:
        """One tick of the clock: the payments now due, maybe a dimension change, then one page view or order."""
        clock = _ms(self.start + timedelta(seconds=self._tick * self.step))
        self._tick += 1
        while self._due and self._due[0][0] <= clock:
            due, _, payment = heapq.heappop(self._due)
            self._pending.append(("payment", (due, payment)))
        if self.rng.random() < self.dimension_changes:
            self._pending.append(("change", clock))
        self._pending.append(("main", clock))

    def __iter__(self) -> Iterator[GeneratedRecord]:
        index = 0
        while True:
            yield self.next_record(index)
            index += 1

    def next_record(self, index: int) -> GeneratedRecord:
        """The next record of the run, numbered `index` (callers number them 0, 1, 2, ...)."""
        if not self._pending:
            self._advance()
        what, arg = self._pending.popleft()
        if what == "product":
            return self._product_record(index, arg, self.seeded_at)
        if what == "customer":
            return self._customer_record(index, arg, self.seeded_at)
        if what == "payment":
            return self._payment(index, *arg)
        if what == "change":
            return self._change(index, arg)
        return self._main(index, arg)


def generate(count: int, **kwargs: Any) -> list[GeneratedRecord]:
    """The first `count` records of a generator built with `kwargs`."""
    gen = iter(ShopGenerator(**kwargs))
    return [next(gen) for _ in range(count)]
