"""The README's "Add your own source" example, run as written: a declaration that is not the shop's goes end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest
from confluent_kafka import Producer

from lakehouse.orchestration.assets import build_assets
from lakehouse.orchestration.catch_up import build_catch_up_job
from lakehouse.orchestration.resources import build_resources
from lakehouse.schemas import tables
from lakehouse.schemas.sources import Source
from lakehouse.streaming.flows import build_flows

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def declared_in_readme() -> Source:
    """Execute the README's example declaration and return the source it defines."""
    section = README.read_text().split("## Add your own source", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    [source] = [v for v in scope.values() if isinstance(v, Source)]
    return source


def reading(event_id: str, **changes) -> dict:
    payload = {"event_id": event_id, "occurred_at": "2026-11-22T09:00:00Z", "sent_at": "2026-11-22T09:00:01Z",
               "device_id": "t-7", "celsius": 21.5, "battery_pct": 80}
    return {**payload, **changes}


def test_a_declared_source_goes_end_to_end(spark, broker):
    """The declaration alone yields a topic asset and bronze/silver assets; valid readings reach silver with the
    derived column, bad ones reach quarantine with their reasons, and silver columns carry the declared docs."""
    source = declared_in_readme()
    assert source.topic == "iot.temperature.v1"
    assets = build_assets((source,))
    keys = {k.to_user_string() for a in assets for k in getattr(a, "keys", [getattr(a, "key", None)])}
    assert keys == {"kafka/iot_temperature_v1", "bronze_temperature_readings", "silver_temperature_readings",
                    "quarantine", "late_arrivals"}
    assert [f.name for f in build_flows((source,))] == ["bronze_temperature_readings", "silver_temperature_readings"]

    resources = build_resources(broker)
    assert dg.materialize(assets, resources=resources, selection=["kafka/iot_temperature_v1"]).success
    good = [reading("r-1"), reading("r-2", celsius=-3.25, battery_pct=None), reading("r-3", celsius=40)]
    bad = {
        b"{not json": ("malformed_json", None),
        json.dumps(reading("b-1", celsius="warm")).encode(): ("wrong_type", "celsius"),
        json.dumps(reading("b-2", celsius=99.0)).encode(): ("contract_violation", "plausible_temperature"),
        json.dumps(reading("b-3", battery_pct=250)).encode(): ("contract_violation", "battery_in_range"),
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
        run_config={"ops": {"bring_up_to_date": {"config": {"assets": [
            "bronze_temperature_readings", "silver_temperature_readings"]}}}})
    assert result.success
    meta = {e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
            for e in result.get_asset_materialization_events()}
    silver_meta = meta["silver_temperature_readings"]
    assert silver_meta["quarantined"].value == len(bad) and silver_meta["rows_written"].value == len(good)
    columns = {c.name: c.description for c in silver_meta["dagster/column_schema"].value.columns}
    assert columns["celsius"] == "Temperature in degrees Celsius."
    assert columns["fahrenheit"] == "Temperature in degrees Fahrenheit."

    silver = spark.read.format("delta").load(source.silver_table.path(broker.lake_root))
    got = {r.event_id: (r.celsius, r.fahrenheit, r.battery_pct) for r in silver.collect()}
    assert got == {r["event_id"]: (r["celsius"], r["celsius"] * 9 / 5 + 32, r["battery_pct"]) for r in good}
    quarantine = spark.read.format("delta").load(tables.QUARANTINE.path(broker.lake_root))
    reasons = {bytes(r.value): (r.reason, r.detail) for r in quarantine.where(f"schema = '{source.topic}'").collect()}
    assert reasons == bad
