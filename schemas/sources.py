"""Event sources, each declared once: its topic, bronze and silver tables, flows and Dagster assets follow.

To bring your own topic, add one `Source` to SOURCES below (see the README, "Add your own source").
Nothing else is edited: the topic asset, the bronze and silver flows, the quarantine and late-arrival
routing, the tables and the assets are built from the declaration. Gold tables are explicit flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pyspark.sql.types import ArrayType, DataType, IntegerType, LongType, StringType, StructField, StructType

from schemas.events import EventSchema
from schemas.tables import KAFKA_COORDINATES, TableSpec
from schemas.topics import DAY_MS, TopicSpec


def column(name: str, dtype: DataType, doc: str) -> StructField:
    """A payload field with its description (shown in the Dagster UI and kept with the table's columns)."""
    return StructField(name, dtype, True, metadata={"comment": doc})


def envelope() -> list[StructField]:
    """Every event carries an id, when it happened and when its producer sent it."""
    return [
        column("event_id", StringType(), "Unique id of the event; a producer's retry repeats it."),
        column("occurred_at", StringType(), "Event time: when it happened, by the producer's clock (UTC)."),
        column("sent_at", StringType(), "When the producer sent it (UTC)."),
    ]


# Columns silver adds to every source, with what they mean.
LINEAGE_DOCS = {
    "event_date": "UTC date of the event time; silver's partition column.",
    "topic": "Kafka topic the record was read from.",
    "partition": "Kafka partition of the record.",
    "offset": "Kafka offset of the record within its partition.",
    "appended_at": "When the broker appended the record to its log (UTC).",
    "ingested_at": "When bronze wrote the record to the lake (UTC).",
}


@dataclass(frozen=True)
class Source:
    """One event source: topic, payload schema, key, partitions, retention, rules, event time, watermark."""

    topic: str                               # <domain>.<entity>.v<N>; a new version is a new source
    entity: str                              # names its tables: bronze_<entity>, silver_<entity>
    description: str
    fields: tuple[StructField, ...]          # the JSON payload; instants are ISO-8601 strings
    required: tuple[str, ...]
    key: str                                 # records with the same key share a partition, so keep their order
    rules: Mapping[str, str] = field(default_factory=dict)    # rule name -> SQL predicate a valid event meets
    derived: Mapping[str, str] = field(default_factory=dict)  # silver column -> SQL expression over the payload
    derived_docs: Mapping[str, str] = field(default_factory=dict)
    partitions: int = 3
    retention_ms: int = 7 * DAY_MS
    cleanup_policy: str = "delete"
    timestamps: tuple[str, ...] = ("occurred_at", "sent_at")
    event_time: str = "occurred_at"
    dedup_watermark: str | None = None       # how long silver remembers ids; None: LAKEHOUSE_SILVER_DEDUP_WATERMARK

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        for name in (*self.required, *self.timestamps, self.event_time, self.key):
            if name not in names:
                raise ValueError(f"source {self.topic}: {name!r} is not one of its fields ({', '.join(names)})")

    @property
    def schema(self) -> EventSchema:
        return EventSchema(
            name=self.topic, entity=self.entity, payload=StructType(list(self.fields)), required=self.required,
            timestamps=self.timestamps, event_time=self.event_time,
            rules=tuple(self.rules.items()), derived=tuple(self.derived.items()),
        )

    @property
    def topic_spec(self) -> TopicSpec:
        return TopicSpec(
            schema=self.schema, key_field=self.key, partitions=self.partitions, retention_ms=self.retention_ms,
            cleanup_policy=self.cleanup_policy, description=self.description,
        )

    @property
    def bronze_table(self) -> TableSpec:
        return TableSpec(
            f"bronze_{self.entity}", "bronze", f"Raw {self.topic} records from Kafka, unparsed, with their coordinates.",
            KAFKA_COORDINATES,
        )

    @property
    def silver_table(self) -> TableSpec:
        return TableSpec(
            f"silver_{self.entity}", "silver", f"{self.description} Parsed, validated, deduplicated.",
            ("event_id",), ("event_date",),
        )

    def column_docs(self) -> dict[str, str]:
        """Description of every silver column: payload fields, derived columns, lineage."""
        docs = {f.name: f.metadata.get("comment", "") for f in self.fields}
        return {**docs, **self.derived_docs, **LINEAGE_DOCS}


# ---------------------------------------------------------------- the shop

PAGE_TYPES = ("home", "category", "product", "cart", "checkout", "search")
CURRENCIES = ("EUR", "USD", "GBP")
# No order is worth more than 10 billion in major units; the bound also keeps sums over a window far
# from overflowing a long.
MAX_ORDER_CENTS = 10**12

ORDER_LINE = StructType([
    column("product_id", StringType(), "Product ordered."),
    column("quantity", IntegerType(), "Units ordered, positive."),
    column("unit_price_cents", LongType(), "Price of one unit in minor units of the currency."),
])
# Rules use the non-throwing arithmetic (try_add, try_multiply): an overflow is a broken rule, never a
# failed query.
LINES_TOTAL = "aggregate(lines, 0L, (acc, l) -> try_add(acc, try_multiply(CAST(l.quantity AS BIGINT), l.unit_price_cents)))"
ITEM_COUNT = "aggregate(lines, 0, (acc, l) -> try_add(acc, l.quantity))"

PAGE_VIEWS = Source(
    topic="shop.page_views.v1",
    entity="page_views",
    description="Every page a shopper sees, keyed by customer.",
    fields=(
        *envelope(),
        column("customer_id", StringType(), "Shopper who viewed the page."),
        column("session_id", StringType(), "The shopper's browsing session, as the site tracks it."),
        column("page_type", StringType(), f"One of {', '.join(PAGE_TYPES)}."),
        column("product_id", StringType(), "Product shown, on product pages only."),
        column("url", StringType(), "Path of the page."),
        column("referrer", StringType(), "Where the shopper came from."),
    ),
    required=("event_id", "occurred_at", "sent_at", "customer_id", "session_id", "page_type", "url"),
    key="customer_id",
    rules={
        "known_page_type": f"page_type IN ({', '.join(repr(p) for p in PAGE_TYPES)})",
        "product_page_has_product": "page_type != 'product' OR product_id IS NOT NULL",
    },
)

ORDERS = Source(
    topic="shop.orders.v1",
    entity="orders",
    description="Placed orders with their lines, keyed by customer.",
    fields=(
        *envelope(),
        column("order_id", StringType(), "The order's id."),
        column("customer_id", StringType(), "Shopper who placed the order."),
        column("currency", StringType(), f"One of {', '.join(CURRENCIES)}."),
        StructField("lines", ArrayType(ORDER_LINE), True, metadata={"comment": "Products, quantities and unit prices."}),
        column("total_cents", LongType(), "Order total in minor units; equals the sum of the lines."),
    ),
    required=("event_id", "occurred_at", "sent_at", "order_id", "customer_id", "currency", "lines", "total_cents"),
    key="customer_id",
    rules={
        "order_has_lines": "size(lines) > 0",
        "quantity_positive": "forall(lines, l -> coalesce(l.quantity > 0, false))",
        "price_not_negative": "forall(lines, l -> coalesce(l.unit_price_cents >= 0, false))",
        "known_currency": f"currency IN ({', '.join(repr(c) for c in CURRENCIES)})",
        "amounts_in_range": f"{LINES_TOTAL} BETWEEN 0 AND {MAX_ORDER_CENTS} AND {ITEM_COUNT} IS NOT NULL",
        "total_matches_lines": f"total_cents = {LINES_TOTAL}",
    },
    derived={"item_count": ITEM_COUNT},
    derived_docs={"item_count": "Units over all lines."},
)

SOURCES: tuple[Source, ...] = (PAGE_VIEWS, ORDERS)
BY_TOPIC = {source.topic: source for source in SOURCES}
