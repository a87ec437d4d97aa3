"""`lakehouse serve` as a user runs it: sql and history go to its Spark Connect server, runs to its session, and without it all still work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path


from lakehouse.streaming.shared_tables import SHARED_TABLES
from tests.conftest import free_port
from tests.e2e.test_cli_commands import LAKEHOUSE, _end_offsets, environment, lakehouse


NOTICE = "no lakehouse serve running"
ANSWERED = " over Spark Connect in "   # lakehouse sql's and history's log line when they used lakehouse serve
JVM = "starting a Spark session"     # what a process that starts Spark logs first

# A materialization of one asset (of a range of its partitions, if days are given) as the UI makes one: a run
# of the implicit asset job, in its own process. It prints the materialization's and the checks' metadata.
WARMED = "warmed up the run path in"
MATERIALIZE = """
import json, sys
from lakehouse.infra.settings import Settings
from lakehouse.cli import main as cli
from lakehouse.orchestration import runs
settings = Settings.from_env()
cli._setup_logging(settings, verbose=False, quiet=True)
asset, days = sys.argv[1], tuple(sys.argv[2:]) or None
result = runs.run_job(settings, "__ASSET_JOB", selection=[asset], partition_range=days)
plain = lambda m: {k: getattr(v, "value", v) for k, v in m.items() if isinstance(getattr(v, "value", v), (int, float, str))}
checks = {e.check_name: {"passed": e.passed, **plain(e.metadata)} for e in result.get_asset_check_evaluations()}
print(json.dumps({"metadata": plain(runs.materialized_metadata(result)[asset]), "checks": checks}))
sys.exit(runs.exit_status(result))
"""


def _materialize(broker, env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([str(LAKEHOUSE.with_name("python")), "-c", MATERIALIZE, *args],
                          env=environment(broker, **env), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rows_on(bootstrap: str, topic: str) -> int:
    return sum(n for (name, _), n in _end_offsets(bootstrap).items() if name == topic)


def test_serve_answers_sql_and_history_and_sees_tables_created_after_it_started(broker, tmp_path):
    """With lakehouse serve up, sql and history answer from it (no JVM of their own), errors stay one sentence."""
    home = str(tmp_path / "home")
    env = {"LAKEHOUSE_HOME": home}
    out = open(tmp_path / "serve.out", "w")
    port = free_port()
    server = subprocess.Popen([str(LAKEHOUSE), "serve", "--port", str(port)], env=environment(broker, **env), stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    state = Path(home) / "serve.json"
    log = Path(home) / "logs" / "lakehouse.log"   # the endpoint's and every command's log
    try:
        deadline = time.monotonic() + 300
        while not state.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state.exists(), (tmp_path / "serve.out").read_text()[-3000:]
        assert json.loads(state.read_text())["pid"] == server.pid
        assert json.loads(state.read_text())["connect_port"] == port
        second = lakehouse(broker, "serve", "--port", str(free_port()), **env)
        assert second.returncode == 2 and second.stderr.startswith(
            f"error: lakehouse serve is already running for this lake (pid {server.pid})"), second.stderr[-2000:]

        # The lake was empty when the endpoint started: the table it now answers for came later.
        assert lakehouse(broker, "topics", **env).returncode == 0
        assert lakehouse(broker, "produce", "--count", "200", "--seed", "31", **env).returncode == 0
        ran = lakehouse(broker, "run", "bronze_customers", **env)
        assert ran.returncode == 0, ran.stderr[-2000:]
        expected = _rows_on(broker.kafka_bootstrap, "shop.customers.v1")
        # The run's catch-up ran in the endpoint's session: one JVM so far, the endpoint's own.
        assert log.read_text().count(JVM) == 1 and log.read_text().count("ran a catch_up step in") == 1, ran.stderr[-2000:]
        # Before it, the endpoint warmed the run path up on a scratch lake of its own and deleted it: nothing of
        # the warm-up's silver, gold or backfill is in the lake it serves.
        text = log.read_text()
        assert WARMED in text and text.index(WARMED) < text.index("ran a catch_up step in"), text[-3000:]
        assert not (Path(home) / "serve-warm-up").exists()
        # The run's own shared tables (created empty before its flow wrote), and no silver or gold table.
        in_silver = {p.name for p in (Path(home) / "lake" / "silver").iterdir()}
        assert in_silver <= {t.name for t in SHARED_TABLES} and not (Path(home) / "lake" / "gold").exists(), in_silver

        query = lakehouse(broker, "sql", "SELECT count(*) AS n FROM bronze_customers", **env)
        assert query.returncode == 0, query.stderr[-2000:]
        assert log.read_text().count(ANSWERED) == 1 and NOTICE not in log.read_text(), "the endpoint did not answer"
        # Every record of the topic, malformed or not, is one bronze row.
        assert int(query.stdout.splitlines()[2]) == expected > 0 and "(1 row)" in query.stdout

        history = lakehouse(broker, "history", "bronze_customers", **env)
        assert history.returncode == 0 and log.read_text().count(ANSWERED) == 2, history.stderr[-2000:]
        assert history.stdout.splitlines()[2].split("|")[0].strip() == "0"

        for i, (args, sentence) in enumerate( [(("sql", "SELECT * FROM bronze_custmers"), "There is no table named bronze_custmers"),
                               (("sql", "DELETE FROM bronze_customers"), "This server is read-only and a DELETE statement"),
                               (("history", "gold_nothing"), "There is no table named gold_nothing")]):
            proc = lakehouse(broker, *args, **env)
            errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
            assert proc.returncode == 2 and len(errors) == 1 and sentence in errors[0], (args, proc.stderr[-2000:])
            assert "Traceback" not in proc.stderr
            assert log.read_text().count(ANSWERED) == 3 + i and NOTICE not in log.read_text()

        # A materialization from the UI of a table that catches up runs there too, and its metadata comes back.
        assert lakehouse(broker, "produce", "--count", "120", "--seed", "32", **env).returncode == 0
        total = _rows_on(broker.kafka_bootstrap, "shop.customers.v1")
        metadata = _materialize(broker, env, "bronze_customers")["metadata"]
        assert metadata["dagster/row_count"] == total > expected, metadata
        assert metadata["rows_written"] == metadata["records_consumed"] == total - expected, metadata
        assert log.read_text().count(JVM) == 1 and log.read_text().count("ran a table step in") == 1

        # A range of silver's daily partitions materialized from the UI is a backfill: it runs there too, and so
        # do the checks that read tables (accounting, freshness), each step sent on its own.
        today = datetime.now(timezone.utc).date()
        days = ((today - timedelta(days=1)).isoformat(), today.isoformat())   # the events' dates: sent just now
        silver = _materialize(broker, env, "silver_customers", *days)
        assert log.read_text().count(JVM) == 1 and log.read_text().count("ran a backfill step in") == 1
        assert log.read_text().count("ran a check step in") >= 2, silver
        metadata, checks = silver["metadata"], silver["checks"]
        # The backfill first caught silver up from bronze; the batch lane then agrees with it row for row.
        assert (metadata["rows_added"], metadata["rows_changed"], metadata["rows_removed"]) == (0, 0, 0), metadata
        assert checks["matches_batch"]["passed"] and checks["matches_batch"]["status"] == "clean", checks
        # ... from the backfill step's own recomputation, which that check does not make a second time.
        assert checks["matches_batch"]["verified_by"] == "this run's backfill step", checks
        # Every record on the topic is in bronze, and each is in exactly one place after silver.
        assert checks["accounting"]["passed"] and checks["accounting"]["bronze"] == total, checks
        assert checks["accounting"]["silver"] == metadata["rows_in_range_after"] > 0, (checks, metadata)
    finally:
        os.kill(server.pid, signal.SIGTERM)   # as `kill PID` does; its JVM is stopped by the endpoint
        try:
            code = server.wait(timeout=120)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
    assert code == 0, (tmp_path / "serve.out").read_text()[-3000:]
    assert not state.exists(), "a stopped endpoint left its state file"

    # Without an endpoint the command starts Spark itself, says so, and gives the same answer.
    alone = lakehouse(broker, "sql", "SELECT count(*) AS n FROM bronze_customers", **env)
    assert alone.returncode == 0 and NOTICE in log.read_text(), alone.stderr[-2000:]
    assert int(alone.stdout.splitlines()[2]) == total
