"""The shop's sources: page views, orders and payments, and the product and customer changelogs."""

from __future__ import annotations

from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from lakehouse.schemas.sources import Dimension, Source, column, envelope

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
