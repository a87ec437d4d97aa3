"""Business rules per event schema: (name, predicate that holds for a valid event) over parsed columns."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from schemas.events import CURRENCIES, ORDERS_V1, PAGE_TYPES, PAGE_VIEWS_V1

Rule = tuple[str, Column]


def _lines_total() -> Column:
    return F.aggregate(
        "lines", F.lit(0).cast("long"), lambda acc, line: acc + line["quantity"] * line["unit_price_cents"]
    )


def order_rules() -> list[Rule]:
    """An order has lines, positive quantities, non-negative prices, a known currency and a matching total."""
    return [
        ("order_has_lines", F.size("lines") > 0),
        ("quantity_positive", F.forall("lines", lambda line: F.coalesce(line["quantity"] > 0, F.lit(False)))),
        ("price_not_negative", F.forall("lines", lambda line: F.coalesce(line["unit_price_cents"] >= 0, F.lit(False)))),
        ("known_currency", F.col("currency").isin(*CURRENCIES)),
        ("total_matches_lines", F.col("total_cents") == _lines_total()),
    ]


def page_view_rules() -> list[Rule]:
    """A page view has a known page type, and a product page names its product."""
    return [
        ("known_page_type", F.col("page_type").isin(*PAGE_TYPES)),
        ("product_page_has_product", (F.col("page_type") != "product") | F.col("product_id").isNotNull()),
    ]


RULES = {ORDERS_V1.name: order_rules, PAGE_VIEWS_V1.name: page_view_rules}
