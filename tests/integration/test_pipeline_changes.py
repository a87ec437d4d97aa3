"""A changed pipeline never breaks the lake: one sentence names the table and the change, `lakehouse refresh` rebuilds it.

The sensors pipeline runs on a lake; then it changes under the same lake, as a user's would:
- a source is added (doors), which gold_events_per_minute reads as it reads every event source (the case that
  left a lake broken for good with Spark's "There are [1] sources in the checkpoint offsets and now there are
  [2]"); gold_readings_placed is removed from the pipeline;
- a window size changes (LAKEHOUSE_SENSORS_HOP_SIZE);
- a source gains a column its producers sent all along, and a transform changes.
Each time the changed table's flow refuses to run with one sentence, every other flow runs on, `lakehouse refresh`
rebuilds the table from the retained log, and the stream resumes: the table equals plain Python over every event
sent, with nothing read twice or skipped, and a table whose definition did not change is never rebuilt.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lakehouse.cli import main as cli
from lakehouse.schemas import tables, topics
from lakehouse.streaming import flows
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.fingerprints import DefinitionChanged
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.producer import produce
from lakehouse.streaming.runner import table_version

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)


class Lake:
    """The lake and broker the test's pipelines share, and what was sent."""

    def __init__(self, spark, broker, root: str, mp: pytest.MonkeyPatch):
        self.spark, self.broker, self.root, self.mp = spark, broker, root, mp
        self.sent: list[tuple[str, dict]] = []
        self.n = 0
        self.rng = random.Random(3)

    def use(self, module: str, **params: str) -> None:
        """Point the engine (and the CLI) at `module`, with parameters set as a user would, in the environment."""
        self.mp.setenv("LAKEHOUSE_PIPELINE", module)
        for name, value in params.items():
            self.mp.setenv(f"LAKEHOUSE_{name.upper()}", value)

    def ctx(self) -> FlowContext:
        from lakehouse.schemas.pipeline import active_pipeline

        return FlowContext(lake_root=self.root, kafka_bootstrap=self.broker.kafka_bootstrap, max_offsets_per_trigger=50,
                           gold_watermark="10 minutes", silver_dedup_watermark="1 day",
                           params=active_pipeline().param_values())

    def send(self, minutes: int, *, doors: bool = False) -> None:
        """Readings (and door events) over `minutes` of event time after those sent before, none late."""
        import warehouse_sensors as sensors

        ensure_topics(self.broker.kafka_bootstrap, topics.ALL)
        records = []
        if self.n == 0:   # where the one device hangs, before any reading
            records.append(sensors.Record(0, "warehouse.devices.v1", b"d-0", {
                "event_id": "place-d-0", "device_id": "d-0", "zone": "zone-a",
                "occurred_at": (START - timedelta(hours=1)).isoformat()}))
        for _ in range(minutes * 10):
            self.n += 1
            at = (START + timedelta(seconds=6 * self.n)).isoformat()   # in order: nothing is late
            if doors and self.n % 3 == 0:
                topic, event = "warehouse.doors.v1", {"event_id": f"door-{self.n}", "door_id": "bay-1",
                                                     "state": self.rng.choice(["open", "closed"]), "occurred_at": at}
            else:
                # battery_pct is sent all along; silver keeps it once the source declares it.
                topic, event = "warehouse.readings.v1", {"event_id": f"r-{self.n}", "device_id": "d-0",
                                                         "celsius": 20.0, "humidity_pct": 50, "occurred_at": at,
                                                         "battery_pct": 100 - self.n % 50}
            records.append(sensors.Record(self.n, topic, b"k", event))
            self.sent.append((topic, event))
        assert produce(records, bootstrap=self.broker.kafka_bootstrap).delivered == len(records)

    def run(self) -> dict[str, BaseException | None]:
        """Every flow of the pipeline in force, caught up; each flow's error (None: it ran)."""
        return {o.flow.name: o.error for o in run_flows(self.spark, list(flows.FLOWS), self.ctx(), parallel=3)}

    def read(self, table: str):
        spec = tables.BY_NAME.get(table)   # a table the pipeline no longer declares is still in the lake, in gold
        return self.spark.read.format("delta").load(spec.path(self.root) if spec else f"{self.root}/gold/{table}")

    def version(self, table: str) -> int | None:
        return table_version(self.spark, f"{self.root}/gold/{table}")

    def refresh(self, table: str, capsys, *more: str) -> str:
        capsys.readouterr()
        assert cli.main(["refresh", table, *more]) == 0
        out = capsys.readouterr()
        return out.out + out.err


@pytest.fixture(scope="module")
def lake(spark, broker, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PIPELINES))
        home = tmp_path_factory.mktemp("changes")
        for name, value in {"HOME": str(home), "LAKE_ROOT": str(home / "lake"), "QUALITY": "false",
                            "KAFKA_BOOTSTRAP": broker.kafka_bootstrap, "GOLD_WATERMARK": "10 minutes",
                            "SILVER_DEDUP_WATERMARK": "1 day"}.items():
            mp.setenv(f"LAKEHOUSE_{name}", value)
        found = Lake(spark, broker, str(home / "lake"), mp)
        found.use("warehouse_sensors")
        found.send(10)
        assert set(found.run().values()) == {None}
        yield found


def events_by_minute(sent, topics_=None) -> Counter:
    return Counter((datetime.fromisoformat(e["occurred_at"]).replace(second=0, tzinfo=None), topic)
                   for topic, e in {e["event_id"]: (t, e) for t, e in sent}.values() if topics_ is None or topic in topics_)


def table_counts(lake: Lake) -> Counter:
    return Counter({(r.window_start, r.topic): r.events for r in lake.read("gold_events_per_minute").collect()})


def test_adding_a_source_names_the_table_and_refresh_rebuilds_it(lake, capsys):
    """The doors source added: gold_events_per_minute says it now reads silver_doors; the rest runs on."""
    assert table_counts(lake) == events_by_minute(lake.sent)
    placed_version = lake.version("gold_readings_placed")
    climate_version = lake.version("gold_zone_climate_per_minute")

    lake.use("warehouse_sensors_doors")
    lake.send(10, doors=True)
    errors = lake.run()
    failed = {name: e for name, e in errors.items() if e is not None}
    assert set(failed) == {"gold_events_per_minute"}
    error = failed["gold_events_per_minute"]
    assert isinstance(error, DefinitionChanged)
    assert str(error) == (
        "gold_events_per_minute is defined differently since its stream last ran (it now reads silver_doors too): "
        "run `lakehouse refresh gold_events_per_minute` to rebuild it from the retained log (its current rows stay "
        "readable by time travel).")
    # The removed table stays as it was, readable; the unchanged one ran on without a rebuild.
    assert lake.version("gold_readings_placed") == placed_version
    assert lake.read("gold_readings_placed").count() > 0
    assert lake.version("gold_zone_climate_per_minute") > climate_version

    out = lake.refresh("gold_events_per_minute", capsys)
    assert "gold_events_per_minute: it now reads silver_doors too" in out
    assert "rebuilt and swapped in at version" in out and "resumes where the rebuild ended" in out
    assert table_counts(lake) == events_by_minute(lake.sent)

    # The stream resumes on its new checkpoint: new events counted once, none of the old read again.
    lake.send(5, doors=True)
    assert set(lake.run().values()) == {None}
    assert table_counts(lake) == events_by_minute(lake.sent)
    silver = lake.read("silver_doors").select("topic", "partition", "offset")
    assert silver.count() == silver.distinct().count() == sum(1 for t, _ in dict(
        (e["event_id"], (t, e)) for t, e in lake.sent).values() if t == "warehouse.doors.v1")


def test_a_changed_window_size_is_named_and_refreshed(lake, capsys):
    """LAKEHOUSE_SENSORS_HOP_SIZE from 10 to 20 minutes: only the hopping table stops, then holds 20-minute windows."""
    climate = lake.version("gold_zone_climate_per_minute")
    lake.use("warehouse_sensors_doors", sensors_hop_size="20 minutes")
    lake.send(3, doors=True)
    failed = {name: e for name, e in lake.run().items() if e is not None}
    assert set(failed) == {"gold_device_temperature_hopping"}
    assert "LAKEHOUSE_SENSORS_HOP_SIZE was 10 minutes, is 20 minutes" in str(failed["gold_device_temperature_hopping"])
    assert lake.version("gold_zone_climate_per_minute") > climate   # ran on, not rebuilt
    capsys.readouterr()
    cli.main(["status", "gold_device_temperature_hopping"])
    assert ("gold_device_temperature_hopping is defined differently since its stream last ran "
            "(LAKEHOUSE_SENSORS_HOP_SIZE was 10 minutes, is 20 minutes): run `lakehouse refresh") in capsys.readouterr().out

    # In Dagster, the catch_up job runs every other table and fails with that sentence, no stack trace.
    from lakehouse.infra.settings import Settings
    from lakehouse.orchestration.location import build_definitions

    definitions = build_definitions(Settings.from_env())
    lake.send(1, doors=True)
    run = definitions.get_job_def("catch_up").execute_in_process(raise_on_error=False)
    assert not run.success
    [failure] = [e for e in run.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.event_specific_data.user_failure_data.description == str(failed["gold_device_temperature_hopping"])
    assert failure.event_specific_data.user_failure_data.metadata["what_to_do"].value.startswith(
        "lakehouse refresh gold_device_temperature_hopping")
    touched = {e.event_specific_data.materialization.asset_key.to_user_string()
               for e in run.get_asset_materialization_events()}
    touched |= {e.event_specific_data.asset_observation.asset_key.to_user_string()
                for e in run.get_asset_observation_events()}
    assert {"silver_readings", "gold_zone_climate_per_minute"} <= touched
    [note] = [e.event_specific_data.asset_observation for e in run.get_asset_observation_events()
              if e.event_specific_data.asset_observation.asset_key.to_user_string() == "gold_device_temperature_hopping"]
    assert note.metadata["definition_changed"].value == str(failed["gold_device_temperature_hopping"])
    assert not any(e.event_specific_data.materialization.asset_key.to_user_string() == "gold_device_temperature_hopping"
                   for e in run.get_asset_materialization_events())

    # From the Dagster UI: the refresh job, its table given in the launchpad's config.
    job = definitions.get_job_def("refresh")
    result = job.execute_in_process(run_config={"ops": {"refresh_table": {"config": {
        "table": "gold_device_temperature_hopping"}}}})
    assert result.success
    [event] = [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
    meta = event.event_specific_data.materialization.metadata
    assert meta["refreshed_because"].value == "LAKEHOUSE_SENSORS_HOP_SIZE was 10 minutes, is 20 minutes"
    rows = lake.read("gold_device_temperature_hopping").collect()
    assert rows and {r.window_end - r.window_start for r in rows} == {timedelta(minutes=20)}
    readings = {e["event_id"]: e for t, e in lake.sent if t == "warehouse.readings.v1"}
    # Every reading lies in four 20-minute windows that start every 5 minutes.
    assert sum(r.readings for r in rows) == 4 * len(readings)
    lake.send(2, doors=True)
    assert set(lake.run().values()) == {None}
    readings = {e["event_id"]: e for t, e in lake.sent if t == "warehouse.readings.v1"}
    assert sum(r.readings for r in lake.read("gold_device_temperature_hopping").collect()) == 4 * len(readings)


def test_refreshing_a_table_that_others_read_asks_for_downstream(lake, capsys):
    """silver_readings is read by gold tables: refresh without --downstream says so in one sentence."""
    lake.use("warehouse_sensors_doors", sensors_hop_size="20 minutes")
    capsys.readouterr()
    assert cli.main(["refresh", "silver_readings"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: silver_readings is read by ") and "--downstream" in err[0]


def test_a_new_column_and_a_changed_transform_refresh_silver_and_what_reads_it(lake, capsys):
    """battery_pct declared and the zone transform changed: silver and the gold tables reading it name the change;
    refresh --downstream rebuilds them from bronze's raw records, so old readings get the new column too."""
    lake.use("warehouse_sensors_v3", sensors_hop_size="20 minutes")
    lake.send(2, doors=True)
    failed = {name: e for name, e in lake.run().items() if e is not None}
    assert set(failed) == {"silver_readings", "gold_zone_climate_per_minute", "gold_device_temperature_hopping",
                           "gold_events_per_minute"}
    assert "(the events it parses have another schema)" in str(failed["silver_readings"])
    assert ("(the events behind silver_readings have another schema; its transform or declaration changed)"
            in str(failed["gold_zone_climate_per_minute"]))
    assert "(the events behind silver_readings have another schema)" in str(failed["gold_events_per_minute"])

    out = lake.refresh("silver_readings", capsys, "--downstream")
    assert "silver_readings: the events it parses have another schema" in out
    readings = {e["event_id"]: e for t, e in lake.sent if t == "warehouse.readings.v1"}
    assert {r.event_id: r.battery_pct for r in lake.read("silver_readings").collect()} == {
        i: e["battery_pct"] for i, e in readings.items()}
    assert {r.zone for r in lake.read("gold_zone_climate_per_minute").collect()} == {"ZONE-A"}

    lake.send(2, doors=True)
    assert set(lake.run().values()) == {None}
    readings = {e["event_id"]: e for t, e in lake.sent if t == "warehouse.readings.v1"}
    silver = lake.read("silver_readings")
    assert silver.count() == silver.select("partition", "offset").distinct().count() == len(readings)
    assert table_counts(lake) == events_by_minute(lake.sent)
