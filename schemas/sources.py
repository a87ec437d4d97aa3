"""Event sources, each declared once: its topic, bronze and silver tables, flows and Dagster assets follow.

A pipeline package declares its sources with `Source` (see the README, "Your own pipeline"); nothing in the
engine is edited: the topic asset, the bronze and silver flows, the quarantine and late-arrival routing,
the tables and the assets are built from the declaration. `SOURCES` and `BY_TOPIC` are the active
pipeline's (LAKEHOUSE_PIPELINE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.schemas.events import EventSchema
from lakehouse.schemas.tables import KAFKA_COORDINATES, TableSpec
from lakehouse.schemas.topics import DAY_MS, TopicSpec


def column(name: str, dtype: DataType, doc: str) -> StructField:
    """A payload field with its description (shown in the Dagster UI and kept with the table's columns)."""
    return StructField(name, dtype, True, metadata={"comment": doc})


def envelope() -> list[StructField]:
    """Every event carries an id, when it happened and when its producer sent it."""
    return [
        column("event_id", StringType(), "Unique id of the event; a producer's retry repeats it."),
        column("occurred_at", StringType(), "Event time: when it happened, by the producer's clock (UTC)."),
        column("sent_at", StringType(), "When the producer sent it (UTC)."),
    ]


# Columns silver adds to every source, with what they mean.
LINEAGE_DOCS = {
    "event_date": "UTC date of the event time; silver's partition column.",
    "topic": "Kafka topic the record was read from.",
    "partition": "Kafka partition of the record.",
    "offset": "Kafka offset of the record within its partition.",
    "appended_at": "When the broker appended the record to its log (UTC).",
    "ingested_at": "When bronze wrote the record to the lake (UTC).",
}


@dataclass(frozen=True)
class Dimension:
    """A changelog source kept as a slowly changing dimension (type 2): one row per key and version.

    Each change event of the source is one version of its key, valid from the change's event time until
    the next version's (`valid_to`, NULL for the current one). The topic may be compacted (it keeps each
    key's latest change); the dimension table keeps the history, so a join can ask what was true when.
    """

    key: str                          # the entity's id; the source's Kafka key
    attributes: tuple[str, ...]       # the payload fields a version carries
    description: str = ""


# Columns a dimension table adds to its key and attributes, with what they mean.
DIMENSION_DOCS = {
    "valid_from": "When this version took effect: the change's event time (UTC).",
    "valid_to": "When the next version took effect (UTC); NULL for the current version.",
    "is_current": "True for the key's current version (valid_to is NULL).",
    "event_id": "The change event this version came from.",
    "topic": "Kafka topic of the change event.",
    "partition": "Kafka partition of the change event.",
    "offset": "Kafka offset of the change event within its partition.",
}


@dataclass(frozen=True)
class Changelog:
    """A database table captured by CDC: its topic carries Debezium's change envelope, not events.

    Its silver table is the table's current state (SCD1: one row per key, a delete removes it) and its dimension
    the table's history (SCD2), both applied in the database's log order (streaming/changelog_batches.py).
    """

    table: Any                        # schemas.database.DbTable
    remember_deletes: str = "7 days"  # how long a deleted key is remembered, so that an older change never revives it


# Columns a changelog's tables add to the database row, with what they mean.
CHANGE_DOCS = {
    "_lsn": "The change's position in the database's write-ahead log (Debezium's source.lsn).",
    "_order": "Order of the change in the database's log: its LSN, a snapshot's read before a change at the same LSN.",
    "_changed_at": "When the database committed the change (source.ts_ms, UTC).",
    "topic": "Kafka topic of the change record.",
    "partition": "Kafka partition of the change record.",
    "offset": "Kafka offset of the change record within its partition.",
}
HISTORY_DOCS = {
    "valid_from": "When this version was committed in the database (UTC).",
    "valid_to": "When the next change to the key was committed (UTC); NULL for the current version.",
    "is_current": "True for the key's current version; a deleted key has none.",
    "_end_lsn": "Log position of the change that ended this version; NULL for the current one.",
    "_end_order": "Order of the change that ended this version; NULL for the current one.",
    "_closed_by_delete": "True when a delete in the database ended this version.",
}


def changelog_source(database: Any, table: str, *, entity: str, description: str,
                     docs: Mapping[str, str] | None = None, remember_deletes: str = "7 days",
                     tombstones_ms: int = DAY_MS) -> Source:
    """A database table's CDC topic as a source: Debezium's envelope on a compacted one-partition topic, kept as
    silver_<entity> (current state, SCD1) and dim_<entity> (history, SCD2).

    `docs` describe the table's columns; `tombstones_ms` is how long the topic keeps a delete's tombstone after
    compaction (delete.retention.ms), so that a reader behind by less than that still sees the delete.
    """
    db_table = database.table(table)
    docs = docs or {}
    fields = tuple(column(f.name, f.dataType, docs.get(f.name, f"The {f.name} column of the database's {table} table."))
                   for f in db_table.spark_columns().fields)
    attributes = tuple(f.name for f in fields if f.name != db_table.key)
    return Source(
        topic=database.topic(table), entity=entity, description=description, fields=fields, required=(db_table.key,),
        key=db_table.key, partitions=1, retention_ms=-1, cleanup_policy="compact",
        extra_config={"delete.retention.ms": str(tombstones_ms)}, timestamps=(), event_time="_changed_at",
        dimension=Dimension(key=db_table.key, attributes=attributes, description=description),
        changelog=Changelog(table=db_table, remember_deletes=remember_deletes),
    )


@dataclass(frozen=True)
class Source:
    """One event source: topic, payload schema, key, partitions, retention, rules, event time, watermark."""

    topic: str                               # <domain>.<entity>.v<N>; a new version is a new source
    entity: str                              # names its tables: bronze_<entity>, silver_<entity>
    description: str
    fields: tuple[StructField, ...]          # the JSON payload; instants are ISO-8601 strings
    required: tuple[str, ...]
    key: str                                 # records with the same key share a partition, so keep their order
    rules: Mapping[str, str] = field(default_factory=dict)    # rule name -> SQL predicate a valid event meets
    derived: Mapping[str, str] = field(default_factory=dict)  # silver column -> SQL expression over the payload
    derived_docs: Mapping[str, str] = field(default_factory=dict)
    partitions: int = 3
    retention_ms: int = 7 * DAY_MS
    cleanup_policy: str = "delete"
    extra_config: Mapping[str, str] = field(default_factory=dict)   # more topic settings, e.g. delete.retention.ms
    timestamps: tuple[str, ...] = ("occurred_at", "sent_at")
    event_time: str = "occurred_at"
    dedup_watermark: str | None = None       # how long silver remembers ids; None: LAKEHOUSE_SILVER_DEDUP_WATERMARK
    dimension: Dimension | None = None       # a changelog kept as an SCD2 table dim_<entity>, besides silver
    changelog: Changelog | None = None       # a database table's CDC topic (see `changelog_source`)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        dim = (self.dimension.key, *self.dimension.attributes) if self.dimension else ()
        times = () if self.changelog else (*self.timestamps, self.event_time)
        for name in (*self.required, *times, self.key, *dim):
            if name not in names:
                raise ValueError(f"source {self.topic}: {name!r} is not one of its fields ({', '.join(names)})")
        if self.dimension and self.dimension.key != self.key:
            raise ValueError(f"source {self.topic}: the dimension's key {self.dimension.key!r} must be the "
                             f"source's Kafka key {self.key!r}, so that a key's changes keep their order")

    @property
    def schema(self) -> EventSchema:
        return EventSchema(
            name=self.topic, entity=self.entity, payload=StructType(list(self.fields)), required=self.required,
            timestamps=self.timestamps, event_time=self.event_time,
            rules=tuple(self.rules.items()), derived=tuple(self.derived.items()),
        )

    @property
    def topic_spec(self) -> TopicSpec:
        return TopicSpec(
            schema=self.schema, key_field=self.key, partitions=self.partitions, retention_ms=self.retention_ms,
            cleanup_policy=self.cleanup_policy, description=self.description, extra_config=self.extra_config,
        )

    @property
    def bronze_table(self) -> TableSpec:
        return TableSpec(
            f"bronze_{self.entity}", "bronze", f"Raw {self.topic} records from Kafka, unparsed, with their coordinates.",
            KAFKA_COORDINATES,
        )

    @property
    def silver_table(self) -> TableSpec:
        if self.changelog:
            return TableSpec(f"silver_{self.entity}", "silver",
                             f"{self.description} Current state (SCD1): one row per key as the database holds it.",
                             (self.key,))
        return TableSpec(
            f"silver_{self.entity}", "silver", f"{self.description} Parsed, validated, deduplicated.",
            ("event_id",), ("event_date",),
        )

    def deletes_table(self, of: TableSpec) -> TableSpec:
        """<table>_deletes: the keys a changelog's table saw deleted, remembered with the delete's log position."""
        assert self.changelog is not None, f"source {self.topic} is not a changelog"
        return TableSpec(f"{of.name}_deletes", "silver",
                         f"Keys deleted in the database, remembered {self.changelog.remember_deletes} by {of.name}'s "
                         "flow with the delete's log position, so that an older change arriving later never revives "
                         "them.", (self.key, "_order"))

    @property
    def dimension_table(self) -> TableSpec | None:
        """dim_<entity>: every version of every key with its validity interval (layer silver); None if no dimension."""
        if self.dimension is None:
            return None
        if self.changelog:
            return TableSpec(f"dim_{self.entity}", "silver",
                             f"{self.dimension.description or self.description} Every version in the database's log "
                             "order, valid from its commit time (SCD2); a delete closes the current one.",
                             (self.key, "_order"))
        return TableSpec(
            f"dim_{self.entity}", "silver",
            f"{self.dimension.description or self.description} Every version with its validity interval (SCD2).",
            (self.dimension.key, "valid_from", "event_id"),
        )

    @property
    def dimension_schema(self) -> StructType | None:
        """The columns of dim_<entity>, with their descriptions."""
        if self.dimension is None:
            return None
        by_name = {f.name: f for f in self.fields}
        docs = DIMENSION_DOCS
        return StructType([
            *(by_name[name] for name in (self.dimension.key, *self.dimension.attributes)),
            StructField("valid_from", TimestampType(), True, metadata={"comment": docs["valid_from"]}),
            StructField("valid_to", TimestampType(), True, metadata={"comment": docs["valid_to"]}),
            StructField("is_current", BooleanType(), True, metadata={"comment": docs["is_current"]}),
            StructField("event_id", StringType(), True, metadata={"comment": docs["event_id"]}),
            StructField("topic", StringType(), True, metadata={"comment": docs["topic"]}),
            StructField("partition", IntegerType(), True, metadata={"comment": docs["partition"]}),
            StructField("offset", LongType(), True, metadata={"comment": docs["offset"]}),
        ])

    def column_docs(self) -> dict[str, str]:
        """Description of every silver column: payload fields, derived columns, lineage."""
        docs = {f.name: f.metadata.get("comment", "") for f in self.fields}
        if self.changelog:
            return {**docs, **CHANGE_DOCS}
        return {**docs, **self.derived_docs, **LINEAGE_DOCS}

    def dimension_column_docs(self) -> dict[str, str]:
        """Description of every dim_<entity> column (empty if the source has no dimension)."""
        if self.changelog:
            docs = {f.name: f.metadata.get("comment", "") for f in self.fields}
            return {**docs, **CHANGE_DOCS, **HISTORY_DOCS}
        schema = self.dimension_schema
        return {} if schema is None else {f.name: f.metadata.get("comment", "") for f in schema.fields}


def __getattr__(name: str):
    """SOURCES and BY_TOPIC: the sources of the pipeline LAKEHOUSE_PIPELINE names, in its order."""
    from lakehouse.schemas.pipeline import active_pipeline

    if name == "SOURCES":
        return tuple(active_pipeline().sources)
    if name == "BY_TOPIC":
        return {source.topic: source for source in active_pipeline().sources}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
