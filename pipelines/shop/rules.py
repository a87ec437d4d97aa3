"""The shop's data-quality rules: value rules on its silver tables and each gold table's expectation suite."""

from __future__ import annotations

from typing import Callable

from lakehouse.quality.suites import Expectation, Suite, between, gold_suite, in_set, not_null
from lakehouse.schemas.tables import TableSpec
from lakehouse.pipelines.shop import tables
from lakehouse.pipelines.shop.sources import CATEGORIES, CURRENCIES, MAX_ORDER_CENTS, PAGE_TYPES, PAYMENT_STATUSES, TIERS


def silver_rules() -> dict[str, list[Expectation]]:
    """The shop's own value rules, beyond what every table of its kind promises. Ids that do not look like the
    shop's are dropped to quarantine: a producer bug, not an event anyone should count."""
    import great_expectations.expectations as gxe

    return {
        "page_views": [
            Expectation(gxe.ExpectColumnValuesToMatchRegex(column="customer_id", regex=r"^c-\d+$"), "drop"),
            in_set("page_type", PAGE_TYPES),
        ],
        "orders": [
            Expectation(gxe.ExpectColumnValuesToMatchRegex(column="order_id", regex=r"^o-"), "drop"),
            between("total_cents", 0, MAX_ORDER_CENTS, "drop"),
            between("item_count", 1, None),
            in_set("currency", CURRENCIES),
        ],
        "payments": [
            Expectation(gxe.ExpectColumnValuesToMatchRegex(column="order_id", regex=r"^o-"), "drop"),
            between("amount_cents", 0, MAX_ORDER_CENTS, "drop"),
            in_set("status", PAYMENT_STATUSES),
            in_set("currency", CURRENCIES),
        ],
        "products": [in_set("category", CATEGORIES), between("list_price_cents", 0, MAX_ORDER_CENTS)],
        "customers": [in_set("tier", TIERS)],
    }


def gold_suites() -> list[tuple[TableSpec, Callable[[TableSpec], Suite]]]:
    """Each gold table that has a suite, with the function that builds it (building imports GX)."""
    import great_expectations.expectations as gxe

    def non_negative(*cols: str) -> list[Expectation]:
        return [between(c, 0, None) for c in cols]

    def sessions(table: TableSpec) -> Suite:
        return gold_suite(table, *non_negative("page_views", "orders"), Expectation(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="session_end", column_B="session_start",
                                                           or_equal=True), "fail"))

    def page_views_enriched(table: TableSpec) -> Suite:
        return gold_suite(table, *not_null("customer_tier", severity="warn"), Expectation(
            gxe.ExpectColumnValuesToNotBeNull(column="category", row_condition="product_id IS NOT NULL",
                                                 condition_parser="spark"), "warn"))

    return [
        (tables.GOLD_REVENUE_PER_MINUTE, lambda table: gold_suite(
            table, *non_negative("revenue_cents", "orders", "items"), in_set("currency", CURRENCIES))),
        (tables.GOLD_PAGE_VIEWS_PER_PRODUCT_MINUTE, lambda table: gold_suite(table, *non_negative("views"))),
        (tables.GOLD_REVENUE_HOPPING, lambda table: gold_suite(
            table, *non_negative("revenue_cents", "orders"), in_set("currency", CURRENCIES))),
        (tables.GOLD_ORDER_VELOCITY, lambda table: gold_suite(
            table, *non_negative("orders_before"), *not_null("customer_id", "ordered_at"))),
        (tables.GOLD_SESSIONS, sessions),
        # Unpaid orders have no payment and orphan payments no order: its keys may be null, not both.
        (tables.GOLD_ORDER_PAYMENTS, lambda table: gold_suite(
            table, *not_null("order_id", "outcome"),
            in_set("outcome", ("matched", "unpaid", "payment_without_order"), "fail"), keys_not_null=False)),
        (tables.GOLD_PROCESSING_DELAY, lambda table: gold_suite(table, *non_negative("events"))),
        # An order line whose product has no version yet has no category: recorded, not a reason to stop.
        (tables.GOLD_CATEGORY_REVENUE_PER_MINUTE, lambda table: gold_suite(
            table, *not_null("window_start", "currency"), *not_null("category", severity="warn"),
            *non_negative("revenue_cents", "units", "orders"), keys_not_null=False)),
        # Every enriched row found its dimension version: a miss is a late or missing product or customer change.
        (tables.GOLD_ORDER_LINES_ENRICHED, lambda table: gold_suite(
            table, *non_negative("quantity", "line_cents"), *not_null("category", "customer_tier", severity="warn"))),
        (tables.GOLD_PAGE_VIEWS_ENRICHED, page_views_enriched),
    ]
