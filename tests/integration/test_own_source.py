"""The README's "Your own pipeline" example, run as written: a source and a windowed gold table of a pipeline
that is not the shop's go end to end, from the declaration alone."""

from __future__ import annotations

import json
import re
import sys
import types
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest
from confluent_kafka import Producer

from lakehouse.orchestration.assets import build_assets
from lakehouse.orchestration.catch_up import build_catch_up_job
from lakehouse.orchestration.resources import build_resources
from lakehouse.schemas import tables
from lakehouse.streaming.flows import build_flows

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
GOLD = "gold_device_climate_per_minute"


@pytest.fixture
def readme_pipeline(monkeypatch):
    """The README's example, executed as the module `readme_sensors` and made the active pipeline."""
    section = README.read_text().split("## Your own pipeline", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("readme_sensors")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "readme_sensors", module)
    monkeypatch.setenv("LAKEHOUSE_PIPELINE", "readme_sensors")
    return module


def reading(event_id: str, **changes) -> dict:
    payload = {"event_id": event_id, "occurred_at": "2026-11-22T09:00:10Z", "sent_at": "2026-11-22T09:02:00Z",
               "device_id": "t-7", "celsius": 21.5, "humidity_pct": 40}
    return {**payload, **changes}


def minute_of(event: dict) -> datetime:
    return datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")).replace(
        second=0, microsecond=0, tzinfo=None)


def test_the_readme_pipeline_goes_end_to_end(spark, broker, readme_pipeline):
    """The declaration alone yields the topic, bronze, silver and gold assets; valid readings reach silver with the
    derived column and gold as declared aggregates equal to plain Python, bad ones reach quarantine with their
    reasons, and silver columns carry the declared docs."""
    source = readme_pipeline.READINGS
    assert source.topic == "warehouse.readings.v1"
    assets = build_assets((source,))
    keys = {k.to_user_string() for a in assets for k in getattr(a, "keys", [getattr(a, "key", None)])}
    assert keys == {"kafka/warehouse_readings_v1", "bronze_readings", "silver_readings", GOLD,
                    "quarantine", "late_arrivals"}
    assert [f.name for f in build_flows((source,))] == ["bronze_readings", "silver_readings", GOLD]

    resources = build_resources(broker)
    assert dg.materialize(assets, resources=resources, selection=["kafka/warehouse_readings_v1"]).success
    good = [reading("r-1"), reading("r-2", celsius=-3.25, humidity_pct=None), reading("r-3", celsius=40),
            reading("r-4", device_id="t-8", celsius=31.5, occurred_at="2026-11-22T09:01:30Z")]
    bad = {
        b"{not json": ("malformed_json", None),
        json.dumps(reading("b-1", celsius="warm")).encode(): ("wrong_type", "celsius"),
        json.dumps(reading("b-2", celsius=99.0)).encode(): ("contract_violation", "plausible_temperature"),
        json.dumps(reading("b-3", humidity_pct=250)).encode(): ("contract_violation", "humidity_in_range"),
        json.dumps({k: v for k, v in reading("b-4").items() if k != "device_id"}).encode(): ("missing_field", "device_id"),
        json.dumps(reading("b-5")).encode() + b"tail": ("trailing_data", None),
    }
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap, "log_level": 0})
    for value in [json.dumps(r).encode() for r in good] + list(bad):
        producer.produce(source.topic, key=b"t-7", value=value)
    assert producer.flush(30) == 0

    # The catch_up job follows the declarations too (silver is partitioned: materializing it is a backfill).
    result = build_catch_up_job((source,)).execute_in_process(
        resources=resources, raise_on_error=False,
        run_config={"ops": {"bring_up_to_date": {"config": {"assets": ["bronze_readings", "silver_readings", GOLD]}}}})
    assert result.success
    meta = {e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
            for e in result.get_asset_materialization_events()}
    silver_meta = meta["silver_readings"]
    assert silver_meta["quarantined"].value == len(bad) and silver_meta["rows_written"].value == len(good)
    columns = {c.name: c.description for c in silver_meta["dagster/column_schema"].value.columns}
    assert columns["celsius"] == "Temperature in degrees Celsius."
    assert columns["fahrenheit"] == "Temperature in degrees Fahrenheit."

    silver = spark.read.format("delta").load(source.silver_table.path(broker.lake_root))
    got = {r.event_id: (r.celsius, r.fahrenheit, r.humidity_pct) for r in silver.collect()}
    assert got == {r["event_id"]: (r["celsius"], r["celsius"] * 9 / 5 + 32, r["humidity_pct"]) for r in good}
    quarantine = spark.read.format("delta").load(tables.QUARANTINE.path(broker.lake_root))
    reasons = {bytes(r.value): (r.reason, r.detail) for r in quarantine.where(f"schema = '{source.topic}'").collect()}
    assert reasons == bad

    expected = defaultdict(list)
    for r in good:
        expected[(minute_of(r), r["device_id"])].append(r["celsius"])
    gold = spark.read.format("delta").load(tables.BY_NAME[GOLD].path(broker.lake_root)).collect()
    assert {(g.window_start, g.device_id): (g.readings, g.min_celsius, g.max_celsius, g.hot) for g in gold} == {
        k: (len(v), min(v), max(v), sum(c > 30 for c in v)) for k, v in expected.items()}
    for g in gold:
        values = expected[(g.window_start, g.device_id)]
        assert g.avg_celsius == pytest.approx(sum(values) / len(values))
