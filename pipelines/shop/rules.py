"""The shop's value rules on its silver tables, beyond what every silver table promises (gold's are in gold.py)."""

from __future__ import annotations

from lakehouse.quality.suites import Expectation, between, in_set
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
