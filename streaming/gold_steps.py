"""The per-batch steps of the sequence kinds: how one batch's on-time rows are merged into a table under the watermark.

Each step is called by `EventTimeWriter` (gold_batches.py) with the rows the watermark let through and
returns the rows it changed. Steps only read the part of their table (or state) that the batch can touch,
and keep their results exact whatever the micro-batch boundaries are.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.schemas.gold import IntervalJoin, Sessions, Sliding
from lakehouse.streaming.context import timestamp_literal
from lakehouse.streaming.gold_batches import Step, StepFunction
from lakehouse.streaming.lake_files import has_delta_log
from lakehouse.streaming.transforms.sequences import (
    LEFT, RIGHT, SESSION_END, SESSION_START, SIDE, joined, merge_sessions, session_intervals, sliding_count,
)


def _near(table: DataFrame, at: Step, *, start: str, end: str, reach_micros: int) -> DataFrame:
    """The target's rows whose [start, end] comes within `reach` of the batch's event-time range.

    The per-key conditions below imply it; as literals Delta skips every other file of the table (file
    statistics), so a batch reads the part of its table near its own events, not the whole table.
    """
    if at.event_range is None or None in at.event_range:
        return table
    lo, hi = at.event_range
    return table.where((F.col(end) >= F.expr(timestamp_literal(lo - reach_micros)))
                       & (F.col(start) <= F.expr(timestamp_literal(hi + reach_micros))))


def _bounds(rows: DataFrame, by: Sequence[str], time: str) -> DataFrame:
    """Per `by`, the earliest and latest time in the batch, in micros."""
    return rows.groupBy(*by).agg(F.min(F.unix_micros(time)).alias("_lo"), F.max(F.unix_micros(time)).alias("_hi"))


def sliding_step(kind: Sliding, keys: tuple[str, ...], *, window_micros: int, threshold: int | None) -> StepFunction:
    """New rows get their count, and earlier rows of the same `by` whose look-back a new row falls into are recounted."""
    by, time = list(kind.by), kind.time

    def counted(rows: DataFrame) -> DataFrame:
        return sliding_count(rows, by=by, time=time, window_micros=window_micros, count=kind.count,
                             flag=kind.flag if threshold is not None else None, threshold=threshold)

    def step(new: DataFrame, at: Step) -> int:
        table = at.read_target()
        if table is None:
            return at.merge(counted(new), keys=keys, closes_batch=True)
        # Rows whose look-back a new row falls into, and those that fall into a new row's look-back.
        bounds = F.broadcast(_bounds(new, by, time))
        t = F.unix_micros(time)
        known = (
            _near(table, at, start=time, end=time, reach_micros=window_micros)
            .join(bounds, by)
            .where((t >= F.col("_lo") - window_micros) & (t <= F.col("_hi") + window_micros))
            .select(*new.columns)
        )
        scope = new.unionByName(known.join(new.select(*keys), list(keys), "left_anti"))
        # Rows before the batch's earliest one of their `by` keep their count: nothing new is before them.
        changed = counted(scope).join(bounds.select(*by, "_lo"), by).where(t >= F.col("_lo")).drop("_lo")
        return at.merge(changed, keys=keys, closes_batch=True)

    return step


def sessions_step(kind: Sessions, *, gap_micros: int) -> StepFunction:
    """New rows merged with the sessions they touch; sessions the watermark passed are closed."""
    by, counts = list(kind.by), list(kind.counts)
    session = [*by, SESSION_START, SESSION_END, *counts]

    def step(rows: DataFrame, at: Step) -> int:
        events = session_intervals(rows, by=by, time=kind.time, counts=kind.counts)
        table = at.read_target()
        touched = None
        if table is not None:
            bounds = F.broadcast(_bounds(events, by, SESSION_START))
            touched = (
                _near(table, at, start=SESSION_START, end=SESSION_END, reach_micros=gap_micros)
                .join(bounds, by)
                .where((F.unix_micros(SESSION_END) >= F.col("_lo") - gap_micros)
                       & (F.unix_micros(SESSION_START) <= F.col("_hi") + gap_micros))
                .select(*session)
            )
            events = events.unionByName(touched)
        merged = merge_sessions(events, by=by, gap_micros=gap_micros, counts=counts).select(
            *session, *[F.expr(sql).alias(name) for name, sql in kind.then.items()],
            (F.unix_micros(SESSION_END) + gap_micros <= F.lit(at.watermark_after)).alias("closed"),
            F.lit(False).alias("_delete"),
        )
        keys = (*by, SESSION_START)
        if touched is not None:
            # A touched session that now starts elsewhere (it merged) is replaced: delete its old row.
            gone = touched.select(*keys).join(merged.select(*keys), list(keys), "left_anti")
            merged = merged.unionByName(gone, allowMissingColumns=True).fillna({"_delete": True})
        written = at.merge(merged, keys=keys, delete_flag="_delete")
        # Sessions the watermark has passed can no longer grow: an on-time event is at least a gap after them.
        at.update(f"NOT closed AND unix_micros({SESSION_END}) + {gap_micros} <= {at.watermark_after}",
                  {"closed": "true"})
        return written

    return step


JOIN_STATE = "buffered"


def interval_join_step(kind: IntervalJoin, keys: tuple[str, ...], *, within_micros: int) -> StepFunction:
    """Both sides wait in one state table until the watermark guarantees no on-time row can still match them.

    A left row leaves once its time + `within` is behind the watermark (emitted unmatched if it never
    matched), a right row once its time is (likewise).
    """
    on = [f"_on_{k}" for k in kind.on]
    both, left_only, right_only = kind.outcomes

    def step(events: DataFrame, at: Step) -> int:
        new = events.withColumn("matched", F.lit(False)).withColumn("_new", F.lit(True))
        state = at.read_state(JOIN_STATE)
        rows = new
        if state is not None:
            # A replayed batch finds its own rows buffered already: keep the new copy.
            buffered = state.join(new.select("event_id"), "event_id", "left_anti").withColumn("_new", F.lit(False))
            rows = new.unionByName(buffered)
        rows = rows.localCheckpoint()  # the state is rewritten below: cut the lineage to its old files
        lefts = rows.where(F.col(SIDE) == LEFT).alias("a")
        rights = rows.where(F.col(SIDE) == RIGHT).alias("b")
        condition = (F.col("b.occurred_at") >= F.col("a.occurred_at")) \
            & (F.unix_micros("b.occurred_at") <= F.unix_micros("a.occurred_at") + within_micros)
        for k in on:
            condition = condition & (F.col(f"a.{k}") == F.col(f"b.{k}"))
        pairs = lefts.join(rights, condition)
        # Pairs of two buffered rows were emitted by an earlier batch.
        fresh = pairs.where(F.col("a._new") | F.col("b._new"))
        out = joined(fresh.select(F.col(f"a.{LEFT}").alias(LEFT), F.col(f"b.{RIGHT}").alias(RIGHT)), kind.columns, both)
        matched_ids = pairs.select(F.col("a.event_id").alias("event_id")).union(pairs.select("b.event_id")).distinct()

        rows = rows.join(matched_ids.withColumn("_m", F.lit(True)), "event_id", "left").select(
            *[c for c in rows.columns if c not in ("matched", "_new")],
            (F.col("matched") | F.coalesce("_m", F.lit(False))).alias("matched"))
        w = F.lit(at.watermark_after)
        t = F.unix_micros("occurred_at")
        expired = ((F.col(SIDE) == LEFT) & (t + within_micros < w)) | ((F.col(SIDE) == RIGHT) & (t < w))
        rows = rows.localCheckpoint()
        unmatched = rows.where(expired & ~F.col("matched"))
        out = out.unionByName(joined(unmatched.where(F.col(SIDE) == LEFT), kind.columns, left_only)) \
            .unionByName(joined(unmatched.where(F.col(SIDE) == RIGHT), kind.columns, right_only))
        written = at.merge(out, keys=keys)
        at.save_state(rows.where(~expired), JOIN_STATE)
        return written

    return step


def join_state_rows(spark: SparkSession, state_root: str) -> int:
    """Rows an interval join keeps buffered: bounded by the watermark, shown in the asset's metadata."""
    path = f"{state_root}/{JOIN_STATE}"
    return spark.read.format("delta").load(path).count() if has_delta_log(spark, path) else 0
