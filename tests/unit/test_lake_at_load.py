"""What the Dagster definitions read from the lake when they load, without Spark: columns and the first event day."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.orchestration.assets import build_assets
from lakehouse.pipelines import shop
from lakehouse.schemas.sources import LINEAGE_DOCS
from lakehouse.streaming.delta_files import first_date, table_columns

FIELDS = [
    {"name": "event_id", "type": "string", "nullable": True, "metadata": {}},
    {"name": "occurred_at", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "lines", "type": {"type": "array", "elementType": "long", "containsNull": True}, "nullable": True,
     "metadata": {}},
    {"name": "event_date", "type": "date", "nullable": True, "metadata": {}},
]


def _metadata(fields: list[dict]) -> dict:
    return {"id": "t", "format": {"provider": "parquet", "options": {}}, "partitionColumns": ["event_date"],
            "configuration": {}, "schemaString": json.dumps({"type": "struct", "fields": fields})}


def _add(path: str, day: str) -> dict:
    return {"path": path, "partitionValues": {"event_date": day}, "size": 1, "modificationTime": 0,
            "dataChange": True, "stats": json.dumps({"numRecords": 1, "minValues": {"occurred_at": f"{day}T05:00:00Z"}})}


def _commit(table: Path, version: int, *actions: dict) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_tables_columns_come_from_its_log_with_the_declared_descriptions(tmp_path):
    """The silver table's definition shows the columns its Delta log holds, each described as its source declares;
    a table not written yet has no columns on its definition."""
    lake = tmp_path / "lake"
    _commit(lake / "silver/silver_orders", 0, {"protocol": {"minReaderVersion": 1}},
            {"metaData": _metadata(FIELDS[:2])}, {"add": _add("a.parquet", "2026-11-20")})
    # A later schema change (new columns) is what the definition shows.
    _commit(lake / "silver/silver_orders", 1, {"metaData": _metadata(FIELDS)})
    gold = [{"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (("window_start", "timestamp"), ("currency", "string"), ("revenue_cents", "long"))]
    _commit(lake / "gold/gold_revenue_per_minute", 0, {"metaData": _metadata(gold)})
    specs = {s.key.to_user_string(): s for a in build_assets(shop.PIPELINE.sources, lake_root=str(lake))
             for s in (a.specs if isinstance(a, dg.AssetsDefinition) else [a])}
    schema = specs["silver_orders"].metadata["dagster/column_schema"]
    docs = shop.ORDERS.column_docs()
    assert [(c.name, c.type, c.description) for c in schema.columns] == [
        ("event_id", "string", docs["event_id"]), ("occurred_at", "timestamp", docs["occurred_at"]),
        ("lines", "array<bigint>", docs["lines"]), ("event_date", "date", LINEAGE_DOCS["event_date"])]
    assert all(c.description for c in schema.columns)
    assert "dagster/column_schema" not in specs["silver_payments"].metadata
    # A gold table's columns: what it declares (its aggregates) and what it keeps of the source it reads.
    revenue = shop.GOLD_BY_NAME["gold_revenue_per_minute"].kind.aggregates["revenue_cents"]
    described = {c.name: c.description for c in specs["gold_revenue_per_minute"].metadata["dagster/column_schema"].columns}
    assert described["revenue_cents"].startswith(str(revenue)) and described["currency"] == docs["currency"]
    assert described["window_start"]


def test_a_checkpoint_and_the_commits_after_it_give_the_first_event_day(tmp_path):
    """The first day is the least date among the live files: a file removed after the checkpoint no longer counts,
    and a table without a log has none."""
    table = tmp_path / "silver_orders"
    adds = [_add("old.parquet", "2026-10-02"), _add("mid.parquet", "2026-10-05")]
    checkpoint = pa.table({
        "metaData": [_metadata(FIELDS), None, None],
        "add": [None, *({**a, "partitionValues": list(a["partitionValues"].items())} for a in adds)],
    }, schema=pa.schema([
        ("metaData", pa.struct([("id", pa.string()), ("schemaString", pa.string())])),
        ("add", pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                           ("stats", pa.string())])),
    ]))
    (table / "_delta_log").mkdir(parents=True)
    pq.write_table(checkpoint, table / "_delta_log" / f"{10:020d}.checkpoint.parquet")
    assert first_date(str(table), "event_date") == date(2026, 10, 2)
    assert [f["name"] for f in table_columns(str(table))] == [f["name"] for f in FIELDS]
    _commit(table, 11, {"remove": {"path": "old.parquet"}}, {"add": _add("new.parquet", "2026-11-28")})
    assert first_date(str(table), "event_date") == date(2026, 10, 5)
    assert first_date(str(table), "occurred_at") == date(2026, 10, 5)     # from the files' statistics
    assert first_date(str(tmp_path / "nothing"), "event_date") is None and table_columns(str(tmp_path / "x")) is None


def test_partitions_start_at_the_first_day_the_lake_holds(tmp_path):
    """The backfill job's daily partitions start at the least event date of the silver tables' live files; an empty
    lake's start today; the nightly reconciliation asks for no day before the first."""
    from datetime import datetime, timezone

    from lakehouse.infra.settings import Settings
    from lakehouse.orchestration.location import build_definitions, reconcile_range

    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    today = datetime.now(timezone.utc).date().isoformat()

    def first_key() -> str:
        return build_definitions(settings).resolve_job_def("backfill").partitions_def.get_first_partition_key()

    assert first_key() == today
    lake = Path(settings.lake_root)
    _commit(lake / "silver/silver_payments", 0, {"metaData": _metadata(FIELDS)}, {"add": _add("p.parquet", "2026-10-05")})
    _commit(lake / "silver/silver_orders", 0, {"metaData": _metadata(FIELDS)}, {"add": _add("o.parquet", "2026-10-03")},
            {"add": _add("q.parquet", "2026-11-01")})
    assert first_key() == "2026-10-03"
    # A backfill of days silver does not hold yet (from the log, after a loss) gets partitions from its first day.
    backfill = build_definitions(settings, first_day="2026-09-28").resolve_job_def("backfill")
    assert backfill.partitions_def.get_first_partition_key() == "2026-09-28"
    assert build_definitions(settings, first_day="2026-10-20").resolve_job_def("backfill").partitions_def \
        .get_first_partition_key() == "2026-10-03"
    assert reconcile_range(datetime(2026, 10, 4, 2, 30, tzinfo=timezone.utc), 3, "2026-10-03") == ("2026-10-03",
                                                                                                  "2026-10-04")
