"""bench.freshness --floor --work: send -> the gold commit of the batch that carried each order, read from the files."""

from __future__ import annotations

import json
import os
import statistics
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import freshness
from bench.bare_stream import WORK_TOPIC, work_table

SENT = datetime(2026, 11, 28, 3, 0, 0, tzinfo=timezone.utc).timestamp()


def _commit(table, version: int, actions: list[dict], at_s: float) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    path = log / f"{version:020d}.json"
    path.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    os.utime(path, ns=(int(at_s * 1e9), int(at_s * 1e9)))


def _bronze_version(table, version: int, batch: int, sent_offsets_ms: list[int], at_s: float) -> None:
    """One bronze append of `batch`: an order per offset (ms after SENT), each value stamped as the producer does."""
    values = []
    for ms in sent_offsets_ms:
        stamp = datetime.fromtimestamp(SENT + ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        values.append(json.dumps({"event_id": f"e{batch}-{ms}", "sent_at": f"{stamp}Z"}, separators=(",", ":")).encode())
    broker = [int((SENT + ms / 1000) * 1e6) for ms in sent_offsets_ms]
    name = f"part-{version}.parquet"
    pq.write_table(pa.table({"value": pa.array(values, pa.binary()),
                             "timestamp": pa.array(broker, pa.timestamp("us", tz="UTC")),
                             "batch": pa.array([batch] * len(values), pa.int64())}), table / name)
    _commit(table, version, [
        {"add": {"path": name, "stats": json.dumps({"numRecords": len(values)})}},
        {"commitInfo": {"operation": "WRITE", "userMetadata": json.dumps({"batch": batch})}},
    ], at_s)


def test_an_order_is_visible_at_its_batchs_gold_merge_and_an_unmerged_batch_counts_as_missing(tmp_path):
    bronze = tmp_path / "bare"
    bronze.mkdir()
    gold = work_table(bronze, "gold")
    gold.mkdir()
    _commit(gold, 0, [{"commitInfo": {"operation": "WRITE"}}], SENT - 10)           # created empty
    _bronze_version(bronze, 0, batch=7, sent_offsets_ms=[100, 900], at_s=SENT + 1.5)
    _bronze_version(bronze, 1, batch=8, sent_offsets_ms=[1200, 1700], at_s=SENT + 3.0)
    merged_at = SENT + 4.25
    _commit(gold, 1, [{"commitInfo": {"operation": "MERGE", "userMetadata": json.dumps({"batch": 7})}}], merged_at)
    # batch 8's MERGE never committed (the job stopped in it): its two orders are not visible in gold

    start, end = SENT, SENT + 2.0
    result = {"observed_until": end + 30.0, "producer": {"sent_in_window": {WORK_TOPIC: {"valid": 4},
                                                                            "shop.page_views.v1": {"valid": 50}}}}
    found = freshness.floor_work_analyse(bronze, start, end, result)

    assert freshness.merged_batches(gold) == {7: int(merged_at * 1e9)}
    assert found["expected"] == 4                     # the orders topic only
    assert found["events"] == 2 and found["missing"] == 2
    delays = [merged_at - (SENT + 0.1), merged_at - (SENT + 0.9)]
    assert found["commit_visible_only"]["p50"] == pytest.approx(statistics.median(delays), abs=1e-3)
    # the unmerged orders count at their least possible delay, so the censored p99 is at least that
    assert found["commit"]["p99"] >= 30.0 - 1e-3 and found["commit"]["lower_bound"] is True
    in_bronze = sorted([SENT + 1.5 - (SENT + 0.1), SENT + 1.5 - (SENT + 0.9), 3.0 - 1.2, 3.0 - 1.7])
    assert found["in_bronze"]["p50"] == pytest.approx(statistics.median(in_bronze), abs=1e-3)


@pytest.mark.parametrize("argv, complaint", [
    (["--work"], "--work is a floor of its own"),
    (["--floor", "--work", "--hops", "3"], "--work is a floor of its own"),
    (["--floor", "--exactly-once"], "--exactly-once is a variant of the floor's --work"),
])
def test_the_work_floors_options_refuse_what_they_cannot_measure(argv, complaint, capsys):
    with pytest.raises(SystemExit):
        freshness.main([*argv, "--no-record"])
    assert complaint in capsys.readouterr().err
