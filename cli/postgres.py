"""`lakehouse postgres start|stop|status`: the pipeline's operational database, a real PostgreSQL on this machine."""

from __future__ import annotations

import argparse
import sys

from lakehouse.infra.settings import Settings


def add_postgres_commands(sub: argparse._SubParsersAction) -> None:
    """Register `lakehouse postgres`."""
    p = sub.add_parser(
        "postgres", help="start, stop or check the pipeline's operational database (PostgreSQL, for CDC)",
        description="Runs PostgreSQL on 127.0.0.1:LAKEHOUSE_POSTGRES_PORT with its data folder and log in "
                    "<home>/postgres and wal_level=logical, so that `lakehouse cdc` can capture its changes. The "
                    "first start creates the folder, the pipeline's database and its tables with their first rows; "
                    "later starts keep what the database holds. Stopping ends open sessions (a fast shutdown).")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.set_defaults(fn=cmd_postgres)

    db = sub.add_parser(
        "db", help="change the operational database as its applications would (for CDC)",
        description="`lakehouse db mutate` makes realistic inserts, updates and deletes in the pipeline's database "
                    "(`lakehouse postgres start` first), each change its own transaction, for the capture to carry "
                    "while a stream runs.")
    actions = db.add_subparsers(dest="action", required=True)
    m = actions.add_parser("mutate", help="make N realistic changes, each its own transaction")
    m.add_argument("--count", type=_positive, default=100, help="changes to make (default 100)")
    m.add_argument("--rate", type=float, default=0.0,
                   help="changes per second (default 0: as fast as the database takes them)")
    m.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable round (default: a new one)")
    m.set_defaults(fn=cmd_db)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def cmd_db(settings: Settings, args: argparse.Namespace) -> int:
    import random
    import time
    from collections import Counter

    from lakehouse.infra.postgres import PostgresError, local_postgres
    from lakehouse.schemas.database import DatabaseError, operational_database

    try:
        database = operational_database()
        if database.mutate is None:
            raise DatabaseError(f"database {database.name} declares no mutate function; add mutate= to its Database.")
        server = local_postgres(settings, database.name)
        server.require_running()
        rng = random.Random(args.seed)
        made: Counter = Counter()
        started = time.monotonic()
        with server.connect(autocommit=True) as conn:
            for i in range(args.count):
                if args.rate > 0:
                    time.sleep(max(0.0, started + i / args.rate - time.monotonic()))
                with conn.transaction():
                    made[database.mutate(rng, conn)] += 1
        print(f"Made {args.count:,} changes in {time.monotonic() - started:.1f} s: " + ", ".join(
            f"{table} {kind} {n}" for (table, kind), n in sorted(made.items())) + ".")
        return 0
    except (PostgresError, DatabaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_postgres(settings: Settings, args: argparse.Namespace) -> int:
    from lakehouse.infra.postgres import PostgresError, local_postgres
    from lakehouse.schemas.database import DatabaseError, operational_database, prepare, table_counts

    try:
        database = operational_database()
        server = local_postgres(settings, database.name)
        if args.action == "start":
            pid = server.start()
            made = prepare(server, database)
            counts = table_counts(server, database)
            print(f"PostgreSQL running, pid {pid}, at {server.host}:{server.port} (wal_level "
                  f"{server.setting('wal_level')}); data {server.data_dir}, log {server.log_file}.")
            print(f"Database {database.name}: " + ", ".join(f"{t} {n:,} rows" for t, n in counts.items()) +
                  (" (created now)." if made else "."))
            print(f"Connect with: psql \"{server.dsn}\"")
            return 0
        if args.action == "stop":
            pid = server.stop()
            print(f"PostgreSQL stopped (pid {pid})." if pid else "PostgreSQL was not running.")
            return 0
        pid = server.read_pid()
        if pid is None:
            print(f"PostgreSQL is not running at {server.host}:{server.port} (data {server.data_dir}).")
            return 1
        counts = table_counts(server, database)
        print(f"PostgreSQL running, pid {pid}, at {server.host}:{server.port} (wal_level "
              f"{server.setting('wal_level')}); database {database.name}: " +
              ", ".join(f"{t} {n:,} rows" for t, n in counts.items()) + ".")
        return 0
    except (PostgresError, DatabaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
