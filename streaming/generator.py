"""A deterministic shop-event generator: same seed and start, same events; chosen shares are faulty on purpose."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, Literal

from schemas import reasons
from schemas.events import CURRENCIES, ORDERS_V1, PAGE_VIEWS_V1

Kind = Literal["valid", "duplicate", "malformed"]


class MixError(ValueError):
    """A fault share or rate the generator cannot honour; the message says which."""

PAGE_WEIGHTS = {"home": 10, "category": 20, "product": 45, "cart": 10, "checkout": 5, "search": 10}
CURRENCY_WEIGHTS = (80, 15, 5)
REFERRERS = ("direct", "search", "ad", "email", "social")
ORDER_SHARE = 0.2  # of valid events; the rest are page views
# How far back out-of-order and late events are stamped, in seconds of event time.
OUT_OF_ORDER_S = (1.0, 45.0)
LATE_S = (15 * 60.0, 40 * 60.0)


def iso(ts: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a Z, the way producers write instants."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Mix:
    """Shares of records (0..1) that are deliberately out of order, late, duplicated or malformed."""

    out_of_order: float = 0.03
    late: float = 0.01
    duplicate: float = 0.02
    malformed: float = 0.02

    def __post_init__(self) -> None:
        for name in ("out_of_order", "late", "duplicate", "malformed"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise MixError(f"the {name.replace('_', '-')} share must be between 0 and 1, not {value}")
        if self.duplicate + self.malformed > 1.0:
            raise MixError("the duplicate and malformed shares add up to more than 1")


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


# Corruptions, the topic they apply to (None: either), and the reason silver must give.
CORRUPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("truncated_json", None, reasons.MALFORMED_JSON),
    ("invalid_utf8", None, reasons.INVALID_ENCODING),
    ("missing_field", None, reasons.MISSING_FIELD),
    ("bad_timestamp", None, reasons.BAD_TIMESTAMP),
    ("wrong_total", ORDERS_V1.name, reasons.CONTRACT_VIOLATION),
    ("product_page_without_product", PAGE_VIEWS_V1.name, reasons.CONTRACT_VIOLATION),
)


class ShopGenerator:
    """Page views and orders from a fixed catalog of customers and products, driven by a seed and a start."""

    def __init__(
        self,
        *,
        seed: int = 7,
        start: datetime | None = None,
        events_per_second: float = 20.0,
        customers: int = 200,
        products: int = 50,
        mix: Mix = Mix(),
    ):
        if events_per_second <= 0:
            raise MixError("events per second of event time must be positive")
        self.rng = random.Random(seed)
        self.seed = seed
        self.start = (start or datetime.now(timezone.utc)).astimezone(timezone.utc)
        # Ids come from seed and start together, so runs with the default seed never re-send an id;
        # the events themselves follow the seed alone (same seed, same mix of topics and faults).
        self._ids = random.Random(f"{seed}@{self.start.isoformat()}")
        self.run_tag = f"{self._ids.getrandbits(48):012x}"
        self.step = 1.0 / events_per_second
        self.customers = [f"c-{n:05d}" for n in range(1, customers + 1)]
        self.products = [f"p-{n:04d}" for n in range(1, products + 1)]
        self.prices = {p: self.rng.randrange(199, 19999) for p in self.products}
        self.mix = mix
        self._recent: list[GeneratedRecord] = []

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

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
            lines.append({"product_id": product, "quantity": self.rng.randint(1, 3), "unit_price_cents": self.prices[product]})
        return {
            "event_id": self._uuid(),
            "occurred_at": iso(occurred),
            "order_id": f"o-{self.run_tag}-{index:08d}",
            "customer_id": customer,
            "currency": self.rng.choices(CURRENCIES, weights=CURRENCY_WEIGHTS)[0],
            "lines": lines,
            "total_cents": sum(line["quantity"] * line["unit_price_cents"] for line in lines),
        }

    def _valid(self, index: int) -> GeneratedRecord:
        clock = self.start + timedelta(seconds=index * self.step)
        roll = self.rng.random()
        late = roll < self.mix.late
        out_of_order = not late and roll < self.mix.late + self.mix.out_of_order
        if late:
            clock -= timedelta(seconds=self.rng.uniform(*LATE_S))
        elif out_of_order:
            clock -= timedelta(seconds=self.rng.uniform(*OUT_OF_ORDER_S))
        customer = self.rng.choice(self.customers)
        is_order = self.rng.random() < ORDER_SHARE
        schema = ORDERS_V1 if is_order else PAGE_VIEWS_V1
        event = (self._order if is_order else self._page_view)(customer, clock, index)
        return GeneratedRecord(
            index=index, topic=schema.name, key=customer.encode(), kind="valid", event=event,
            late=late, out_of_order=out_of_order, headers=(("schema", schema.name.encode()),),
        )

    def __iter__(self) -> Iterator[GeneratedRecord]:
        index = 0
        while True:
            yield self.next_record(index)
            index += 1

    def next_record(self, index: int) -> GeneratedRecord:
        roll = self.rng.random()
        if roll < self.mix.malformed:
            base = self._valid(index)
            options = [c for c in CORRUPTIONS if c[1] in (None, base.topic)]
            if base.topic == PAGE_VIEWS_V1.name and base.event["page_type"] != "product":
                options = [c for c in options if c[0] != "product_page_without_product"]
            corruption, _, reason = self.rng.choice(options)
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
        record = self._valid(index)
        # Duplicates repeat a recent event, as a producer retrying after a lost acknowledgement would.
        self._recent = (self._recent + [record])[-50:]
        return record


def generate(count: int, **kwargs: Any) -> list[GeneratedRecord]:
    """The first `count` records of a generator built with `kwargs`."""
    gen = iter(ShopGenerator(**kwargs))
    return [next(gen) for _ in range(count)]
