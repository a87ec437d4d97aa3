"""The shop's operational database as a pipeline of changelog sources: what CDC captures, declared and nothing else.

The tests point the engine at it with LAKEHOUSE_PIPELINE=shop_accounts (this folder's parent on the path). Each
table of the shop's PostgreSQL database is a source declared with `changelog_source`: its compacted topic, bronze,
its current state (silver_db_<table>, SCD1) and its history (dim_db_<table>, SCD2) follow from the declaration.
"""

from __future__ import annotations

from lakehouse.pipelines.shop.database import DATABASE
from lakehouse.schemas.pipeline import Pipeline
from lakehouse.schemas.sources import changelog_source

CUSTOMERS = changelog_source(
    DATABASE, "customers", entity="db_customers", description="Customers as the shop's database holds them.",
    docs={"customer_id": "The customer's id.", "tier": "Loyalty tier.", "country": "ISO 3166-1 alpha-2 country code.",
          "updated_at": "When the row was last changed in the database."})
PRODUCTS = changelog_source(
    DATABASE, "products", entity="db_products", description="The catalog as the shop's database holds it.")

PIPELINE = Pipeline(
    name="shop_accounts",
    description="The shop's customers and products, captured from its PostgreSQL database with Debezium.",
    sources=(CUSTOMERS, PRODUCTS),
    database=DATABASE,
)
