"""The steps of stateful gold flows: how one batch's on-time rows are merged into a table under the watermark.

Each step is called by `EventTimeWriter` (streaming/gold_batches.py) with the rows the watermark let
through and returns the rows it changed. Steps only read the part of their table (or state) that the
batch can touch, and keep their results exact whatever the micro-batch boundaries are.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.streaming.context import timestamp_literal
from lakehouse.streaming.gold_batches import Step, StepFunction
from lakehouse.pipelines.shop.transforms import to_activity_intervals, to_order_velocity, to_sessions
from lakehouse.streaming.lake_files import has_delta_log


def _near(table: DataFrame, at: Step, *, start: str, end: str, reach_micros: int) -> DataFrame:
    """The target's rows whose [start, end] comes within `reach` of the batch's event-time range.

    The per-customer conditions below imply it; as literals Delta skips every other file of the table
    (file statistics), so a batch reads the part of its table near its own events, not the whole table.
    """
    if at.event_range is None or None in at.event_range:
        return table
    lo, hi = at.event_range
    return table.where((F.col(end) >= F.expr(timestamp_literal(lo - reach_micros)))
                       & (F.col(start) <= F.expr(timestamp_literal(hi + reach_micros))))


def _bounds(rows: DataFrame, time: str) -> DataFrame:
    """Per customer, the earliest and latest event time in the batch, in micros."""
    return rows.groupBy("customer_id").agg(
        F.min(F.unix_micros(time)).alias("_lo"), F.max(F.unix_micros(time)).alias("_hi"))


def sliding_counts(*, window_micros: int, threshold: int) -> StepFunction:
    """Sliding per-event window: new orders get their count, and later orders of the same customer are recounted."""

    def step(orders: DataFrame, at: Step) -> int:
        new = orders.select("order_id", "customer_id", F.col("occurred_at").alias("ordered_at"), "event_id")
        table = at.read_target()
        if table is None:
            return at.merge(to_order_velocity(new, window_micros=window_micros, threshold=threshold),
                            keys=("order_id",), closes_batch=True)
        # Orders whose look-back a new order falls into, and those that fall into a new order's look-back.
        bounds = F.broadcast(_bounds(new, "ordered_at"))
        t = F.unix_micros("ordered_at")
        known = (
            _near(table, at, start="ordered_at", end="ordered_at", reach_micros=window_micros)
            .join(bounds, "customer_id")
            .where((t >= F.col("_lo") - window_micros) & (t <= F.col("_hi") + window_micros))
            .select("order_id", "customer_id", "ordered_at", "event_id")
        )
        scope = new.unionByName(known.join(new.select("order_id"), "order_id", "left_anti"))
        counted = to_order_velocity(scope, window_micros=window_micros, threshold=threshold)
        # Orders before the batch's earliest one keep their count: nothing new is before them.
        changed = counted.join(bounds.select("customer_id", "_lo"), "customer_id") \
            .where(t >= F.col("_lo")).drop("_lo")
        return at.merge(changed, keys=("order_id",), closes_batch=True)

    return step


def session_windows(*, gap_micros: int) -> StepFunction:
    """Session windows: new activity merged with the sessions it touches; sessions the watermark passed are closed."""

    def step(activity: DataFrame, at: Step) -> int:
        events = to_activity_intervals(activity)
        table = at.read_target()
        touched = None
        if table is not None:
            bounds = F.broadcast(_bounds(events, "session_start"))
            touched = (
                _near(table, at, start="session_start", end="session_end", reach_micros=gap_micros)
                .join(bounds, "customer_id")
                .where((F.unix_micros("session_end") >= F.col("_lo") - gap_micros)
                       & (F.unix_micros("session_start") <= F.col("_hi") + gap_micros))
                .select("customer_id", "session_start", "session_end", "page_views", "orders")
            )
            events = events.unionByName(touched)
        merged = to_sessions(events, gap_micros=gap_micros).select(
            "customer_id", "session_start", "session_end", "page_views", "orders",
            (F.col("orders") > 0).alias("ended_in_order"),
            (F.unix_micros("session_end") + gap_micros <= F.lit(at.watermark_after)).alias("closed"),
            F.lit(False).alias("_delete"),
        )
        if touched is not None:
            # A touched session that now starts elsewhere (it merged) is replaced: delete its old row.
            gone = touched.select("customer_id", "session_start").join(
                merged.select("customer_id", "session_start"), ["customer_id", "session_start"], "left_anti")
            merged = merged.unionByName(gone, allowMissingColumns=True).fillna({"_delete": True})
        written = at.merge(merged, keys=("customer_id", "session_start"), delete_flag="_delete")
        # Sessions the watermark has passed can no longer grow: an on-time event is at least a gap after them.
        at.update(f"NOT closed AND unix_micros(session_end) + {gap_micros} <= {at.watermark_after}",
                  {"closed": "true"})
        return written

    return step


JOIN_STATE = "buffered"


def interval_join(*, within_micros: int) -> StepFunction:
    """Stream-stream full outer join of orders and payments, a payment counting within `within` after its order.

    Both sides wait in one state table until the watermark guarantees no on-time row can still match
    them: an order once `ordered_at + within` is behind the watermark (emitted as unpaid if it never
    matched), a payment once `paid_at` is (emitted without an order if it never matched).
    """

    def step(events: DataFrame, at: Step) -> int:
        new = events.select(
            "side", "order_id", "customer_id", "total_cents", "currency", "payment_id", "amount_cents", "status",
            "occurred_at", "event_id", F.lit(False).alias("matched"), F.lit(True).alias("_new"),
        )
        state = at.read_state(JOIN_STATE)
        rows = new
        if state is not None:
            # A replayed batch finds its own rows buffered already: keep the new copy.
            buffered = state.join(new.select("event_id"), "event_id", "left_anti").withColumn("_new", F.lit(False))
            rows = new.unionByName(buffered)
        rows = rows.localCheckpoint()  # the state is rewritten below: cut the lineage to its old files
        orders = rows.where(F.col("side") == "order").alias("o")
        payments = rows.where(F.col("side") == "payment").alias("p")
        pairs = orders.join(
            payments,
            (F.col("o.order_id") == F.col("p.order_id"))
            & (F.col("p.occurred_at") >= F.col("o.occurred_at"))
            & (F.unix_micros("p.occurred_at") <= F.unix_micros("o.occurred_at") + within_micros),
        )
        # Pairs of two buffered rows were emitted by an earlier batch.
        fresh = pairs.where(F.col("o._new") | F.col("p._new"))
        matched_rows = fresh.select(*_joined(F.col("o.order_id"), "o", "p"), F.lit("matched").alias("outcome"))
        matched_ids = pairs.select(F.col("o.event_id").alias("event_id")).union(pairs.select("p.event_id")).distinct()

        rows = rows.join(matched_ids.withColumn("_m", F.lit(True)), "event_id", "left").select(
            *[c for c in rows.columns if c not in ("matched", "_new")],
            (F.col("matched") | F.coalesce("_m", F.lit(False))).alias("matched"))
        w = F.lit(at.watermark_after)
        t = F.unix_micros("occurred_at")
        expired = ((F.col("side") == "order") & (t + within_micros < w)) | ((F.col("side") == "payment") & (t < w))
        rows = rows.localCheckpoint()
        unmatched = rows.where(expired & ~F.col("matched"))
        unpaid = unmatched.where(F.col("side") == "order").alias("o")
        orphans = unmatched.where(F.col("side") == "payment").alias("p")
        out = matched_rows.unionByName(
            unpaid.select(*_joined(F.col("o.order_id"), "o", None), F.lit("unpaid").alias("outcome"))
        ).unionByName(
            orphans.select(*_joined(F.col("p.order_id"), None, "p"), F.lit("payment_without_order").alias("outcome"))
        )
        written = at.merge(out, keys=("order_id", "payment_id"))
        at.save_state(rows.where(~expired), JOIN_STATE)
        return written

    return step


def _joined(order_id, o: str | None, p: str | None) -> list:
    """The columns of one joined row from an order alias `o` and a payment alias `p` (either may be absent)."""
    def col(alias: str | None, name: str, dtype: str):
        return F.col(f"{alias}.{name}") if alias else F.lit(None).cast(dtype)
    return [
        order_id.alias("order_id"),
        F.coalesce(col(o, "customer_id", "string"), col(p, "customer_id", "string")).alias("customer_id"),
        col(o, "occurred_at", "timestamp").alias("ordered_at"),
        col(o, "total_cents", "long").alias("total_cents"),
        F.coalesce(col(o, "currency", "string"), col(p, "currency", "string")).alias("currency"),
        col(p, "payment_id", "string").alias("payment_id"),
        col(p, "occurred_at", "timestamp").alias("paid_at"),
        col(p, "amount_cents", "long").alias("amount_cents"),
        col(p, "status", "string").alias("payment_status"),
    ]


def join_state_rows(spark: SparkSession, state_root: str) -> int:
    """Rows the join keeps buffered: bounded by the watermark, shown in the asset's metadata."""
    path = f"{state_root}/{JOIN_STATE}"
    return spark.read.format("delta").load(path).count() if has_delta_log(spark, path) else 0
