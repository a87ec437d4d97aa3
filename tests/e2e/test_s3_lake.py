"""The lake on an S3 endpoint: moto's S3 server in its own process, the lake root at s3a://lake/lake.

`lakehouse stream gold_revenue_per_minute` (the orders path) is killed with SIGKILL once mid-batch and restarted
(bench/drills.py run_crash), and the lake loses and doubles nothing in any layer; then `lakehouse verify` and a time
travel read through `lakehouse sql` work on it, and the server itself lists a table's Delta log.

The drill's checks read the lake with Spark, and this process's session (tests/conftest.py) has no S3 jars: the drill
runs in a child Python (`python -m tests.e2e.test_s3_lake`) with a session of its own, and hands its report back.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lakehouse.infra.s3_server import S3Server
from tests.conftest import free_port
from tests.e2e import test_stream_drills
from tests.e2e.test_stream_drills import SMALL, TABLES, assert_exact

crash_broker = test_stream_drills.crash_broker   # the drill's broker fixture: its own, on free ports, stopped by PID

BUCKET = "lake"
EVENTS = 600     # the shop's generator sends its 250 dimension records first: about 75 of the rest are orders
# The backlog a slow start leaves in several batches of each layer: the kill lands inside a catch-up, and tables
# have several versions to travel to.
SMALLER = {"LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "50"}
ROOT = Path(__file__).resolve().parents[2]
LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
# moto accepts any keys; S3A and pyarrow still sign with what the environment holds, as on AWS.
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def s3(tmp_path_factory: pytest.TempPathFactory):
    """moto's S3 server on a free port in its own process, with the lake's bucket; stopped by PID."""
    server = S3Server("127.0.0.1", free_port(), tmp_path_factory.mktemp("s3"))
    server.start((BUCKET,))
    try:
        yield server
    finally:
        server.stop()
    assert server.read_pid() is None


def s3_env(server: S3Server) -> dict[str, str]:
    return {"LAKEHOUSE_LAKE_ROOT": f"s3a://{BUCKET}/lake", "LAKEHOUSE_S3_ENDPOINT": server.endpoint,
            "LAKEHOUSE_S3_PATH_STYLE": "true", **KEYS}


def lakehouse(settings, server: S3Server, *args: str) -> subprocess.CompletedProcess:
    """A `lakehouse` command on the S3 lake (no LAKEHOUSE_* variable of this process leaks in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env.update({"LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_JARS_DIR": settings.jars_dir,
                "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
                "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
                "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2", "LAKEHOUSE_QUALITY": "false", **s3_env(server)})
    return subprocess.run([str(LAKEHOUSE), *args], env=env, capture_output=True, text=True, timeout=600)


def list_keys(server: S3Server, prefix: str) -> list[str]:
    """The object keys under `prefix`, as the S3 server itself lists them (ListObjectsV2)."""
    url = f"{server.endpoint}/{BUCKET}?list-type=2&prefix={prefix}"
    with urllib.request.urlopen(url, timeout=10) as response:
        root = ET.fromstring(response.read())
    return [e.text for e in root.iter() if e.tag.endswith("}Key")]


def test_a_lake_on_s3_survives_a_crash_and_answers_verify_and_time_travel(crash_broker, s3, tmp_path, monkeypatch):
    """A kill -9 of the stream mid-batch on an s3a:// lake loses and doubles nothing in bronze, silver and gold (every
    record checked against what the broker acknowledged, gold also against plain Python); `lakehouse verify` finds no
    discrepancy between the stream's gold and silver and the batch lane's; `VERSION AS OF` reads an older version; the
    Delta log is on the S3 server."""
    for key, value in s3_env(s3).items():     # the drill's own checks and listings in this process read S3 too
        monkeypatch.setenv(key, value)
    out = tmp_path / "report.pickle"
    drill = subprocess.run(
        [sys.executable, "-m", "tests.e2e.test_s3_lake", crash_broker.home, crash_broker.jars_dir,
         str(crash_broker.kafka_port), str(crash_broker.kafka_controller_port), str(tmp_path), str(out)],
        cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=1200)
    assert out.exists(), drill.stdout[-3000:] + drill.stderr[-3000:]
    report = pickle.loads(out.read_bytes())
    print(report.text())
    assert len(report.events) == 1 and report.restarts == 1, report.text()
    assert report.events[0].producing, report.text()     # killed while records were still arriving
    assert all(any(name == "java" for _, name in e.killed) for e in report.events), report.text()
    assert report.failed == 0 and report.acked == report.sent == EVENTS, report.text()
    assert_exact(report, batch_lane=False)    # the batch lane's verdict is `lakehouse verify`'s, next

    verify = lakehouse(crash_broker, s3, "verify", "--table", "gold_revenue_per_minute", "--table", "silver_orders")
    print(verify.stdout, verify.stderr[-2000:])
    assert verify.returncode == 0, verify.stdout + verify.stderr[-2000:]
    assert "gold_revenue_per_minute" in verify.stdout and "silver_orders" in verify.stdout
    assert "0 real discrepancies" in verify.stdout, verify.stdout

    # The Delta log as the S3 server lists it: bronze_orders took its backlog in several commits (50 records each).
    keys = list_keys(s3, "lake/bronze/bronze_orders/_delta_log/")
    print("\n".join(keys))
    versions = sorted(int(m.group(1)) for k in keys if (m := re.search(r"/(\d{20})\.json$", k)))
    assert versions == list(range(len(versions))) and len(versions) >= 2, keys
    assert list_keys(s3, "lake/bronze/_checkpoints/bronze_orders/"), "the stream's checkpoint is on S3 too"

    # Time travel: the version before the newest holds fewer rows of the append-only bronze table than it does now.
    before = versions[-1] - 1
    sql = lakehouse(crash_broker, s3, "sql", "SELECT (SELECT count(*) FROM bronze_orders) AS now, "
                                             f"(SELECT count(*) FROM bronze_orders VERSION AS OF {before}) AS before")
    print(sql.stdout, sql.stderr[-2000:])
    assert sql.returncode == 0, sql.stdout + sql.stderr[-2000:]
    rows = [line for line in sql.stdout.splitlines() if re.fullmatch(r"[\s|]*\d+[\s|]+\d+[\s|]*", line)]
    now, earlier = (int(n) for n in re.findall(r"\d+", rows[-1]))
    assert 0 < earlier < now, sql.stdout


def _drill(home: str, jars_dir: str, port: str, controller_port: str, workdir: str, out: str) -> None:
    """The child's part: the drill with an S3-enabled Spark session for its checks; the report pickled to `out`."""
    from bench.drills import run_crash
    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark
    from lakehouse.schemas import topics
    from lakehouse.streaming.kafka_topics import ensure_topics

    settings = Settings.from_env({
        **{k: v for k, v in os.environ.items() if k.startswith("LAKEHOUSE_S3_") or k == "LAKEHOUSE_LAKE_ROOT"},
        "LAKEHOUSE_HOME": home, "LAKEHOUSE_JARS_DIR": jars_dir, "LAKEHOUSE_KAFKA_PORT": port,
        "LAKEHOUSE_KAFKA_CONTROLLER_PORT": controller_port, "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "2"})
    ensure_topics(settings.kafka_bootstrap, topics.ALL)
    sessions = []

    def spark():
        sessions.append(get_spark(settings, "s3-lake-drill"))
        return sessions[-1]

    lake = {k: v for k, v in os.environ.items() if k.startswith("LAKEHOUSE_S3_") or k == "LAKEHOUSE_LAKE_ROOT"}
    try:
        report = run_crash(settings, kills=1, events=EVENTS, seed=41, tables=TABLES, spark=spark, workdir=Path(workdir),
                           max_delay_s=2, reach_s=60, targets=("silver_orders",), cycle_guess_s=400,
                           commit_timeout_s=300, catch_up_s=300, extra_env={**SMALL, **SMALLER, **lake}, verify_layers=())
    finally:
        for session in sessions:
            session.stop()
    Path(out).write_bytes(pickle.dumps(report))


if __name__ == "__main__":
    _drill(*sys.argv[1:])
