"""A pipeline of another domain, from a package of its own, run end to end with no edit to the engine.

The engine is pointed at `tests/pipelines/warehouse_sensors` by LAKEHOUSE_PIPELINE alone. Readings are sent
to the real broker in waves (out of order, duplicated, some far behind the gold watermark), a device moves to
another zone between waves, and every flow catches up after each wave, so gold merges each batch into the windows earlier ones wrote.
Gold is compared with plain Python over the events sent: the declared average, minimum, maximum, counts and sum
per window, the zone as of each reading's time, and the hopping windows whose size is the pipeline's parameter.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lakehouse.schemas import tables, topics
from lakehouse.schemas.pipeline import active_pipeline
from lakehouse.streaming import flows
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.producer import produce

pytestmark = pytest.mark.integration

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
WAVES, WAVE = 2, timedelta(minutes=20)
DELAY = timedelta(minutes=10)
DEVICES = ("d-0", "d-1", "d-2", "d-3")
MOVED_AT = START + timedelta(minutes=30)        # d-1 moves from zone-a to zone-b


@pytest.fixture(scope="module")
def sensors(spark, broker, tmp_path_factory):
    """The engine, pointed at the sensors pipeline, after every wave caught up; what was sent, and the runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PIPELINES))
        mp.setenv("LAKEHOUSE_PIPELINE", "warehouse_sensors")
        pipeline = active_pipeline()
        assert pipeline.name == "warehouse_sensors"
        module = __import__("warehouse_sensors")
        ensure_topics(broker.kafka_bootstrap, topics.ALL)
        ctx = FlowContext(
            lake_root=str(tmp_path_factory.mktemp("sensors-lake")), kafka_bootstrap=broker.kafka_bootstrap,
            max_offsets_per_trigger=200, max_files_per_trigger=4, gold_watermark="10 minutes",
            silver_dedup_watermark="1 day", params=pipeline.param_values({}),
        )
        rng = random.Random(5)
        sent: list[dict] = []
        placements = [("d-0", "zone-a", START - timedelta(hours=1)), ("d-1", "zone-a", START - timedelta(hours=1)),
                      ("d-2", "zone-b", START - timedelta(hours=1)), ("d-1", "zone-b", MOVED_AT)]
        n = 0
        runs = defaultdict(list)
        for k in range(WAVES):
            records = []
            for device, zone, at in placements:   # the changelog, resent each wave as a compacted topic would be
                records.append(module.Record(n, module.DEVICES.topic, device.encode(), {
                    "event_id": f"place-{device}-{at:%H%M}", "device_id": device, "zone": zone,
                    "occurred_at": at.isoformat()}))
                n += 1
            base = START + k * WAVE
            wave = []
            for _ in range(70):
                at = base + timedelta(seconds=rng.uniform(0, WAVE.total_seconds()))
                roll = rng.random()
                if k and roll < 0.25:
                    at -= timedelta(minutes=rng.uniform(12, 30))      # behind the watermark when it arrives
                elif roll < 0.4:
                    at -= timedelta(minutes=rng.uniform(0.5, 5))      # out of order, within it
                humidity = None if rng.random() < 0.1 else rng.randint(20, 90)
                event = {"event_id": f"r-{n}", "device_id": rng.choice(DEVICES), "occurred_at": at.isoformat(),
                         "celsius": round(rng.uniform(-5, 40), 1), "humidity_pct": humidity}
                wave.append(module.Record(n, module.READINGS.topic, event["device_id"].encode(), event))
                n += 1
            wave += rng.sample(wave, 5)                                  # a producer's retries
            rng.shuffle(wave)
            sent += [r.event for r in wave]
            report = produce(records + wave, bootstrap=broker.kafka_bootstrap)
            assert report.delivered == len(records) + len(wave)
            for outcome in run_flows(spark, list(flows.FLOWS), ctx, parallel=3):
                assert outcome.error is None, (outcome.flow.name, outcome.error)
                runs[outcome.flow.name].append(outcome.run)
        yield ctx, sent, placements, runs


def ts(event: dict) -> datetime:
    return datetime.fromisoformat(event["occurred_at"])


def naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def unique(sent: list[dict]) -> dict[str, dict]:
    return {e["event_id"]: e for e in sent}


def read(spark, ctx, name):
    return spark.read.format("delta").load(tables.BY_NAME[name].path(ctx.lake_root))


def late_ids(spark, ctx, flow) -> set[str]:
    late = read(spark, ctx, "late_arrivals").where(F.col("flow") == flow).select("event_id").collect()
    return {r.event_id for r in late}


def zone_at(placements, device: str, at: datetime) -> str:
    found = [(t, zone) for d, zone, t in placements if d == device and t <= at]
    return max(found)[1] if found else "unplaced"


def test_the_engine_runs_the_pipeline_it_is_pointed_at(sensors):
    """Its own topics, tables and flows, none of the shop's; gold read a batch per wave, and some rows came late."""
    ctx, _, _, runs = sensors
    assert {f.name for f in flows.FLOWS} >= {"bronze_readings", "silver_readings", "dim_devices",
                                             "gold_zone_climate_per_minute", "gold_readings_placed"}
    assert not any("orders" in f.name for f in flows.FLOWS)
    climate = runs["gold_zone_climate_per_minute"]
    assert sum(r.batches for r in climate) >= WAVES
    assert sum(r.gold.late for r in climate) >= 5


def test_declared_aggregates_equal_plain_python_across_batches_and_late_rows(spark, sensors):
    """count, avg, min, max, count_if and sum per minute and zone equal plain Python over the on-time readings."""
    ctx, sent, placements, _ = sensors
    late = late_ids(spark, ctx, "gold_zone_climate_per_minute")
    readings = [e for e in unique(sent).values() if e["event_id"] not in late]
    expected: dict[tuple, list] = defaultdict(list)
    for e in readings:
        minute = naive(ts(e)).replace(second=0, microsecond=0)
        expected[(minute, zone_at(placements, e["device_id"], ts(e)))].append(e)
    got = {(r.window_start, r.zone): r for r in read(spark, ctx, "gold_zone_climate_per_minute").collect()}
    assert set(got) == set(expected)
    for key, events in expected.items():
        row, celsius = got[key], [e["celsius"] for e in events]
        humidity = [e["humidity_pct"] for e in events if e["humidity_pct"] is not None]
        assert row.readings == len(events), key
        assert row.avg_celsius == pytest.approx(sum(celsius) / len(celsius), rel=1e-12), key
        assert (row.min_celsius, row.max_celsius) == (min(celsius), max(celsius)), key
        assert row.hot_readings == sum(c > 30 for c in celsius), key
        assert row.humidity_total == (sum(humidity) if humidity else None), key
        assert row.window_end == key[0] + timedelta(minutes=1)
    # Every reading is counted in gold or listed late for it, never both, never neither.
    assert sum(r.readings for r in got.values()) + len(late) == len(unique(sent))
    assert len(late) >= 5


def test_hopping_windows_take_their_size_from_the_pipelines_parameter(spark, sensors):
    """LAKEHOUSE_SENSORS_HOP_SIZE (10 minutes by default), a window every 5 minutes: each holds its readings."""
    ctx, sent, _, _ = sensors
    assert ctx.params["sensors_hop_size"] == "10 minutes"
    late = late_ids(spark, ctx, "gold_device_temperature_hopping")
    expected: dict[tuple, list] = defaultdict(list)
    for e in unique(sent).values():
        if e["event_id"] in late:
            continue
        t = naive(ts(e))
        first = t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0) - timedelta(minutes=5)
        for start in (first, first + timedelta(minutes=5)):
            expected[(start, e["device_id"])].append(e["celsius"])
    got = {(r.window_start, r.device_id): (r.readings, r.avg_celsius, r.window_end - r.window_start)
           for r in read(spark, ctx, "gold_device_temperature_hopping").collect()}
    assert set(got) == set(expected)
    for key, celsius in expected.items():
        assert got[key][0] == len(celsius) and got[key][1] == pytest.approx(sum(celsius) / len(celsius), rel=1e-12)
        assert got[key][2] == timedelta(minutes=10)


def test_the_as_of_join_places_each_reading_in_its_zone_at_the_time(spark, sensors):
    """Every reading once, in the zone its device hung in at the reading's time (d-1 moved between waves)."""
    ctx, sent, placements, _ = sensors
    got = {r.event_id: r.zone for r in read(spark, ctx, "gold_readings_placed").collect()}
    events = unique(sent)
    assert got == {i: zone_at(placements, e["device_id"], ts(e)) for i, e in events.items()}
    moved = [e for e in events.values() if e["device_id"] == "d-1"]
    assert {got[e["event_id"]] for e in moved} == {"zone-a", "zone-b"}
