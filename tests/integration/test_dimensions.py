"""Dimensions through the real broker and the real flows: SCD2 tables equal the versions the generator emitted, and
an order's as-of enrichment never changes when a product changes after it, in the stream and after a rebuild.

References are plain Python over the produced events.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lakehouse.schemas import sources, topics
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import GeneratedRecord, Mix, ShopGenerator, iso
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import run_flow
from lakehouse.streaming.transforms.dimensions import enrich_as_of
from lakehouse.pipelines import shop

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
N = 1100
EPS = 2.0
PRODUCTS, CUSTOMERS, ORDERS = shop.PRODUCTS, shop.CUSTOMERS, shop.ORDERS
ATTRIBUTES = {"list_price_cents": "list_price_at_order", "category": "category_at_order"}


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def millis(ts: datetime | None) -> int | None:
    return None if ts is None else round(ts.timestamp() * 1000)


def expected_versions(events: list[tuple[dict, tuple]], key: str, attributes: tuple[str, ...]) -> set[tuple]:
    """SCD2 by hand: per key, versions in (valid_from, event_id) order; valid_to is the next one's valid_from."""
    by_key: dict[str, list[tuple[dict, tuple]]] = defaultdict(list)
    for event, coords in events:
        by_key[event[key]].append((event, coords))
    out = set()
    for versions in by_key.values():
        versions.sort(key=lambda v: (instant(v[0]["occurred_at"]), v[0]["event_id"]))
        for i, (event, coords) in enumerate(versions):
            nxt = versions[i + 1][0] if i + 1 < len(versions) else None
            valid_to = millis(instant(nxt["occurred_at"])) if nxt else None
            out.add((event[key], *(event[a] for a in attributes), millis(instant(event["occurred_at"])), valid_to,
                     nxt is None, event["event_id"], *coords))
    return out


def dim_rows(spark, ctx, source) -> set[tuple]:
    dim = source.dimension
    df = spark.read.format("delta").load(source.dimension_table.path(ctx.lake_root))
    return {tuple(r) for r in df.select(
        dim.key, *dim.attributes, F.unix_millis("valid_from"), F.unix_millis("valid_to"), "is_current", "event_id",
        "topic", "partition", "offset",
    ).collect()}


def price_as_of(product_events: list[dict], product: str, at: datetime) -> int | None:
    """The list price of the product's latest change at or before `at` (ties: the larger event id wins)."""
    candidates = [(instant(e["occurred_at"]), e["event_id"], e["list_price_cents"]) for e in product_events
                  if e["product_id"] == product and instant(e["occurred_at"]) <= at]
    return max(candidates)[2] if candidates else None


def lines_of(spark, silver_orders):
    return silver_orders.select("order_id", "occurred_at", F.explode("lines").alias("l")).select(
        "order_id", "occurred_at", "l.product_id", "l.unit_price_cents")


def enriched_set(df) -> set[tuple]:
    return {tuple(r) for r in df.select("order_id", "product_id", "list_price_at_order", "category_at_order").collect()}


def enrich_in_stream(spark, ctx, out: str, checkpoint: str) -> None:
    """A streaming query over silver_orders: each micro-batch's lines enriched as of their time against dim_products
    read as a static Delta table at that moment, appended once per batch id."""
    dim_path = PRODUCTS.dimension_table.path(ctx.lake_root)

    def enrich(batch_df, batch_id: int) -> None:
        dim = batch_df.sparkSession.read.format("delta").load(dim_path)
        (enrich_as_of(lines_of(spark, batch_df), dim, key="product_id", event_time="occurred_at", attributes=ATTRIBUTES)
         .write.format("delta").mode("append").option("txnAppId", "test-enrich").option("txnVersion", str(batch_id))
         .save(out))

    query = (spark.readStream.format("delta").option("maxFilesPerTrigger", "1").load(ORDERS.silver_table.path(ctx.lake_root))
             .writeStream.foreachBatch(enrich).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


FLOWS = ("bronze_products", "bronze_customers", "bronze_orders", "silver_products", "silver_customers",
         "silver_orders", "dim_products", "dim_customers")


@pytest.fixture(scope="module")
def lake(spark, broker, tmp_path_factory):
    """A generator run to the real broker; bronze, silver and dimension flows in small micro-batches."""
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    gen = ShopGenerator(seed=31, start=START, events_per_second=EPS, dimension_changes=0.05,
                        mix=Mix(out_of_order=0.05, late=0.03, duplicate=0.03, malformed=0.02))
    it = iter(gen)
    records = [next(it) for _ in range(N)]
    report = produce(records, bootstrap=broker.kafka_bootstrap)
    assert report.delivered == N
    full = FlowContext(lake_root=str(tmp_path_factory.mktemp("lake")), kafka_bootstrap=broker.kafka_bootstrap)
    # Small micro-batches for the dimensions (several MERGEs, changes spread over them); orders at once.
    ctx = dataclasses.replace(full, max_offsets_per_trigger=120, max_files_per_trigger=2)
    runs = {name: run_flow(spark, BY_NAME[name], full if "orders" in name else ctx) for name in FLOWS}
    return gen, records, report, ctx, runs


def coords_of(report, index: int) -> tuple:
    d = report.deliveries[index]
    return (d.topic, d.partition, d.offset)


def dimension_events(records, report, topic: str) -> list[tuple[dict, tuple]]:
    return [(r.event, coords_of(report, r.index)) for r in records if r.topic == topic and r.kind == "valid"]


def test_dimension_tables_equal_the_versions_emitted(spark, lake):
    """dim_products and dim_customers hold every emitted version once, with the valid_from/valid_to chain of a
    plain-Python SCD2 and each change's Kafka coordinates; they were built over several micro-batches."""
    gen, records, report, ctx, runs = lake
    for source in (PRODUCTS, CUSTOMERS):
        events = dimension_events(records, report, source.topic)
        changed = len(events) - len({e[source.key] for e, _ in events})
        assert changed > 5, f"{source.entity}: only {changed} changes"
        assert dim_rows(spark, ctx, source) == expected_versions(events, source.key, source.dimension.attributes)
        run = runs[f"dim_{source.entity}"]
        assert run.batches > 1 and run.input_rows == len(events)
    # the truth the generator exposes for gold references is what it emitted
    assert sum(len(v) for v in gen.product_versions.values()) == len(dimension_events(records, report, PRODUCTS.topic))


def test_a_change_after_an_order_never_changes_its_enrichment(spark, broker, lake, tmp_path):
    """Orders enriched in the stream keep the price as of their time when products change later, also for orders that
    arrive after the change but happened before it; rebuilding dim_products from the log gives the same answer."""
    gen, records, report, ctx, _ = lake
    enriched = str(tmp_path / "enriched")
    checkpoint = str(tmp_path / "enriched_checkpoint")
    enrich_in_stream(spark, ctx, enriched, checkpoint)
    first = enriched_set(spark.read.format("delta").load(enriched))

    product_events = [e for e, _ in dimension_events(records, report, PRODUCTS.topic)]
    valid_orders = [r.event for r in records if r.kind == "valid" and r.topic == ORDERS.topic]
    reference = {(o["order_id"], line["product_id"], price_as_of(product_events, line["product_id"], instant(o["occurred_at"])))
                 for o in valid_orders for line in o["lines"]}
    assert {(o, p, price) for o, p, price, _ in first} == reference
    assert spark.read.format("delta").load(enriched).count() == len(reference)   # each line enriched once
    # the generator priced each line at the list price as of the order time, and the enrichment agrees
    assert reference == {(o["order_id"], line["product_id"], line["unit_price_cents"]) for o in valid_orders
                         for line in o["lines"]}

    # Every ordered product's price changes after the last event; then orders that happened before the change
    # arrive (copies of earlier orders under new ids).
    last = max(instant(e["occurred_at"]) for e in valid_orders + product_events)
    changed_at = last + timedelta(minutes=1)
    ordered = sorted({line["product_id"] for o in valid_orders for line in o["lines"]})
    current = {p: max((instant(e["occurred_at"]), e["event_id"], e) for e in product_events if e["product_id"] == p)[2]
               for p in ordered}
    changes = [{**current[p], "event_id": str(uuid.uuid4()), "occurred_at": iso(changed_at),
                "list_price_cents": current[p]["list_price_cents"] * 2 + 1} for p in ordered]
    backdated = [{**o, "event_id": str(uuid.uuid4()), "order_id": f"{o['order_id']}-again"} for o in valid_orders[-40:]]
    later = [GeneratedRecord(index=N + i, topic=PRODUCTS.topic, key=e["product_id"].encode(), kind="valid", event=e)
             for i, e in enumerate(changes)]
    later += [GeneratedRecord(index=N + len(changes) + i, topic=ORDERS.topic, key=o["customer_id"].encode(),
                              kind="valid", event=o) for i, o in enumerate(backdated)]
    sent = produce(later[:len(changes)], bootstrap=broker.kafka_bootstrap)
    for name in ("bronze_products", "silver_products", "dim_products"):
        run_flow(spark, BY_NAME[name], ctx)
    sent_orders = produce(later[len(changes):], bootstrap=broker.kafka_bootstrap)
    assert sent.delivered == len(changes) and sent_orders.delivered == len(backdated)
    for name in ("bronze_orders", "silver_orders"):
        run_flow(spark, BY_NAME[name], dataclasses.replace(ctx, max_offsets_per_trigger=0, max_files_per_trigger=0))
    enrich_in_stream(spark, ctx, enriched, checkpoint)
    second = enriched_set(spark.read.format("delta").load(enriched))

    all_products = product_events + changes
    again = {(o["order_id"], line["product_id"], price_as_of(all_products, line["product_id"], instant(o["occurred_at"])))
             for o in backdated for line in o["lines"]}
    assert first <= second                                            # earlier enrichments are as they were
    assert spark.read.format("delta").load(enriched).count() == len(second)
    assert {(o, p, price) for o, p, price, _ in second - first} == again
    assert again == {(o["order_id"], line["product_id"], line["unit_price_cents"]) for o in backdated for line in o["lines"]}
    # A plain join with the latest version would have given the new price to every one of those lines.
    latest = {e["product_id"]: e["list_price_cents"] for e in changes}
    assert all(latest[p] != price for _, p, price in again)

    # Rebuild dim_products from the log: delete the table and its checkpoint, run its flow again, enrich again.
    dim_flow = BY_NAME["dim_products"]
    shutil.rmtree(PRODUCTS.dimension_table.path(ctx.lake_root))
    shutil.rmtree(Path(dim_flow.checkpoint(ctx)).parent.parent)
    rebuilt = run_flow(spark, dim_flow, ctx)
    assert rebuilt.batches > 1
    events = dimension_events(records, report, PRODUCTS.topic) + [
        (r.event, coords_of(sent, r.index)) for r in later[:len(changes)]]
    assert dim_rows(spark, ctx, PRODUCTS) == expected_versions(events, "product_id", PRODUCTS.dimension.attributes)
    silver_orders = spark.read.format("delta").load(ORDERS.silver_table.path(ctx.lake_root))
    dim = spark.read.format("delta").load(PRODUCTS.dimension_table.path(ctx.lake_root))
    replayed = enrich_as_of(lines_of(spark, silver_orders), dim, key="product_id", event_time="occurred_at",
                            attributes=ATTRIBUTES)
    assert enriched_set(replayed) == second
