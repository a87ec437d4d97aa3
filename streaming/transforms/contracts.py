"""Business rules per event schema: (name, predicate that holds for a valid event) over parsed columns.

Rules use the non-throwing forms of arithmetic (try_add, try_multiply): a value that would overflow
becomes null, the rule does not hold, and the record goes to quarantine instead of failing the query.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas.events import CURRENCIES, ORDERS_V1, PAGE_TYPES, PAGE_VIEWS_V1

Rule = tuple[str, Column]

# No order is worth more than 10 billion in major units; the bound also keeps sums over a window far
# from overflowing a long.
MAX_ORDER_CENTS = 10**12


def _lines_total() -> Column:
    """Sum of quantity x unit price over the lines; null if any step overflows."""
    return F.aggregate(
        "lines",
        F.lit(0).cast("long"),
        lambda acc, line: F.try_add(acc, F.try_multiply(line["quantity"].cast("long"), line["unit_price_cents"])),
    )


def _item_count() -> Column:
    """Sum of quantities over the lines; null if it overflows an int."""
    return F.aggregate("lines", F.lit(0), lambda acc, line: F.try_add(acc, line["quantity"]))


def order_rules() -> list[Rule]:
    """An order has lines, positive quantities, non-negative prices, a known currency and a matching, bounded total."""
    total = _lines_total()
    return [
        ("order_has_lines", F.size("lines") > 0),
        ("quantity_positive", F.forall("lines", lambda line: F.coalesce(line["quantity"] > 0, F.lit(False)))),
        ("price_not_negative", F.forall("lines", lambda line: F.coalesce(line["unit_price_cents"] >= 0, F.lit(False)))),
        ("known_currency", F.col("currency").isin(*CURRENCIES)),
        ("amounts_in_range", total.isNotNull() & (total <= MAX_ORDER_CENTS) & _item_count().isNotNull()),
        ("total_matches_lines", F.col("total_cents") == total),
    ]


def page_view_rules() -> list[Rule]:
    """A page view has a known page type, and a product page names its product."""
    return [
        ("known_page_type", F.col("page_type").isin(*PAGE_TYPES)),
        ("product_page_has_product", (F.col("page_type") != "product") | F.col("product_id").isNotNull()),
    ]


def derive_orders(valid: DataFrame) -> DataFrame:
    """Columns silver adds to a valid order: its item count (the rules guarantee it fits)."""
    return valid.withColumn("item_count", _item_count())


RULES: dict[str, Callable[[], list[Rule]]] = {ORDERS_V1.name: order_rules, PAGE_VIEWS_V1.name: page_view_rules}
DERIVED: dict[str, Callable[[DataFrame], DataFrame]] = {ORDERS_V1.name: derive_orders}
