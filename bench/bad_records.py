"""The bad-input corpus: every kind of broken record a producer can send, and where the lakehouse puts it.

Issue 9, item 6. Nothing may stop a stream or vanish: each record below lands in exactly one place,

- quarantine: with the reason code (schemas/reasons.py) and detail (the field or rule) given here;
- silver: it is a valid event after all (an unknown extra field, a null key, a valid 3 MB event);
- late: a valid event behind silver's dedup watermark goes to late_arrivals;
- duplicate: a valid event whose id silver already holds is counted as a duplicate and not written;
- refused: the broker refuses it (a 3 MB value over the topic's max.message.bytes), and the producer
  gets a clear error in its delivery report; it never reaches bronze.

`corpus(tag, now=...)` builds one copy of every kind; the tag goes into every event id, so copies sent
side by side never collide (drills send it several times). The test (tests/integration/
test_bad_input_corpus.py) and the drill (python -m bench.drill_bad_input) both send it.

Sending order matters for two kinds, and the senders keep it:

- `late_event` is behind the watermark only if silver already holds events near `now`: send the corpus
  after silver has taken in some valid events (both senders run a warm-up first);
- `duplicate_retry` and `duplicate_id_other_payload` repeat the id of `valid_control` with its key (so
  the same partition, later offsets): the first copy is the one silver keeps.

Several kinds share a reason code on purpose; the code names what is wrong, not how it was broken: broken,
truncated, NaN/Infinity literals, raw control characters, a BOM, a repeated key and nesting deeper than the
parser allows are all `malformed_json` ("not a JSON document the parser accepts"); an array, a scalar
and JSON null are all `wrong_type` at `$`; 1970 and 9999 are both `implausible_event_time` of
occurred_at; a tombstone and an empty value are both `empty_value` (the raw value in quarantine tells
them apart: null or zero bytes). Where the detail can tell kinds apart (the field, the rule), it does.

Decisions this corpus documents:

- unknown extra fields are accepted: a schema lists what silver reads (EventSchema.payload); other fields
  are left out of silver, not a reason to quarantine (tests/integration/test_bad_input.py pins this);
- the Kafka key is not part of the contract silver checks (it only decides the partition): a valid
  event with a null key is a valid event;
- a record header claiming another schema version is not read either: the topic name is the version
  (a new version is a new topic), so only the payload decides; a v2-shaped payload fails the v1 contract;
- the shop's topics keep the broker's default max.message.bytes (1 MB; their declarations set no other),
  so a 3 MB value is refused unless the producer compresses it below that: a compressible 3 MB value
  sent with zstd passes the broker and must then be handled like any other record.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Mapping

from lakehouse.schemas import reasons
from lakehouse.pipelines.shop import ORDERS, PAGE_VIEWS, PAYMENTS
from lakehouse.pipelines import shop

Outcome = Literal["quarantine", "silver", "late", "duplicate", "refused"]
OUTCOMES: tuple[Outcome, ...] = ("quarantine", "silver", "late", "duplicate", "refused")

TOPICS = (ORDERS.topic, PAGE_VIEWS.topic, PAYMENTS.topic)   # the event topics the corpus writes to
MB = 1024 * 1024
LARGE = 3 * MB          # "a value of several MB"
DEEP = 10_000           # nesting levels: ten times what the JSON parser accepts
# Producer settings for the 3 MB kinds: librdkafka refuses a value over its own message.max.bytes (1 MB by
# default) before sending; raised, the broker decides (topic max.message.bytes, 1 MB by default).
BIG_PRODUCER = {"message.max.bytes": 8 * MB}
COMPRESSED_PRODUCER = {**BIG_PRODUCER, "compression.type": "zstd"}


@dataclass(frozen=True)
class BadRecord:
    """One kind of bad input: what to send, and where the lakehouse must put it."""

    kind: str                       # unique name
    what: str                       # what the record is, in words
    topic: str
    key: bytes | None
    value: bytes | None
    outcome: Outcome
    reason: str | None = None       # quarantine: the reason code
    detail: str | None = None       # quarantine: the field or rule it names (None where the reason has none)
    event_id: str | None = None     # silver, late, duplicate: the id silver keys on
    headers: tuple[tuple[str, bytes], ...] = ()
    producer: Mapping[str, Any] = field(default_factory=dict)   # producer settings this record needs
    refusal: str | None = None      # refused: the error name the producer's delivery report carries

    @property
    def expected(self) -> str:
        """Where it must end up, in words: `quarantine wrong_type/customer_id`, `silver`, `refused <error>`."""
        if self.outcome == "quarantine":
            return f"quarantine {self.reason}" + (f"/{self.detail}" if self.detail else "")
        if self.outcome == "refused":
            return f"refused {self.refusal}"
        return self.outcome


def iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def encode(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


# ------------------------------------------------------------------ valid events, to break

def good_order(event_id: str, at: datetime, customer: str = "c-00001") -> dict[str, Any]:
    lines = [{"product_id": "p-0001", "quantity": 2, "unit_price_cents": 150},
             {"product_id": "p-0002", "quantity": 1, "unit_price_cents": 999}]
    return {"event_id": event_id, "occurred_at": iso(at), "sent_at": iso(at), "order_id": f"o-{event_id}",
            "customer_id": customer, "currency": "EUR", "lines": lines,
            "total_cents": sum(li["quantity"] * li["unit_price_cents"] for li in lines)}


def good_page_view(event_id: str, at: datetime, customer: str = "c-00001") -> dict[str, Any]:
    return {"event_id": event_id, "occurred_at": iso(at), "sent_at": iso(at), "customer_id": customer,
            "session_id": f"s-{customer}", "page_type": "product", "product_id": "p-0001", "url": "/p/p-0001",
            "referrer": "search"}


def good_payment(event_id: str, at: datetime, customer: str = "c-00001") -> dict[str, Any]:
    return {"event_id": event_id, "occurred_at": iso(at), "sent_at": iso(at), "payment_id": f"pay-{event_id}",
            "order_id": f"o-{event_id}", "customer_id": customer, "amount_cents": 1299, "currency": "EUR",
            "status": "succeeded"}


GOOD = {ORDERS.topic: good_order, PAGE_VIEWS.topic: good_page_view, PAYMENTS.topic: good_payment}


def without(payload: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != name}


def deep_nested(payload: dict[str, Any], name: str, depth: int) -> bytes:
    """The payload with field `name` replaced by `depth` nested arrays (built as bytes: Python's json would recurse)."""
    marker = "\u0001nested\u0001"
    text = encode({**payload, name: marker})
    return text.replace(json.dumps(marker).encode(), b"[" * depth + b"]" * depth, 1)


# ------------------------------------------------------------------ the corpus

def corpus(tag: str = "0", *, now: datetime | None = None) -> list[BadRecord]:
    """One record of every kind; event times near `now` (default: the current time), ids carry `tag`."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    O, V, P = ORDERS.topic, PAGE_VIEWS.topic, PAYMENTS.topic
    out: list[BadRecord] = []
    serial = iter(range(10_000))

    def add(kind: str, what: str, topic: str, value: bytes | None, outcome: Outcome, reason: str | None = None,
            detail: str | None = None, *, key: bytes | None | str = "default", event_id: str | None = None,
            **extra: Any) -> None:
        n = next(serial)
        customer = f"c-9{n:04d}"     # one key per kind, so that kinds spread over the partitions
        out.append(BadRecord(
            kind=kind, what=what, topic=topic, key=customer.encode() if key == "default" else key, value=value,
            outcome=outcome, reason=reason, detail=detail, event_id=event_id, **extra))

    def ev(kind: str, topic: str, **changes: Any) -> dict[str, Any]:
        """A valid payload for `topic` with id bad-<tag>-<kind>, event time `now`, then `changes`."""
        n = len(out)
        payload = GOOD[topic](f"bad-{tag}-{kind}", now, customer=f"c-9{n:04d}")
        return {**payload, **changes}

    Q = "quarantine"
    R = reasons

    # ---- bytes and encoding
    add("empty_value", "zero value bytes", O, b"", Q, R.EMPTY_VALUE)
    add("tombstone", "a null value (a tombstone) on an event topic, which is not compacted", O, None, Q, R.EMPTY_VALUE)
    add("whitespace_only", "only JSON whitespace", V, b" \n\t\r ", Q, R.MALFORMED_JSON)
    add("invalid_utf8", "a byte sequence that is not UTF-8 inside a string (0xC3 0x28)", O,
        encode(ev("invalid_utf8", O, customer_id="c-\u0001")).replace(b"\\u0001", b"\xc3\x28"), Q, R.INVALID_ENCODING)
    add("utf16", "the JSON text encoded as UTF-16 with its byte order mark", V,
        "\ufeff".encode("utf-16-le") + encode(ev("utf16", V)).decode().encode("utf-16-le"), Q, R.INVALID_ENCODING)
    add("utf8_bom", "a UTF-8 byte order mark before the document (RFC 8259: senders must not add one)", O,
        b"\xef\xbb\xbf" + encode(ev("utf8_bom", O)), Q, R.MALFORMED_JSON)

    # ---- JSON syntax
    add("broken_json", "a value missing where a member needs one", O,
        b'{"event_id":"bad-' + tag.encode() + b'-broken_json","occurred_at":,"order_id":"o-1"}', Q, R.MALFORMED_JSON)
    truncated = encode(ev("truncated_json", O))
    add("truncated_json", "the first half of a valid order", O, truncated[: len(truncated) // 2], Q, R.MALFORMED_JSON)
    add("single_quotes", "JavaScript-style single quotes", V,
        encode(ev("single_quotes", V)).replace(b'"', b"'"), Q, R.MALFORMED_JSON)
    add("repeated_key", "one key twice in the object (event_id)", O,
        encode(ev("repeated_key", O))[:-1] + b',"event_id":"other"}', Q, R.MALFORMED_JSON)
    add("raw_control_chars", "unescaped control characters (0x01, a tab) inside a string", V,
        encode(ev("raw_control_chars", V, referrer="a\u0001b\tc")).replace(b"\\u0001", b"\x01").replace(b"\\t", b"\t"),
        Q, R.MALFORMED_JSON)
    add("nan_literal", "NaN as a number (not JSON)", O,
        encode(ev("nan_literal", O, total_cents="\u0002")).replace(b'"\\u0002"', b"NaN"), Q, R.MALFORMED_JSON)
    add("infinity_literal", "-Infinity as a number (not JSON)", P,
        encode(ev("infinity_literal", P, amount_cents="\u0002")).replace(b'"\\u0002"', b"-Infinity"),
        Q, R.MALFORMED_JSON)
    add("deep_nesting", f"{DEEP:,} levels of nested arrays in a field (the parser accepts 1,000)", V,
        deep_nested(ev("deep_nesting", V), "referrer", DEEP), Q, R.MALFORMED_JSON)
    add("deep_nesting_at_limit", "a field nested so that the document is exactly 1,000 levels deep, the most "
        "the parser accepts: a document, only of the wrong type", V,
        deep_nested(ev("deep_nesting_at_limit", V), "referrer", 999), Q, R.WRONG_TYPE, "referrer")
    add("deep_array_at_limit", "a bare array nested exactly 1,000 levels deep (JSON, but not an object)", P,
        b"[" * 1000 + b"]" * 1000, Q, R.WRONG_TYPE, "$")
    add("trailing_garbage", "a valid order followed by bytes", O, encode(ev("trailing_garbage", O)) + b"garbage",
        Q, R.TRAILING_DATA)
    add("two_documents", "two valid page views back to back in one value", V,
        encode(ev("two_documents", V)) + encode(ev("two_documents", V)), Q, R.TRAILING_DATA)
    add("trailing_nul", "a valid payment followed by a NUL byte", P, encode(ev("trailing_nul", P)) + b"\x00",
        Q, R.TRAILING_DATA)

    # ---- the document's shape
    add("json_array", "the order inside a JSON array", O, b"[" + encode(ev("json_array", O)) + b"]",
        Q, R.WRONG_TYPE, "$")
    add("json_scalar", "a JSON string, not an object", V, b'"page view"', Q, R.WRONG_TYPE, "$")
    add("json_null", "the JSON literal null", P, b"null", Q, R.WRONG_TYPE, "$")

    # ---- required fields
    add("missing_event_id", "no event_id", O, encode(without(ev("missing_event_id", O), "event_id")),
        Q, R.MISSING_FIELD, "event_id")
    add("missing_event_time", "no occurred_at (the event time)", V,
        encode(without(ev("missing_event_time", V), "occurred_at")), Q, R.MISSING_FIELD, "occurred_at")
    add("missing_sent_at", "no sent_at", P, encode(without(ev("missing_sent_at", P), "sent_at")),
        Q, R.MISSING_FIELD, "sent_at")
    add("missing_string", "no customer_id (a required string)", V,
        encode(without(ev("missing_string", V), "customer_id")), Q, R.MISSING_FIELD, "customer_id")
    add("missing_array", "no lines (a required array)", O, encode(without(ev("missing_array", O), "lines")),
        Q, R.MISSING_FIELD, "lines")
    add("missing_number", "no amount_cents (a required integer)", P,
        encode(without(ev("missing_number", P), "amount_cents")), Q, R.MISSING_FIELD, "amount_cents")
    add("null_required", "status is JSON null", P, encode(ev("null_required", P, status=None)),
        Q, R.MISSING_FIELD, "status")

    # ---- wrong types
    add("number_for_string", "customer_id is a number", O, encode(ev("number_for_string", O, customer_id=12345)),
        Q, R.WRONG_TYPE, "customer_id")
    add("string_for_number", "total_cents is a string of digits", O,
        encode(ev("string_for_number", O, total_cents="2299")), Q, R.WRONG_TYPE, "total_cents")
    add("bool_for_string", "url is true", V, encode(ev("bool_for_string", V, url=True)), Q, R.WRONG_TYPE, "url")
    add("fraction_for_integer", "amount_cents is 12.5", P, encode(ev("fraction_for_integer", P, amount_cents=12.5)),
        Q, R.WRONG_TYPE, "amount_cents")
    add("object_for_array", "lines is one object, not an array", O,
        encode(ev("object_for_array", O, lines={"product_id": "p-0001", "quantity": 1, "unit_price_cents": 2299},
                  total_cents=2299)), Q, R.WRONG_TYPE, "lines")
    add("timestamp_as_number", "occurred_at in epoch milliseconds", V,
        encode(ev("timestamp_as_number", V, occurred_at=int(now.timestamp() * 1000))), Q, R.WRONG_TYPE, "occurred_at")

    # ---- numbers out of range
    add("int_overflow", "a line's quantity of 2^31 (the field is a 32-bit integer)", O,
        encode(ev("int_overflow", O, lines=[{"product_id": "p-0001", "quantity": 2**31, "unit_price_cents": 1}],
                  total_cents=2**31)), Q, R.OUT_OF_RANGE, "lines")
    add("long_overflow", "amount_cents of 10^30 (beyond a 64-bit integer)", P,
        encode(ev("long_overflow", P, amount_cents=10**30)), Q, R.OUT_OF_RANGE, "amount_cents")
    add("exponent_overflow", "amount_cents of 1e400 (beyond a double: read as Infinity, not an integer)", P,
        encode(ev("exponent_overflow", P, amount_cents="\u0002")).replace(b'"\\u0002"', b"1e400"),
        Q, R.WRONG_TYPE, "amount_cents")
    add("product_overflow", "quantity x unit price beyond a 64-bit integer", O,
        encode(ev("product_overflow", O, lines=[{"product_id": "p-0001", "quantity": 2,
                                                 "unit_price_cents": 2**62}], total_cents=-4)),
        Q, R.CONTRACT_VIOLATION, "amounts_in_range")
    add("negative_amount", "a payment of -500 cents", P, encode(ev("negative_amount", P, amount_cents=-500)),
        Q, R.CONTRACT_VIOLATION, "amount_in_range")
    add("negative_price", "a line priced at -150 cents", O,
        encode(ev("negative_price", O, lines=[{"product_id": "p-0001", "quantity": 1, "unit_price_cents": -150}],
                  total_cents=-150)), Q, R.CONTRACT_VIOLATION, "price_not_negative")

    # ---- timestamps
    add("far_future", "occurred_at in the year 9999", V,
        encode(ev("far_future", V, occurred_at="9999-12-31T23:59:59.000Z")), Q, R.IMPLAUSIBLE_EVENT_TIME, "occurred_at")
    add("far_past", "occurred_at at the Unix epoch, before the floor (2000)", O,
        encode(ev("far_past", O, occurred_at="1970-01-01T00:00:00.000Z")), Q, R.IMPLAUSIBLE_EVENT_TIME, "occurred_at")
    add("unparseable_time", "occurred_at is 'yesterday'", V, encode(ev("unparseable_time", V, occurred_at="yesterday")),
        Q, R.BAD_TIMESTAMP, "occurred_at")
    add("impossible_date", "sent_at on 30 February", P,
        encode(ev("impossible_date", P, sent_at=now.strftime("%Y-02-30T10:00:00.000Z"))), Q, R.BAD_TIMESTAMP, "sent_at")
    add("implausible_sent_at", "sent_at in 1999, before the floor", O,
        encode(ev("implausible_sent_at", O, sent_at="1999-12-31T23:59:59.000Z")), Q, R.IMPLAUSIBLE_TIMESTAMP, "sent_at")

    # ---- business rules
    add("total_mismatch", "total_cents one more than the lines add up to", O,
        encode(ev("total_mismatch", O, total_cents=2300)), Q, R.CONTRACT_VIOLATION, "total_matches_lines")
    add("empty_lines", "an order with no lines", O, encode(ev("empty_lines", O, lines=[], total_cents=0)),
        Q, R.CONTRACT_VIOLATION, "order_has_lines")
    add("zero_quantity", "a line with quantity 0", O,
        encode(ev("zero_quantity", O, lines=[{"product_id": "p-0001", "quantity": 0, "unit_price_cents": 150}],
                  total_cents=0)), Q, R.CONTRACT_VIOLATION, "quantity_positive")
    add("escaped_control_chars", "a NUL character (escaped \\u0000, valid JSON) inside currency", O,
        encode(ev("escaped_control_chars", O, currency="EU\u0000R")), Q, R.CONTRACT_VIOLATION, "known_currency")
    add("unknown_status", "status 'pending', not one the schema lists", P,
        encode(ev("unknown_status", P, status="pending")), Q, R.CONTRACT_VIOLATION, "known_status")
    add("unknown_page_type", "page_type 'landing'", V, encode(ev("unknown_page_type", V, page_type="landing")),
        Q, R.CONTRACT_VIOLATION, "known_page_type")
    add("product_page_without_product", "a product page view with product_id null", V,
        encode(ev("product_page_without_product", V, product_id=None)), Q, R.CONTRACT_VIOLATION,
        "product_page_has_product")

    # ---- the wrong event for the topic
    view = ev("wrong_event_type", V)
    add("wrong_event_type", "a page view sent to the orders topic", O, encode(view), Q, R.MISSING_FIELD, "order_id")
    v1 = ev("wrong_schema_version", O)
    v2 = {**without(without(v1, "total_cents"), "currency"), "schema_version": 2,
          "total": {"amount_cents": v1["total_cents"], "currency": v1["currency"]}}
    add("wrong_schema_version", "a v2-shaped order (total as an object with its currency, header schema "
        "shop.orders.v2) on the v1 topic", O, encode(v2), Q, R.MISSING_FIELD, "currency",
        headers=(("schema", b"shop.orders.v2"),))

    # ---- several megabytes
    rng = random.Random(f"large-{tag}")
    noise = base64.b64encode(rng.randbytes(LARGE * 3 // 4 + 3)).decode()[:LARGE]
    add("large_value_refused", "a 3 MB page view of incompressible text, uncompressed: over the topic's "
        "max.message.bytes (1 MB)", V, encode(ev("large_value_refused", V, referrer=noise)), "refused",
        producer=BIG_PRODUCER, refusal="MSG_SIZE_TOO_LARGE")
    big = encode(ev("large_value_valid", V, referrer="r" * LARGE))
    add("large_value_valid", "a valid 3 MB page view (a 3 MB referrer), zstd-compressed under the limit",
        V, big, "silver", event_id=f"bad-{tag}-large_value_valid", producer=COMPRESSED_PRODUCER)
    big = encode(ev("large_value_truncated", V, referrer="r" * LARGE))
    add("large_value_truncated", "a 3 MB page view cut off before its end, zstd-compressed", V,
        big[: len(big) - 100], Q, R.MALFORMED_JSON, producer=COMPRESSED_PRODUCER)

    # ---- valid after all, late, or a duplicate
    control = ev("valid_control", O)
    control_key = control["customer_id"].encode()
    add("valid_control", "a valid order: the original that the duplicate kinds repeat", O, encode(control),
        "silver", event_id=control["event_id"], key=control_key)
    add("duplicate_retry", "the same bytes as valid_control, as a producer's retry sends them", O,
        encode(control), "duplicate", event_id=control["event_id"], key=control_key)
    add("duplicate_id_other_payload", "valid_control's event id with another payload (total and lines changed): "
        "ids decide, the first copy is kept", O,
        encode({**control, "lines": [{"product_id": "p-0009", "quantity": 1, "unit_price_cents": 5}],
                "total_cents": 5}), "duplicate", event_id=control["event_id"], key=control_key)
    extra = ev("unknown_extra_field", O, coupon="SPRING", utm={"source": "mail"})
    add("unknown_extra_field", "a valid order with fields the schema does not list (accepted; left out of silver)",
        O, encode(extra), "silver", event_id=extra["event_id"])
    keyless = ev("null_key", V)
    add("null_key", "a valid page view with a null Kafka key", V, encode(keyless), "silver",
        event_id=keyless["event_id"], key=None)
    junk_headers = ev("binary_headers", P)
    add("binary_headers", "a valid payment with headers of binary junk and an empty header name", P,
        encode(junk_headers), "silver", event_id=junk_headers["event_id"],
        headers=(("", b"\xff\x00\xfe"), ("schema", b"\xc3\x28")))
    old = ev("late_event", O, occurred_at=iso(now - timedelta(days=2)), sent_at=iso(now))
    add("late_event", "a valid order whose event time is two days old: behind silver's dedup watermark", O,
        encode(old), "late", event_id=old["event_id"])

    names = [r.kind for r in out]
    assert len(names) == len(set(names)), "kind names must be unique"
    return out


def kinds() -> list[str]:
    """The names of the corpus's kinds, in sending order."""
    return [r.kind for r in corpus()]
