"""Silver: parse bronze once against its schema; typed events, each with a reason code when it is not valid."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from lakehouse.schemas import reasons
from lakehouse.schemas.events import EventSchema

LINEAGE = ("topic", "partition", "offset", "appended_at", "ingested_at")
_SEAL_KEY = "__silver_seal__"
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


def _path(name: str) -> str:
    return f"$['{name}']"


def _absent(v: Column, kind: Column | None = None) -> Column:
    """A field that is missing (SQL null) or JSON null; `kind` is its `schema_of_variant` when already computed."""
    return v.isNull() | ((F.schema_of_variant(v) if kind is None else kind) == "VOID")


def _exact_kind(dtype: DataType) -> str | None:
    """The one `schema_of_variant` a value of exactly this type has, when there is one (e.g. not for doubles).

    `schema_of_variant` merges an array's elements, and any element that differs (another type, an extra
    field) changes the merged kind, so an array whose kind is this one has the declared type throughout.
    """
    if isinstance(dtype, StringType):
        return "STRING"
    if isinstance(dtype, _INTEGERS):
        return "BIGINT"
    if isinstance(dtype, BooleanType):
        return "BOOLEAN"
    if isinstance(dtype, ArrayType):
        inner = _exact_kind(dtype.elementType)
        return None if inner is None else f"ARRAY<{inner}>"
    if isinstance(dtype, StructType) and dtype.fields:
        inner = [(f.name, _exact_kind(f.dataType)) for f in sorted(dtype.fields, key=lambda f: f.name)]
        if any(k is None for _, k in inner):
            return None
        return "OBJECT<" + ", ".join(f"{name}: {k}" for name, k in inner) + ">"
    return None


def _type_ok(v: Column, dtype: DataType, kind: Column | None = None) -> Column:
    """True when the JSON value has the declared type (or is absent); numbers are never strings and vice versa."""
    kind = F.schema_of_variant(v) if kind is None else kind
    if isinstance(dtype, StringType):
        ok = kind == "STRING"
    elif isinstance(dtype, _INTEGERS):
        # A JSON integer too large for a long parses as DECIMAL(p,0): right type, out of range.
        ok = (kind == "BIGINT") | kind.rlike(r"^DECIMAL\(\d+,0\)$")
    elif isinstance(dtype, (DoubleType, FloatType)):
        ok = (kind == "BIGINT") | (kind == "DOUBLE") | kind.startswith("DECIMAL(")
    elif isinstance(dtype, BooleanType):
        ok = kind == "BOOLEAN"
    elif isinstance(dtype, ArrayType):
        elements = F.try_variant_get(v, "$", "array<variant>")
        ok = kind.startswith("ARRAY<") & F.forall(elements, lambda e: _type_ok(e, dtype.elementType))
        exact = _exact_kind(dtype)
        if exact is not None:
            # Element by element only when the merged kind is not the exact one: the lambda is
            # interpreted, value by value, and was a sixth of silver's parse.
            ok = (kind == exact) | ok
    elif isinstance(dtype, StructType):
        ok = kind.startswith("OBJECT<")
        for f in dtype.fields:
            ok = ok & _type_ok(F.try_variant_get(v, _path(f.name), "variant"), f.dataType)
    else:  # a declared type this parser does not know: let the typed extraction decide
        ok = F.lit(True)
    return F.coalesce(_absent(v, kind) | ok, F.lit(False))


def _range_ok(v: Column, dtype: DataType, kind: Column | None = None, *, narrow_only: bool = False) -> Column:
    """True when every number in the (type-checked) value fits its declared type.

    `narrow_only` checks only the integers narrower than a long: for a value of its exact kind, a long
    always fits (the kind would be a DECIMAL otherwise).
    """
    if isinstance(dtype, _INTEGERS):
        if narrow_only and isinstance(dtype, LongType):
            return F.lit(True)
        ok = F.try_variant_get(v, "$", dtype.simpleString()).isNotNull()
    elif isinstance(dtype, ArrayType):
        if narrow_only and not _has_narrow(dtype):
            return F.lit(True)
        elements = F.try_variant_get(v, "$", "array<variant>")
        ok = F.forall(elements, lambda e: _range_ok(e, dtype.elementType, narrow_only=narrow_only))
        exact = _exact_kind(dtype)
        if exact is not None and kind is not None and not narrow_only:
            ok = F.when(kind == exact, _range_ok(v, dtype, kind, narrow_only=True)).otherwise(ok)
    elif isinstance(dtype, StructType):
        ok = F.lit(True)
        for f in dtype.fields:
            if narrow_only and not _has_narrow(f.dataType):
                continue
            ok = ok & _range_ok(F.try_variant_get(v, _path(f.name), "variant"), f.dataType, narrow_only=narrow_only)
    else:
        return F.lit(True)
    return F.coalesce(_absent(v, kind) | ok, F.lit(False))


def _has_narrow(dtype: DataType) -> bool:
    """Whether the type holds an integer narrower than a long anywhere."""
    if isinstance(dtype, ArrayType):
        return _has_narrow(dtype.elementType)
    if isinstance(dtype, StructType):
        return any(_has_narrow(f.dataType) for f in dtype.fields)
    return isinstance(dtype, _INTEGERS) and not isinstance(dtype, LongType)


def _sealed_within(text: Column, seal: Column) -> Column:
    """True when `text` is one JSON array or object and nothing follows it: sealed inside its own brackets.

    Sealing there adds no level of nesting; the seal comes last in the parsed document only when the
    document's closing bracket is the last byte (JSON whitespace aside).
    """
    body = F.regexp_replace(text, r"[ \t\r\n]+$", "")
    head, last = F.left(body, F.length(body) - 1), F.right(body, F.lit(1))
    as_array = F.try_parse_json(F.concat(head, F.lit(","), seal.cast("string"), F.lit("]")))
    as_object = F.try_parse_json(F.concat(head, F.lit(f',"{_SEAL_KEY}":'), seal.cast("string"), F.lit("}")))
    last_element = F.element_at(F.try_variant_get(as_array, "$", "array<variant>"), -1)
    return F.coalesce(
        F.when(last == "]", F.try_variant_get(last_element, "$", "bigint") == seal)
        .when(last == "}", F.try_variant_get(as_object, _path(_SEAL_KEY), "bigint") == seal),
        F.lit(False),
    )


def _as_variants(payload: StructType) -> str:
    """A struct type with the payload's field names, each a variant: what an object's fields are cast to."""
    return "struct<" + ",".join(f"`{f.name.replace('`', '``')}`:variant" for f in payload.fields) + ">"


def _first(checks: list[tuple[str, Column]]) -> Column:
    """The name of the first check whose condition holds, else null."""
    return F.coalesce(*[F.when(cond, F.lit(name)) for name, cond in checks]) if checks else F.lit(None)


def parse_events(
    bronze: DataFrame, *, schema: EventSchema, event_time_floor: str, max_event_time_ahead: str
) -> DataFrame:
    """Bronze rows with the payload as typed columns plus `reason`/`detail` (both null when the event is valid)."""
    text = F.col("value").cast("string")
    # Spark's JSON parsers stop after the first document and ignore what follows. Parsing the value as
    # the first element of an array sealed with a hash of its own bytes makes any trailing bytes, or a
    # second document, visible: the seal is then missing, misplaced or not last.
    seal = F.xxhash64("value")
    sealed = F.try_parse_json(F.concat(F.lit("["), text, F.lit(","), seal.cast("string"), F.lit("]")))
    stage = bronze.select(
        *bronze.columns,
        F.is_valid_utf8("value").alias("_utf8"),
        sealed.alias("_sealed"),
        seal.alias("_seal"),
    )
    # The seal's array adds a level of nesting: a document as deeply nested as the parser allows (1000
    # levels) parses alone but not sealed. It is one document ("deep") if it seals inside its own brackets.
    stage = stage.select("*", F.when(F.col("_sealed").isNull(), F.try_parse_json(text)).alias("_plain"))
    stage = stage.select("*", F.coalesce(F.col("_plain").isNotNull() & _sealed_within(text, F.col("_seal")),
                                         F.lit(False)).alias("_deep"))
    doc = (F.when(F.col("_sealed").isNotNull(), F.try_variant_get("_sealed", "$[0]", "variant"))
           .when(F.col("_deep"), F.col("_plain")))
    stage = stage.select(
        *bronze.columns,
        "_utf8",
        (F.col("_sealed").isNotNull() | F.col("_deep")).alias("_parsed"),
        (F.coalesce(
            (F.try_variant_get("_sealed", "$[1]", "bigint") == F.col("_seal"))
            & F.try_variant_get("_sealed", "$[2]", "variant").isNull(),
            F.lit(False),
        ) | F.col("_deep")).alias("_single"),
        # The declared fields, in one pass over the document's (null when it is not an object): a lookup
        # per field reads the object's keys again each time, as new Java strings.
        F.try_variant_get(doc, "$", _as_variants(schema.payload)).alias("_fields"),
    )
    stage = stage.select(
        *[c for c in stage.columns if c != "_fields"],
        F.col("_fields").isNotNull().alias("_object"),
        *[F.col("_fields")[f.name].alias(f"_v_{f.name}") for f in schema.payload.fields],
    )
    raw = {f.name: F.col(f"_v_{f.name}") for f in schema.payload.fields}
    typed = stage.select(
        "*",
        *[F.try_variant_get(raw[f.name], "$", f.dataType.simpleString()).alias(f.name) for f in schema.payload.fields],
        # Each field's JSON type, once: the absence, type and range checks below all read it.
        *[F.schema_of_variant(raw[f.name]).alias(f"_k_{f.name}") for f in schema.payload.fields],
    )
    ts_cols = [F.try_to_timestamp(F.col(ts)).alias(ts) for ts in schema.timestamps]
    typed = typed.select(*[c for c in typed.columns if c not in schema.timestamps], *ts_cols)

    kind = {f.name: F.col(f"_k_{f.name}") for f in schema.payload.fields}
    absent = {f.name: _absent(raw[f.name], kind[f.name]) for f in schema.payload.fields}
    floor = F.lit(event_time_floor).cast("timestamp")
    ceiling = F.col("appended_at") + F.expr(f"INTERVAL '{max_event_time_ahead}'")
    # A rule that cannot be evaluated (null) does not hold; its arithmetic is the non-throwing kind.
    found = {
        "_missing": _first([(name, absent[name]) for name in schema.required]),
        "_wrong_type": _first([(f.name, ~_type_ok(raw[f.name], f.dataType, kind[f.name]))
                               for f in schema.payload.fields]),
        "_out_of_range": _first([(f.name, ~_range_ok(raw[f.name], f.dataType, kind[f.name]))
                                 for f in schema.payload.fields]),
        "_bad_ts": _first([(ts, ~absent[ts] & F.col(ts).isNull()) for ts in schema.timestamps]),
        "_implausible": _first([(ts, (F.col(ts) < floor) | (F.col(ts) > ceiling)) for ts in schema.timestamps]),
        "_broken_rule": _first([(name, ~F.coalesce(F.expr(sql), F.lit(False))) for name, sql in schema.rules]),
    }
    # Every check is a column of its own, computed once per record: inside the CASE chains below Spark
    # does not share subexpressions between branches, and each check is both a condition and a detail
    # (over 500,000 orders the parse took 23 s with them inline, 16 s as columns).
    typed = typed.select("*", *[check.alias(name) for name, check in found.items()])
    missing, wrong_type, out_of_range, bad_ts, implausible, broken_rule = (F.col(name) for name in found)
    empty = F.col("value").isNull() | (F.length("value") == 0)
    # (reason, detail) in the order they are tested: the first that applies is the record's reason.
    checks = [
        (empty, reasons.EMPTY_VALUE, F.lit(None)),
        (~F.col("_utf8"), reasons.INVALID_ENCODING, F.lit(None)),
        (~F.col("_parsed") & F.try_parse_json(text).isNotNull(), reasons.TRAILING_DATA, F.lit(None)),
        (~F.col("_parsed"), reasons.MALFORMED_JSON, F.lit(None)),
        (~F.col("_single"), reasons.TRAILING_DATA, F.lit(None)),
        (~F.col("_object"), reasons.WRONG_TYPE, F.lit("$")),
        (missing.isNotNull(), reasons.MISSING_FIELD, missing),
        (wrong_type.isNotNull(), reasons.WRONG_TYPE, wrong_type),
        (out_of_range.isNotNull(), reasons.OUT_OF_RANGE, out_of_range),
        (bad_ts.isNotNull(), reasons.BAD_TIMESTAMP, bad_ts),
        (implausible.isNotNull(),
         F.when(implausible == schema.event_time, F.lit(reasons.IMPLAUSIBLE_EVENT_TIME))
         .otherwise(F.lit(reasons.IMPLAUSIBLE_TIMESTAMP)), implausible),
        (broken_rule.isNotNull(), reasons.CONTRACT_VIOLATION, broken_rule),
    ]
    codes = [(cond, code if isinstance(code, Column) else F.lit(code), why) for cond, code, why in checks]
    (cond, code, why), rest = codes[0], codes[1:]
    reason, detail = F.when(cond, code), F.when(cond, why)
    for cond, code, why in rest:
        reason, detail = reason.when(cond, code), detail.when(cond, why)
    helpers = ["_utf8", "_parsed", "_single", "_object", *found,
               *[f"_{p}_{f.name}" for p in ("v", "k") for f in schema.payload.fields]]
    return typed.select("*", reason.alias("reason"), detail.alias("detail")).drop(*helpers)


def to_silver(parsed: DataFrame, *, schema: EventSchema) -> DataFrame:
    """Valid events of a parsed batch: typed payload, event date, derived columns and Kafka lineage."""
    valid = parsed.where(F.col("reason").isNull()).select(
        *schema.fields,
        F.to_date(schema.event_time).alias("event_date"),
        *LINEAGE,
    )
    return valid.select("*", *[F.expr(sql).alias(name) for name, sql in schema.derived])


def to_quarantine(parsed: DataFrame, *, schema: EventSchema) -> DataFrame:
    """Records that failed parsing or their contract: reason code, detail, raw bytes and Kafka coordinates."""
    return parsed.where(F.col("reason").isNotNull()).select(
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


def to_late_arrivals(valid: DataFrame, *, flow: str, table: str, event_time: str, watermark_micros: int) -> DataFrame:
    """Valid events behind a flow's watermark: the flow and table that refused them, how late, where they are in Kafka."""
    return valid.select(
        F.lit(flow).alias("flow"),
        F.lit(table).alias("table"),
        "event_id",
        F.col(event_time).alias("event_time"),
        F.timestamp_micros(F.lit(watermark_micros)).alias("watermark"),
        ((F.lit(watermark_micros) - F.unix_micros(event_time)) / 1000).cast("long").alias("lateness_ms"),
        "topic",
        "partition",
        "offset",
        "appended_at",
        "ingested_at",
        F.current_timestamp().alias("recorded_at"),
    )
