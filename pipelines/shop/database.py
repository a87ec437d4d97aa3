"""The shop's operational database: the customers and products tables its services write, which CDC captures.

Their first rows are the demo generator's starting catalog and customers (same ids, same attributes), so that
the orders it sends name customers and products the database holds.
"""

from __future__ import annotations

from typing import Any

from lakehouse.schemas.database import Database, DbTable

CUSTOMERS = DbTable("customers", "customer_id", (
    ("customer_id", "text"), ("tier", "text NOT NULL"), ("country", "text NOT NULL"),
    ("updated_at", "timestamptz NOT NULL DEFAULT now()")))
PRODUCTS = DbTable("products", "product_id", (
    ("product_id", "text"), ("name", "text NOT NULL"), ("category", "text NOT NULL"),
    ("list_price_cents", "bigint NOT NULL"), ("updated_at", "timestamptz NOT NULL DEFAULT now()")))


def first_rows() -> dict[str, list[dict[str, Any]]]:
    """The generator's starting customers and catalog, as rows of the two tables."""
    from lakehouse.pipelines.shop.generator import ShopGenerator

    shop = ShopGenerator()
    return {"customers": [{"customer_id": c, **attrs} for c, attrs in shop.profiles.items()],
            "products": [{"product_id": p, **attrs} for p, attrs in shop.catalog.items()]}


DATABASE = Database(name="shop", tables=(CUSTOMERS, PRODUCTS), seed=first_rows)
