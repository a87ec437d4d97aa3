"""Silver: parse bronze against its schema; valid events are typed and deduplicated, the rest quarantined."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas import reasons
from schemas.events import ORDERS_V1, PAGE_VIEWS_V1, EventSchema
from streaming.transforms.contracts import RULES

_LINEAGE = ("topic", "partition", "offset", "appended_at", "ingested_at")


def _first_failure(checks: list[tuple[str, Column]]) -> Column:
    """The name of the first check whose condition holds, else null."""
    return F.coalesce(*[F.when(failed, F.lit(name)) for name, failed in checks]) if checks else F.lit(None)


def parse_events(bronze: DataFrame, *, schema: EventSchema) -> DataFrame:
    """Bronze rows with the payload as typed columns plus `reason`/`detail` (both null when the event is valid)."""
    text = F.col("value").cast("string")
    raw_ts = {ts: f"_raw_{ts}" for ts in schema.timestamps}
    parsed = bronze.select(
        *bronze.columns,
        F.from_json(text, schema.payload).alias("_event"),
        F.is_valid_utf8(F.col("value")).alias("_utf8"),
        F.try_parse_json(text).isNotNull().alias("_json"),
    ).select(
        *bronze.columns,
        "_utf8",
        "_json",
        *[F.col(f"_event.{name}").alias(raw_ts.get(name, name)) for name in schema.fields],
    )
    typed = parsed.select(
        "*", *[F.try_to_timestamp(F.col(raw)).alias(ts) for ts, raw in raw_ts.items()]
    )
    missing = _first_failure([(name, F.col(raw_ts.get(name, name)).isNull()) for name in schema.required])
    bad_ts = _first_failure([(ts, F.col(raw).isNotNull() & F.col(ts).isNull()) for ts, raw in raw_ts.items()])
    broken_rule = _first_failure([(name, ~F.coalesce(holds, F.lit(False))) for name, holds in RULES[schema.name]()])
    reason = (
        F.when(~F.col("_utf8"), F.lit(reasons.INVALID_ENCODING))
        .when(~F.col("_json"), F.lit(reasons.MALFORMED_JSON))
        .when(missing.isNotNull(), F.lit(reasons.MISSING_FIELD))
        .when(bad_ts.isNotNull(), F.lit(reasons.BAD_TIMESTAMP))
        .when(broken_rule.isNotNull(), F.lit(reasons.CONTRACT_VIOLATION))
    )
    detail = (
        F.when(~F.col("_utf8") | ~F.col("_json"), F.lit(None))
        .when(missing.isNotNull(), missing)
        .when(bad_ts.isNotNull(), bad_ts)
        .otherwise(broken_rule)
    )
    return typed.select("*", reason.alias("reason"), detail.alias("detail")).drop(
        "_utf8", "_json", *raw_ts.values()
    )


def to_silver(bronze: DataFrame, *, schema: EventSchema, dedup_watermark: str) -> DataFrame:
    """Valid events with typed columns and lineage, deduplicated by event id within the watermark."""
    valid = parse_events(bronze, schema=schema).where(F.col("reason").isNull())
    typed = valid.select(
        *schema.fields,
        F.to_date(schema.event_time).alias("event_date"),
        *_LINEAGE,
    ).withWatermark(schema.event_time, dedup_watermark)
    # A bounded input is deduplicated whole; Spark offers the within-watermark form for streams only.
    if typed.isStreaming:
        return typed.dropDuplicatesWithinWatermark(["event_id"])
    return typed.dropDuplicates(["event_id"])


def to_quarantine(bronze: DataFrame, *, schema: EventSchema) -> DataFrame:
    """Records that failed parsing or their contract: reason code, detail, raw bytes and Kafka coordinates."""
    return parse_events(bronze, schema=schema).where(F.col("reason").isNotNull()).select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "appended_at",
        "ingested_at",
        F.lit(schema.name).alias("schema"),
        "reason",
        "detail",
        F.current_timestamp().alias("quarantined_at"),
    )


def to_silver_page_views(bronze: DataFrame, *, dedup_watermark: str) -> DataFrame:
    """Page views parsed against shop.page_views.v1, typed, deduplicated by event id."""
    return to_silver(bronze, schema=PAGE_VIEWS_V1, dedup_watermark=dedup_watermark)


def to_silver_orders(bronze: DataFrame, *, dedup_watermark: str) -> DataFrame:
    """Orders parsed against shop.orders.v1, typed, with item counts, deduplicated by event id."""
    silver = to_silver(bronze, schema=ORDERS_V1, dedup_watermark=dedup_watermark)
    return silver.withColumn("item_count", F.aggregate("lines", F.lit(0), lambda acc, line: acc + line["quantity"]))


def to_quarantine_page_views(bronze: DataFrame) -> DataFrame:
    """Page-view records that are not valid shop.page_views.v1 events."""
    return to_quarantine(bronze, schema=PAGE_VIEWS_V1)


def to_quarantine_orders(bronze: DataFrame) -> DataFrame:
    """Order records that are not valid shop.orders.v1 events."""
    return to_quarantine(bronze, schema=ORDERS_V1)
