"""A pipeline's operational database: the tables a real PostgreSQL holds for CDC to capture, and their first rows.

A pipeline declares `Database(...)` in its PIPELINE; the engine creates the database, its tables (each with the
whole old row in its log: REPLICA IDENTITY FULL, so a delete or an update carries its before image) and one
publication of them that Debezium's pgoutput plugin reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

PUBLICATION = "lakehouse_cdc"
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


class DatabaseError(ValueError):
    """A pipeline without an operational database, or one declared wrongly; the message says which."""


@dataclass(frozen=True)
class DbTable:
    """One table of the operational database: its key column first among `columns` ((name, SQL type) pairs)."""

    name: str
    key: str
    columns: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        names = [c for c, _ in self.columns]
        if not _NAME.fullmatch(self.name) or not all(_NAME.fullmatch(c) for c in names):
            raise DatabaseError(f"table {self.name}: use lower-case names of letters, digits and _ for it and its "
                                "columns.")
        if self.key not in names:
            raise DatabaseError(f"table {self.name}: its key {self.key} is not one of its columns.")

    def spark_columns(self) -> Any:
        """The row as Debezium's JSON carries it, as a Spark schema: text, timestamps and numerics as strings."""
        from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

        kinds = {"bigint": LongType(), "integer": IntegerType(), "int": IntegerType(), "smallint": IntegerType(),
                 "boolean": BooleanType()}
        return StructType([StructField(name, kinds.get(kind.split()[0].lower(), StringType()))
                           for name, kind in self.columns])

    def ddl(self) -> str:
        columns = ", ".join(f"{name} {kind}" for name, kind in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({columns}, PRIMARY KEY ({self.key}))"


@dataclass(frozen=True)
class Database:
    """A pipeline's operational database: its name, tables, and the rows each holds when first created."""

    name: str
    tables: tuple[DbTable, ...]
    seed: Callable[[], Mapping[str, list[dict[str, Any]]]]    # table -> rows (column -> value)
    # One realistic change, given a random.Random and an open connection: (table, insert|update|delete).
    mutate: Callable[[Any, Any], tuple[str, str]] | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DatabaseError(f"database {self.name!r}: use a lower-case name of letters, digits and _.")

    @property
    def publication(self) -> str:
        return PUBLICATION

    # The names its capture uses (infra/kafka_connect.py): Debezium's connector, its replication slot, and the
    # topic of each table (Debezium's <topic.prefix>.<schema>.<table>).
    @property
    def connector(self) -> str:
        return f"{self.name}-cdc"

    @property
    def slot(self) -> str:
        return f"lakehouse_{self.name}"

    @property
    def topic_prefix(self) -> str:
        return f"{self.name}.cdc"

    def topic(self, table: str) -> str:
        return f"{self.topic_prefix}.public.{table}"

    def table(self, name: str) -> DbTable:
        """The table of that name, or one sentence naming the tables there are."""
        found = {t.name: t for t in self.tables}
        if name not in found:
            raise DatabaseError(f"database {self.name} declares no table {name}; its tables are "
                                f"{', '.join(found)}.")
        return found[name]


def operational_database() -> Database:
    """The database the active pipeline declares, or one sentence saying it declares none."""
    from lakehouse.schemas.pipeline import active_pipeline

    pipeline = active_pipeline()
    if pipeline.database is None:
        raise DatabaseError(f"pipeline {pipeline.name} declares no operational database; add database=Database(...) "
                            "to its PIPELINE to capture one with CDC.")
    return pipeline.database


def prepare(server: Any, database: Database) -> bool:
    """Create the database, its tables, their first rows and the publication, where missing; True if it was new."""
    with server.connect("postgres", autocommit=True) as conn:
        created = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database.name,)).fetchone() is None
        if created:
            conn.execute(f"CREATE DATABASE {database.name}")
    with server.connect(database.name) as conn:
        for table in database.tables:
            conn.execute(table.ddl())
            conn.execute(f"ALTER TABLE {table.name} REPLICA IDENTITY FULL")
        rows = database.seed()
        for table in database.tables:
            if conn.execute(f"SELECT 1 FROM {table.name} LIMIT 1").fetchone() is None and rows.get(table.name):
                names = [c for c, _ in table.columns if c in rows[table.name][0]]
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
                        [tuple(r[n] for n in names) for r in rows[table.name]])
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone() is None:
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {', '.join(t.name for t in database.tables)}")
    return created


def table_counts(server: Any, database: Database) -> dict[str, int]:
    """Rows in each of the database's tables."""
    with server.connect() as conn:
        return {t.name: conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in database.tables}
