"""Event sources, each declared once: its topic, bronze and silver tables, flows and Dagster assets follow.

To bring your own topic, add one `Source` to SOURCES below (see the README, "Add your own source").
Nothing else is edited: the topic asset, the bronze and silver flows, the quarantine and late-arrival
routing, the tables and the assets are built from the declaration. Gold tables are explicit flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.tables import KAFKA_COORDINATES, TableSpec
from lakehouse.schemas.topics import DAY_MS, TopicSpec


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
class Dimension:
    """A changelog source kept as a slowly changing dimension (type 2): one row per key and version.

    Each change event of the source is one version of its key, valid from the change's event time until
    the next version's (`valid_to`, NULL for the current one). The topic may be compacted (it keeps each
    key's latest change); the dimension table keeps the history, so a join can ask what was true when.
    """

    key: str                          # the entity's id; the source's Kafka key
    attributes: tuple[str, ...]       # the payload fields a version carries
    description: str = ""


# Columns a dimension table adds to its key and attributes, with what they mean.
DIMENSION_DOCS = {
    "valid_from": "When this version took effect: the change's event time (UTC).",
    "valid_to": "When the next version took effect (UTC); NULL for the current version.",
    "is_current": "True for the key's current version (valid_to is NULL).",
    "event_id": "The change event this version came from.",
    "topic": "Kafka topic of the change event.",
    "partition": "Kafka partition of the change event.",
    "offset": "Kafka offset of the change event within its partition.",
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
    dimension: Dimension | None = None       # a changelog kept as an SCD2 table dim_<entity>, besides silver

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        dim = (self.dimension.key, *self.dimension.attributes) if self.dimension else ()
        for name in (*self.required, *self.timestamps, self.event_time, self.key, *dim):
            if name not in names:
                raise ValueError(f"source {self.topic}: {name!r} is not one of its fields ({', '.join(names)})")
        if self.dimension and self.dimension.key != self.key:
            raise ValueError(f"source {self.topic}: the dimension's key {self.dimension.key!r} must be the "
                             f"source's Kafka key {self.key!r}, so that a key's changes keep their order")

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

    @property
    def dimension_table(self) -> TableSpec | None:
        """dim_<entity>: every version of every key with its validity interval (layer silver); None if no dimension."""
        if self.dimension is None:
            return None
        return TableSpec(
            f"dim_{self.entity}", "silver",
            f"{self.dimension.description or self.description} Every version with its validity interval (SCD2).",
            (self.dimension.key, "valid_from", "event_id"),
        )

    @property
    def dimension_schema(self) -> StructType | None:
        """The columns of dim_<entity>, with their descriptions."""
        if self.dimension is None:
            return None
        by_name = {f.name: f for f in self.fields}
        docs = DIMENSION_DOCS
        return StructType([
            *(by_name[name] for name in (self.dimension.key, *self.dimension.attributes)),
            StructField("valid_from", TimestampType(), True, metadata={"comment": docs["valid_from"]}),
            StructField("valid_to", TimestampType(), True, metadata={"comment": docs["valid_to"]}),
            StructField("is_current", BooleanType(), True, metadata={"comment": docs["is_current"]}),
            StructField("event_id", StringType(), True, metadata={"comment": docs["event_id"]}),
            StructField("topic", StringType(), True, metadata={"comment": docs["topic"]}),
            StructField("partition", IntegerType(), True, metadata={"comment": docs["partition"]}),
            StructField("offset", LongType(), True, metadata={"comment": docs["offset"]}),
        ])

    def column_docs(self) -> dict[str, str]:
        """Description of every silver column: payload fields, derived columns, lineage."""
        docs = {f.name: f.metadata.get("comment", "") for f in self.fields}
        return {**docs, **self.derived_docs, **LINEAGE_DOCS}

    def dimension_column_docs(self) -> dict[str, str]:
        """Description of every dim_<entity> column (empty if the source has no dimension)."""
        schema = self.dimension_schema
        return {} if schema is None else {f.name: f.metadata.get("comment", "") for f in schema.fields}


# ---------------------------------------------------------------- the shop

PAGE_TYPES = ("home", "category", "product", "cart", "checkout", "search")
CURRENCIES = ("EUR", "USD", "GBP")
PAYMENT_STATUSES = ("succeeded", "failed")
CATEGORIES = ("electronics", "books", "home", "garden", "toys", "fashion")
TIERS = ("standard", "silver", "gold")
# A changelog's ids are remembered as long as the topic keeps records: a change is rare and still
# meaningful when it arrives late (the dimension places it by its event time), so it is never "late".
CHANGELOG_DEDUP = "7 days"
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

PAYMENTS = Source(
    topic="shop.payments.v1",
    entity="payments",
    description="Payment attempts for orders, keyed by customer (so they share a partition with the orders).",
    fields=(
        *envelope(),
        column("payment_id", StringType(), "The payment attempt's id."),
        column("order_id", StringType(), "Order the payment is for."),
        column("customer_id", StringType(), "Shopper who paid; the Kafka key, as for orders."),
        column("amount_cents", LongType(), "Amount in minor units of the currency."),
        column("currency", StringType(), f"One of {', '.join(CURRENCIES)}."),
        column("status", StringType(), f"One of {', '.join(PAYMENT_STATUSES)}."),
    ),
    required=("event_id", "occurred_at", "sent_at", "payment_id", "order_id", "customer_id", "amount_cents",
              "currency", "status"),
    key="customer_id",
    rules={
        "known_status": f"status IN ({', '.join(repr(s) for s in PAYMENT_STATUSES)})",
        "known_currency": f"currency IN ({', '.join(repr(c) for c in CURRENCIES)})",
        "amount_in_range": f"amount_cents BETWEEN 0 AND {MAX_ORDER_CENTS}",
    },
)

PRODUCTS = Source(
    topic="shop.products.v1",
    entity="products",
    description="Changes to the product catalog (name, category, list price), keyed by product; compacted.",
    fields=(
        *envelope(),
        column("product_id", StringType(), "The product's id."),
        column("name", StringType(), "The product's display name."),
        column("category", StringType(), f"One of {', '.join(CATEGORIES)}."),
        column("list_price_cents", LongType(), "List price of one unit in minor units."),
    ),
    required=("event_id", "occurred_at", "sent_at", "product_id", "name", "category", "list_price_cents"),
    key="product_id",
    rules={
        "known_category": f"category IN ({', '.join(repr(c) for c in CATEGORIES)})",
        "list_price_in_range": f"list_price_cents BETWEEN 0 AND {MAX_ORDER_CENTS}",
    },
    cleanup_policy="compact",
    dedup_watermark=CHANGELOG_DEDUP,
    dimension=Dimension(key="product_id", attributes=("name", "category", "list_price_cents"),
                        description="Products as they were over time."),
)

CUSTOMERS = Source(
    topic="shop.customers.v1",
    entity="customers",
    description="Changes to customers (loyalty tier, country), keyed by customer; compacted.",
    fields=(
        *envelope(),
        column("customer_id", StringType(), "The customer's id."),
        column("tier", StringType(), f"Loyalty tier: one of {', '.join(TIERS)}."),
        column("country", StringType(), "ISO 3166-1 alpha-2 country code."),
    ),
    required=("event_id", "occurred_at", "sent_at", "customer_id", "tier", "country"),
    key="customer_id",
    rules={
        "known_tier": f"tier IN ({', '.join(repr(t) for t in TIERS)})",
        "country_code": "country RLIKE '^[A-Z]{2}$'",
    },
    cleanup_policy="compact",
    dedup_watermark=CHANGELOG_DEDUP,
    dimension=Dimension(key="customer_id", attributes=("tier", "country"),
                        description="Customers as they were over time."),
)

SOURCES: tuple[Source, ...] = (PAGE_VIEWS, ORDERS, PAYMENTS, PRODUCTS, CUSTOMERS)
BY_TOPIC = {source.topic: source for source in SOURCES}
