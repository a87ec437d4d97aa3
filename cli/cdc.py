"""`lakehouse cdc start|stop|status`: Debezium's capture of the operational database into Kafka, in a Connect worker."""

from __future__ import annotations

import argparse
import sys

from lakehouse.infra.settings import Settings


def add_cdc_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse cdc`."""
    p = sub.add_parser(
        "cdc", help="start, stop or check the change data capture of the operational database (Debezium)",
        description="Runs Debezium's PostgreSQL connector in a Kafka Connect worker (standalone, REST on "
                    "127.0.0.1:LAKEHOUSE_CDC_PORT, state in <home>/cdc). Its first start snapshots every table of "
                    "the pipeline's database at one log position, then streams each committed insert, update and "
                    "delete (a delete is followed by a tombstone) to the compacted topic <database>.cdc.public."
                    "<table>; a restart resumes from the log position it recorded. Needs `lakehouse postgres start` "
                    "and the broker.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.set_defaults(fn=cmd_cdc)


def cmd_cdc(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.jars import JarsMissing
    from lakehouse.infra.kafka_connect import CaptureError, connector_config, connector_state, local_worker
    from lakehouse.infra.postgres import PostgresError, local_postgres
    from lakehouse.schemas.database import DatabaseError, operational_database

    try:
        database = operational_database()
        worker = local_worker(settings)
        name = database.connector
        if args.action == "stop":
            pid = worker.stop()
            print(f"Change data capture stopped (Kafka Connect pid {pid})." if pid
                  else "Change data capture was not running.")
            return 0
        postgres = local_postgres(settings, database.name)
        if args.action == "start":
            postgres.require_running()
            _declared_topics(settings, database)
            pid = worker.start([connector_config(database, postgres)])
            topics = ", ".join(database.topic(t.name) for t in database.tables)
            print(f"Change data capture running: connector {name} in Kafka Connect pid {pid} (REST {worker.url}), "
                  f"database {database.name} at {postgres.host}:{postgres.port} -> {topics}; log "
                  f"{worker.logs_dir}/server.log.")
            return 0
        pid = worker.read_pid()
        state = connector_state(worker.connector_status(name)) if pid else "not running"
        slot = _slot(postgres, database.slot)
        print(f"Change data capture: connector {name} {state}" + (f" (Kafka Connect pid {pid}, REST {worker.url})"
                                                                    if pid else "") + f"; {slot}.")
        return 0 if state == "RUNNING" else 1
    except (CaptureError, PostgresError, DatabaseError, JarsMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _declared_topics(settings: Settings, database) -> None:
    """The pipeline's changelog sources of this database get their topics as declared (compaction, tombstone
    retention) before Debezium would create them with its own defaults."""
    from lakehouse.schemas.pipeline import active_pipeline
    from lakehouse.infra.retention import duration_ms
    from lakehouse.streaming.kafka_topics import ensure_topics

    captured = {database.topic(t.name) for t in database.tables}
    specs = [s.topic_spec for s in active_pipeline().sources if s.changelog is not None and s.topic in captured]
    if specs:
        ensure_topics(settings.kafka_bootstrap, specs, replication_factor=settings.kafka_replication_factor,
                      replay_window_ms=duration_ms(settings.replay_window))


def _slot(postgres, slot: str) -> str:
    """The replication slot's state as the database reports it: active or not, and how far it was confirmed."""
    if postgres.read_pid() is None:
        return f"PostgreSQL is not running at {postgres.host}:{postgres.port}"
    with postgres.connect() as conn:
        row = conn.execute("SELECT active, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    if row is None:
        return f"no replication slot {slot} yet"
    return f"replication slot {slot} {'active' if row[0] else 'inactive'}, confirmed up to {row[1]}"
