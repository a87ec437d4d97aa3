"""The shop: page views, orders, payments and the product and customer changelogs, with ten gold tables.

The project's default pipeline (LAKEHOUSE_PIPELINE=lakehouse.pipelines.shop), and an example of a pipeline
package: sources (`sources.py`), gold tables declared once each (`gold.py`, their transforms in `transforms.py`),
silver value rules (`rules.py`) and demo data (`generator.py`), gathered in PIPELINE below.
"""

from __future__ import annotations

from lakehouse.schemas.pipeline import Demo, Pipeline, Reference
from lakehouse.pipelines.shop.sources import *  # noqa: F401,F403 (the shop's names, for its users and tests)
from lakehouse.pipelines.shop.sources import SOURCES
from lakehouse.pipelines.shop.gold import GOLD, GOLD_BY_NAME, PARAMS
from lakehouse.pipelines.shop.database import DATABASE


def _silver_rules():
    from lakehouse.pipelines.shop.rules import silver_rules

    return silver_rules()


def _events(**kwargs):
    from lakehouse.pipelines.shop.generator import ShopGenerator

    return iter(ShopGenerator(**kwargs))


PIPELINE = Pipeline(
    name="shop",
    description="An online shop: what shoppers look at, order and pay, with its catalog and customers over time.",
    sources=SOURCES,
    gold=GOLD,
    params=PARAMS,
    silver_rules=_silver_rules,
    # Gold tables whose events can be counted: the silver table, what one silver event adds to the gold count,
    # and how to count the gold table (an SQL aggregate).
    gold_counts={
        "gold_revenue_per_minute": ("silver_orders", "1", "sum(orders)"),
        "gold_order_velocity": ("silver_orders", "1", "count(*)"),
        "gold_order_lines_enriched": ("silver_orders", "size(lines)", "count(*)"),
        "gold_page_views_enriched": ("silver_page_views", "1", "count(*)"),
    },
    references=(Reference("silver_payments", "order_id", "silver_orders", "payment_id"),),
    demo=Demo(events=_events, topics=tuple(s.topic for s in SOURCES)),
    database=DATABASE,
)

# Each gold table's spec by its constant name (GOLD_SESSIONS for gold_sessions), for the shop's users and tests.
globals().update({gold.name.upper(): gold.spec for gold in GOLD})
# Each source's bronze and silver spec by constant name (SILVER_ORDERS for silver_orders), likewise.
globals().update({spec.name.upper(): spec for source in SOURCES for spec in (source.bronze_table, source.silver_table)})
