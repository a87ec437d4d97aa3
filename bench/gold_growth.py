"""Bench: one small silver and gold batch's seconds when the lake holds hours of history against when it holds little.

A stream's silver and gold flows run one micro-batch per trigger, all day. If a batch's work grows with
what the lake already holds (a MERGE that reads every file of its table, a recomputation that reads
every silver row of the day, a duplicate check against the whole day's ids), a stream slows down as the
day goes on, at any rate. This bench builds two lakes the way a stream does, one commit per hour of
event time: silver_orders and the gold tables fed from it, `--small-hours` of history in one and
`--hours` in the other. Then, in rotating rounds, it times the same one-minute batch of new orders
through silver_orders' writer (from their Kafka records) and each gold flow's writer (the functions a
stream's foreachBatch calls) on both lakes. The figure is the ratio large/small per flow: 1.0 means a
batch costs the same at the end of the day as at its start.

Orders are the generator's (streaming.generator, seed 7), parsed by the silver flow once and shifted by
whole hours for each hour of history (ids suffixed, so that no two hours share an id).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from datetime import datetime, timedelta, timezone

from bench import harness
from bench.harness import say
from lakehouse.pipelines import shop

NAME = "gold_growth"
FLOWS = ("silver_orders", "gold_revenue_per_minute", "gold_order_velocity", "gold_processing_delay")
GOLD = FLOWS[1:]
KAFKA_ROWS = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
              "partition int, offset long, timestamp timestamp, timestampType int")
T0 = datetime(2026, 11, 2, 0, 0, tzinfo=timezone.utc)


def template_orders(spark, ctx, orders_per_hour: int):
    """One hour of silver orders (the silver flow's own output), event times spread evenly over the hour.

    Returns them with the hour's first minute as records with their times, for `bronze_rows`.
    """
    from pyspark.sql import functions as F

    from lakehouse.pipelines.shop import SILVER_ORDERS
    from lakehouse.streaming.flows import BY_NAME
    from lakehouse.pipelines.shop.generator import generate

    flow = BY_NAME["silver_orders"]
    records = [r for r in generate(orders_per_hour * 8, seed=harness.SEED)
               if r.topic == "shop.orders.v1" and r.kind == "valid"][:orders_per_hour]
    step = 3600.0 / len(records)
    timed = [(record, T0 + timedelta(seconds=i * step)) for i, record in enumerate(records)]
    scratch = dataclasses.replace(ctx, lake_root=f"{ctx.lake_root}-template")
    flow.batch_writer(scratch)(flow.apply(bronze_rows(spark, timed, hours=0, suffix=""), ctx=scratch), 0)
    out = spark.read.format("delta").load(SILVER_ORDERS.path(scratch.lake_root)).cache()
    out.count()
    return out, [(r, at) for r, at in timed if at < T0 + timedelta(minutes=1)]


def bronze_rows(spark, timed: list, *, hours: float, suffix: str, first_offset: int = 0):
    """Bronze rows of the records (each with its event time), moved `hours` later and their ids suffixed."""
    from lakehouse.pipelines.shop.generator import iso
    from lakehouse.streaming.transforms.bronze import to_bronze

    rows = []
    for i, (record, at) in enumerate(timed, start=first_offset):
        at = at + timedelta(hours=hours)
        event = {**record.event, "occurred_at": iso(at), "event_id": record.event["event_id"] + suffix,
                 "order_id": record.event["order_id"] + suffix}
        moved = dataclasses.replace(record, event=event)
        rows.append((moved.key, moved.encode(at), [("schema", record.topic.encode())], record.topic, 0, i, at, 0))
    return to_bronze(spark.createDataFrame(rows, KAFKA_ROWS))


def shifted(template, hours: float, suffix: str):
    """The template moved `hours` later in every timestamp, its ids suffixed, its offsets past the template's."""
    from pyspark.sql import functions as F

    micros = int(hours * 3600 * 1_000_000)
    out = template
    for column in ("occurred_at", "sent_at", "appended_at", "ingested_at"):
        out = out.withColumn(column, F.timestamp_micros(F.unix_micros(column) + F.lit(micros)))
    for column in ("event_id", "order_id"):
        out = out.withColumn(column, F.concat(column, F.lit(suffix)))
    return out.withColumn("event_date", F.to_date("occurred_at")).withColumn(
        "offset", F.col("offset") + F.lit(int(hours * 1000) * 1_000_000))


def feed(spark, ctx, writers: dict, batch, batch_id: int, bronze=None) -> dict[str, float]:
    """Append `batch` to silver_orders as a stream would, then run each gold flow's writer on it; seconds per flow.

    With `bronze` (the same orders as Kafka records), silver_orders' writer appends them, timed, instead.
    """
    from lakehouse.pipelines.shop import SILVER_ORDERS
    from lakehouse.streaming.flows import BY_NAME
    from lakehouse.pipelines.shop.transforms import to_delay_events

    seconds = {}
    if bronze is None:
        (batch.write.format("delta").mode("append").partitionBy(*SILVER_ORDERS.partition_by)
         .save(SILVER_ORDERS.path(ctx.lake_root)))
    else:
        parsed = BY_NAME["silver_orders"].apply(bronze, ctx=ctx)
        started = time.perf_counter()
        writers["silver_orders"](parsed, batch_id)
        seconds["silver_orders"] = time.perf_counter() - started
    for name in GOLD:
        flow = BY_NAME[name]
        rows = to_delay_events(batch) if name == "gold_processing_delay" else flow.apply(batch, ctx=ctx)
        started = time.perf_counter()
        writers[name](rows, batch_id)
        seconds[name] = time.perf_counter() - started
    return seconds


def build(spark, ctx, template, hours: int) -> dict:
    """A lake with `hours` of history, one commit per hour, and the writers that built it (as a stream keeps them)."""
    from lakehouse.streaming.flows import BY_NAME

    writers = {name: BY_NAME[name].batch_writer(ctx) for name in FLOWS}
    started = time.perf_counter()
    for hour in range(hours):
        feed(spark, ctx, writers, shifted(template, hour, f"-h{hour}"), hour)
    say(f"built {ctx.lake_root.rsplit('/', 1)[-1]}: {hours} hours of history in {time.perf_counter() - started:.0f} s")
    return writers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gold_growth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=24, help="hours of history in the large lake (default 24)")
    parser.add_argument("--small-hours", type=int, default=1, help="hours of history in the small lake (default 1)")
    parser.add_argument("--orders-per-hour", type=int, default=12_000, help="orders per hour of event time (default 12000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per lake (default 5)")
    harness.recording_options(parser, quick="2 and 4 hours, 3000 orders per hour, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.small_hours, args.hours, args.orders_per_hour, args.rounds = 2, 4, 3_000, 2
    if not 0 < args.small_hours < args.hours:
        parser.error(f"--small-hours ({args.small_hours}) must be above 0 and below --hours ({args.hours})")
    record = harness.keeps(args)
    harness.log_warnings()
    started_at = harness.utc_now()
    where = harness.machine()
    say(f"bench.gold_growth: {', '.join(FLOWS)}; {args.small_hours} h against {args.hours} h of history, "
        f"{args.orders_per_hour:,} orders per hour, {args.rounds} rounds; {where}")
    with harness.bench_home(NAME) as settings, harness.spark_session(settings, NAME) as (spark, _pid):
        from pyspark.sql import functions as F

        base = harness.project_context(settings, f"{settings.home}/lake-small")
        template, minute = template_orders(spark, base, args.orders_per_hour)
        lakes = {}
        for label, hours in (("small", args.small_hours), ("large", args.hours)):
            ctx = harness.project_context(settings, f"{settings.home}/lake-{label}")
            lakes[label] = (ctx, build(spark, ctx, template, hours), hours)
        times: dict[str, dict[str, list[float]]] = {label: {f: [] for f in FLOWS} for label in lakes}
        first_minute = template.where(F.col("occurred_at") < F.lit(T0 + timedelta(minutes=1)))
        for r in range(args.rounds + 1):   # round 0 warms both lakes up, untimed
            for label in harness.round_order(list(lakes), r):
                ctx, writers, hours = lakes[label]
                per_minute = first_minute.count()
                batch = shifted(first_minute, hours + r / 60, f"-new{r}")
                bronze = bronze_rows(spark, minute, hours=hours + r / 60, suffix=f"-new{r}",
                                     first_offset=(r + 1) * 1_000_000)
                seconds = feed(spark, ctx, writers, batch, hours + r, bronze)
                if r:
                    for name, s in seconds.items():
                        times[label][name].append(s)
                say(f"round {r}{' (warm-up)' if not r else ''}, {label}: " +
                    ", ".join(f"{n} {s:.2f} s" for n, s in seconds.items()))
    figures = {}
    for name in FLOWS:
        small, large = times["small"][name], times["large"][name]
        figures[name] = {"small_s": round(statistics.median(small), 3), "large_s": round(statistics.median(large), 3),
                         "large_over_small": round(harness.median_ratio(large, small), 3),
                         "small_runs_s": [round(x, 3) for x in small], "large_runs_s": [round(x, 3) for x in large]}
    for name, f in figures.items():
        say(f"{name}: {f['small_s']:.2f} s with {args.small_hours} h of history, {f['large_s']:.2f} s with "
            f"{args.hours} h: {f['large_over_small']:.2f}x")
    if record:
        result = {"bench": NAME, "date": started_at.isoformat(timespec="seconds"), "machine": where,
                  "load_end": harness.load_now(), "command": harness.command_line("bench.gold_growth", argv),
                  "orders_per_hour": args.orders_per_hour, "batch_orders": per_minute, "small_hours": args.small_hours,
                  "hours": args.hours, "rounds": args.rounds, "flows": figures}
        row = harness.docs_row(
            started_at.strftime("%Y-%m-%d %H:%M"), f"`{result['command']}`",
            f"silver_orders and three gold tables built one commit per hour of event time, {args.orders_per_hour:,} "
            f"orders per hour; then one batch of {per_minute:,} new orders (a minute) through silver_orders' writer "
            f"(from their Kafka records) and each gold flow's writer, "
            f"median of {args.rounds} rotating rounds after a warm-up; before = {args.small_hours} h of history, "
            f"after = {args.hours} h",
            "; ".join(f"{n} {f['small_s']:.2f} s" for n, f in figures.items()),
            "; ".join(f"{n} {f['large_s']:.2f} s" for n, f in figures.items()),
            "; ".join(f"{n} {f['large_over_small']:.2f}x" for n, f in figures.items())
            + " (large/small: 1.0 = a batch costs the same whatever the history)",
            f"{where}, {result['load_end']} at the end")
        harness.record(NAME, result, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
