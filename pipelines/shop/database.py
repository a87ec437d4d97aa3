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



def mutate(rng: Any, conn: Any) -> tuple[str, str]:
    """One realistic change in its own transaction: a tier or price change (most), a new customer or product, or a
    customer who closes their account or a product taken off the catalog; (table, insert|update|delete)."""
    from lakehouse.pipelines.shop.generator import COUNTRIES
    from lakehouse.pipelines.shop.sources import CATEGORIES, TIERS

    table = rng.choice(("customers", "products"))
    key = "customer_id" if table == "customers" else "product_id"
    keys = [r[0] for r in conn.execute(f"SELECT {key} FROM {table} ORDER BY {key}")]
    kind = rng.choices(("update", "insert", "delete"), weights=(0.7, 0.2, 0.1))[0] if keys else "insert"
    if kind == "insert":
        new = f"{'c' if table == 'customers' else 'p'}-n{rng.getrandbits(32):08x}"
        if table == "customers":
            conn.execute("INSERT INTO customers (customer_id, tier, country) VALUES (%s, %s, %s)",
                         (new, rng.choice(TIERS), rng.choice(COUNTRIES)))
        else:
            conn.execute("INSERT INTO products (product_id, name, category, list_price_cents) VALUES (%s, %s, %s, %s)",
                         (new, f"Product {new[2:]}", rng.choice(CATEGORIES), rng.randrange(199, 19999)))
    elif kind == "update":
        target = rng.choice(keys)
        if table == "customers":
            conn.execute("UPDATE customers SET tier = %s, updated_at = now() WHERE customer_id = %s",
                         (rng.choice(TIERS), target))
        else:
            conn.execute("UPDATE products SET list_price_cents = greatest(99, round(list_price_cents * %s)), "
                         "updated_at = now() WHERE product_id = %s", (rng.uniform(0.8, 1.25), target))
    else:
        conn.execute(f"DELETE FROM {table} WHERE {key} = %s", (rng.choice(keys),))
    return table, kind


DATABASE = Database(name="shop", tables=(CUSTOMERS, PRODUCTS), seed=first_rows, mutate=mutate)
