"""Versioned event schemas of the shop domain; a new version is a new name, never an edit."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


@dataclass(frozen=True)
class EventSchema:
    """The JSON payload of one event type: its fields, which are required, which are instants."""

    name: str                          # e.g. shop.orders.v1 (also the topic it travels on)
    entity: str                        # e.g. orders: names the bronze/silver tables
    payload: StructType                # as written by producers; instants are ISO-8601 strings
    required: tuple[str, ...]
    timestamps: tuple[str, ...] = ("occurred_at", "sent_at")
    event_time: str = "occurred_at"

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.payload.fieldNames())


def _s(name: str, nullable: bool = True) -> StructField:
    return StructField(name, StringType(), nullable)


# Every event carries an id, the time it happened and the time its producer sent it;
# the broker adds a third timestamp (log-append time) that bronze keeps.
_ENVELOPE = [_s("event_id"), _s("occurred_at"), _s("sent_at")]

PAGE_TYPES = ("home", "category", "product", "cart", "checkout", "search")
CURRENCIES = ("EUR", "USD", "GBP")

PAGE_VIEWS_V1 = EventSchema(
    name="shop.page_views.v1",
    entity="page_views",
    payload=StructType(
        _ENVELOPE
        + [
            _s("customer_id"),
            _s("session_id"),
            _s("page_type"),
            _s("product_id"),  # set on product pages only
            _s("url"),
            _s("referrer"),
        ]
    ),
    required=("event_id", "occurred_at", "sent_at", "customer_id", "session_id", "page_type", "url"),
)

ORDER_LINE = StructType(
    [
        _s("product_id"),
        StructField("quantity", IntegerType()),
        StructField("unit_price_cents", LongType()),
    ]
)

ORDERS_V1 = EventSchema(
    name="shop.orders.v1",
    entity="orders",
    payload=StructType(
        _ENVELOPE
        + [
            _s("order_id"),
            _s("customer_id"),
            _s("currency"),
            StructField("lines", ArrayType(ORDER_LINE)),
            StructField("total_cents", LongType()),
        ]
    ),
    required=("event_id", "occurred_at", "sent_at", "order_id", "customer_id", "currency", "lines", "total_cents"),
)

ALL = (PAGE_VIEWS_V1, ORDERS_V1)
