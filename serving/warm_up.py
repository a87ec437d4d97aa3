"""`lakehouse serve`'s warm-up of the run path: a few hundred orders through silver, gold and a backfill on a scratch lake.

A session's first run of a flow is much slower than the next (Spark compiles its code, Delta and Great
Expectations load theirs): on a quiet 2-core machine the first one-day gold backfill sent to a fresh
endpoint took 18.7 s against 7.5 s for later ones (9.2 s after this warm-up; bench.interactive), and
beside a CI the first materialization from the UI took over a minute. So once the endpoint answers, it runs the same code once where no one looks: orders written as
bronze rows (no broker needed), caught up into silver and a stateful gold table, and that gold table
backfilled with its verdict. It holds the run lock meanwhile, so a step sent during the warm-up waits
for it instead of competing for the cores; queries do not wait. The scratch lake is deleted afterwards.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession

from lakehouse.infra.settings import Settings
from lakehouse.schemas.tables import QUALITY_RESULTS
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.lake_files import delete_tree

log = logging.getLogger("lakehouse")

EVENTS = 300        # enough for a few windows; small enough to take seconds once warm
KAFKA_ROW = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
             "partition int, offset long, timestamp timestamp, timestampType int")


def scratch_root(settings: Settings) -> str:
    """Beside the state folder's other work, never under the lake root the endpoint serves."""
    return f"{settings.home.rstrip('/')}/serve-warm-up"


def warm_up_runs(spark: SparkSession, settings: Settings, lock: threading.Lock) -> float | None:
    """Run the warm-up under `lock`, saying so in the log; its seconds, or None when it failed (the endpoint serves anyway)."""
    from lakehouse.batch.backfill import backfill_flow
    from lakehouse.quality.gate import Gate
    from lakehouse.schemas.pipeline import active_pipeline
    from lakehouse.streaming.flows import FLOWS
    from lakehouse.streaming.runner import run_flow
    from lakehouse.streaming.transforms.bronze import to_bronze

    root = scratch_root(settings)
    with lock:
        log.info("warming up the run path on a scratch lake (%s); a run step sent meanwhile waits for it", root)
        started = time.monotonic()
        try:
            delete_tree(spark, root)   # what a warm-up cut off by a kill left
            sent = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)
            # The pipeline's first gold flow that reads one silver table, and that table's silver flow.
            by_target = {f.target.name: f for f in FLOWS}
            gold = next(f for f in FLOWS if f.target.layer == "gold" and len(f.sources) == 1 and not f.lookups
                        and f.sources[0].name in by_target)
            silver = by_target[gold.sources[0].name]
            SILVER, GOLD = silver.name, gold.name
            flows = {SILVER: silver, GOLD: gold}
            topic = silver.schema.name if silver.schema is not None else ""
            demo = active_pipeline().demo
            events = demo.events(seed=7, start=sent) if demo is not None else iter(())
            records = [r for r in itertools.islice(events, EVENTS * 20) if r.topic == topic][:EVENTS]
            rows = [(r.key, r.encode(sent), list(r.headers), r.topic, 0, n, sent + timedelta(milliseconds=n), 0)
                    for n, r in enumerate(records)]
            ctx = FlowContext(lake_root=root, kafka_bootstrap="unused:9092",
                              quality=Gate(QUALITY_RESULTS.path(root), None) if settings.quality else None)
            bronze = flows[SILVER].sources[0].path(root)
            to_bronze(spark.createDataFrame(rows, KAFKA_ROW)).write.format("delta").save(bronze)
            for name in (SILVER, GOLD):
                run_flow(spark, flows[name], ctx)
            day = sent.date()
            backfill_flow(spark, flows[GOLD], ctx, (day, day), run_id="serve-warm-up", catch_up=False, verify=True)
        except Exception as exc:  # noqa: BLE001 - a warm-up that fails costs the first run its speed, nothing else
            log.warning("lakehouse serve: the warm-up of the run path failed (%s); the first run will be slower",
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return None
        finally:
            try:
                delete_tree(spark, root)
            except Exception:  # noqa: BLE001 - left for the next start to delete
                log.warning("lakehouse serve: could not delete the warm-up's scratch lake %s", root)
        seconds = time.monotonic() - started
        log.info("warmed up the run path in %.1f s", seconds)   # before a waiting step takes the lock
        return seconds
