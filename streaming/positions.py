"""Where a flow's sources stood when it wrote: recorded with every Delta commit, read back when a checkpoint is lost.

A streaming query keeps its source positions in its checkpoint folder. If that folder is lost or
corrupt, the positions must come from somewhere else, or the stream would read everything again
(duplicates) or start at the end (loss). So every commit a flow writes records them, in Delta's
commitInfo `userMetadata` (`DESCRIBE HISTORY` shows it), as one JSON object:

    {"flow": "gold_sessions", "batch": 7,
     "sources": {"silver_page_views": {"version": 12}, "silver_orders": {"version": 9, "index": 3}}}

`sources` maps each source table to a position. Its forms, which mirror Delta's own streaming offset
(`DeltaSourceOffset`: reservoirVersion, index, isStartingVersion, in Delta 4.4):

- `{"version": V}`: every change before version V has been consumed and nothing of V or later.
  Resume with the Delta source option `startingVersion=V`. Delta's offset takes this form (index -1,
  its BASE_INDEX) when a micro-batch read a version to its end: it then moves on to the next version.
- `{"version": V, "index": I}`: every change before V, and also the files 0..I of version V (Delta
  numbers a version's data files in the order of its commit). A batch ends like this when
  maxFilesPerTrigger (default 1000) splits a version.
- `{"version": V, "index": I, "snapshot": true}`: files 0..I of the *initial snapshot* of version V
  (Delta's first read of a table it did not start at a given version; the files in Delta's snapshot
  order), nothing else.

A position inside a version cannot be expressed as a Delta read option: `startingVersion=V` would read
files 0..I again. So positions recorded by a stream also carry what is needed to resume it exactly:
`query` (the id Spark keeps in `<checkpoint>/metadata`), `app` (the flow's base txn app id), the
batch's start (`from`, same forms; for batch 0 the startingVersion it began at, absent if it began
with the initial snapshot), Delta's table id per source (`table_id`), the batch's time (`at`, and
`watermark_ms` if Spark kept one) and, on the last write of the batch only, `"final": true`. From those the runner rebuilds the lost
checkpoint as Spark had it (`rebuild_checkpoint`): the same batch numbers, the batch's exact start and
end offsets, and its commit mark if the batch was finished. A batch that was not finished is then
replayed by Spark with the same batch id and the same input, and because its writes carry Delta's
(txnAppId, txnVersion) = (app + the query id that first ran it, batch id), Delta skips the writes it
had made and applies the rest: exactly what happens after a crash with the checkpoint intact. Nothing
is read twice and nothing is skipped, whatever the index. The rebuilt checkpoint itself gets a new
query id (the replayed batch's id is kept beside it, `REPLAY_FILE`): the records of one query per
topic name that query for silver and each of its members, and two checkpoints with one id cannot run
at once (Spark's CONCURRENT_QUERY).

Positions without `query` (written by the batch lane's replay, `commit_metadata`) use the first form
only; the stream then starts with a new checkpoint at `startingVersion=V` per source. A new checkpoint
has a new query id, hence new txn app ids: Delta would otherwise silently skip every write whose batch
id (which restarts at 0) is not above the last one recorded for the old app id.

Bronze appends through Delta's own streaming sink and keeps each record's Kafka coordinates, so its
position is in its rows: per partition, the highest offset plus one (`bronze_positions`).

The public API, which the batch lane calls: `commit_metadata`, `recorded_positions`,
`bronze_positions`, `reset_checkpoint`. The rest serves the runner and the writers.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.streaming.delta_log import MAINTENANCE, table_id
from lakehouse.streaming.lake_files import hadoop_fs, has_delta_log

if TYPE_CHECKING:
    from lakehouse.streaming.context import FlowContext
    from lakehouse.streaming.flows import Flow

log = logging.getLogger(__name__)

# The session setting whose value Delta stores as the next commits' userMetadata (MERGE, UPDATE).
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"

Position = Mapping[str, Any]


# ---------------------------------------------------------------- the record

def commit_metadata(flow_name: str, batch_id: int | None, positions: Mapping[str, Position | int] | None,
                    **extra: Any) -> str:
    """The userMetadata JSON for a commit of `flow_name`'s batch `batch_id` that consumed its sources up to `positions`.

    `positions` maps a source table name to `{"version": V}` (every version before V consumed; the
    stream resumes with startingVersion=V), or to the other forms in this module's docstring; a bare
    int V means `{"version": V}`. None records no positions (the commit then only names the flow).
    `extra` keys (query, app, from, at, final) are what streams add; None values are left out.

    >>> commit_metadata("gold_sessions", -1, {"silver_orders": {"version": 9}})
    '{"flow":"gold_sessions","batch":-1,"sources":{"silver_orders":{"version":9}}}'
    """
    record: dict[str, Any] = {"flow": flow_name}
    if batch_id is not None:
        record["batch"] = int(batch_id)
    if positions is not None:
        record["sources"] = {name: _position(pos) for name, pos in positions.items()}
    for key, value in extra.items():
        if value is not None:
            record[key] = value
    return json.dumps(record, separators=(",", ":"))


def _position(pos: Position | int | None) -> dict[str, Any] | None:
    if pos is None:
        return None
    if isinstance(pos, int):
        pos = {"version": pos}
    if "offsets" in pos:   # a Kafka source of a foreachBatch flow: Spark's own offsets JSON
        return dict(pos)
    version = pos.get("version")
    if not isinstance(version, int) or version < 0:
        raise ValueError(f"a source position needs a non-negative integer version, not {pos!r}")
    out: dict[str, Any] = {"version": version}
    if pos.get("index", -1) != -1:
        out["index"] = int(pos["index"])
    if pos.get("snapshot"):
        out["snapshot"] = True
    if pos.get("table_id"):
        out["table_id"] = pos["table_id"]
    return out


def parse_metadata(text: str | None) -> dict[str, Any] | None:
    """The record in a commit's userMetadata, or None if it holds none (or something else)."""
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("flow"), str) else None


def is_exact_version(pos: Position | None) -> bool:
    """Whether a position is a version boundary, i.e. expressible as startingVersion."""
    return pos is not None and "offsets" not in pos and pos.get("index", -1) == -1 and not pos.get("snapshot")


def describe(positions: Mapping[str, Position | None]) -> str:
    """Positions in words, for the logs."""
    said = []
    for name, pos in positions.items():
        if pos is None:
            said.append(f"{name} not read yet")
        elif "offsets" in pos:
            said.append(f"{name} at Kafka offsets {json.dumps(pos['offsets'])}")
        elif pos.get("snapshot"):
            said.append(f"{name} file {pos.get('index', -1)} of its snapshot at version {pos['version']}")
        elif pos.get("index", -1) != -1:
            said.append(f"{name} version {pos['version']} up to its file {pos['index']}")
        else:
            said.append(f"{name} from version {pos['version']}")
    return ", ".join(said) or "no sources"


@dataclass(frozen=True)
class Recorded:
    """One commit's record, with the table and version it was found in."""

    table: str                 # path of the table
    table_version: int
    timestamp: datetime
    record: dict[str, Any]

    @property
    def batch(self) -> int:
        return int(self.record.get("batch", -1))

    @property
    def query(self) -> str | None:
        return self.record.get("query")

    @property
    def sources(self) -> dict[str, Any]:
        return self.record.get("sources") or {}


def _records(spark: SparkSession, table_path: str, flow_name: str) -> list[Recorded]:
    """Every commit of the table whose userMetadata names the flow, newest first.

    A compaction after a MERGE carries the MERGE's userMetadata (a session setting) but wrote no batch: passed over.
    """
    if not has_delta_log(spark, table_path):
        return []
    history = DeltaTable.forPath(spark, table_path).history().select("version", "timestamp", "userMetadata",
                                                                      "operation")
    rows = (history.where(F.get_json_object("userMetadata", "$.flow") == F.lit(flow_name))
            .where(~F.col("operation").isin(*MAINTENANCE))
            .orderBy(F.col("version").desc()).collect())
    found = []
    for row in rows:
        record = parse_metadata(row["userMetadata"])
        if record is not None and record["flow"] == flow_name:
            found.append(Recorded(table_path, int(row["version"]), row["timestamp"], record))
    return found


def recorded_positions(spark: SparkSession, table_path: str, flow_name: str) -> dict[str, Any] | None:
    """The record of the newest commit of the table at `table_path` that names `flow_name` and carries positions.

    Returns the record (`flow`, `batch`, `sources`, and for streams `query`, `from`, ...) with
    `table_version` added, or None when no commit of the table names the flow with positions.
    """
    for found in _records(spark, table_path, flow_name):
        if "sources" in found.record:
            return {**found.record, "table_version": found.table_version}
    return None


def resume_point(spark: SparkSession, flow_name: str, app: str, table_paths: Iterable[str]) -> Recorded | None:
    """Where a flow whose checkpoint is gone resumes: the newest batch it recorded in any table it writes.

    A batch writes several tables (silver, quarantine and late arrivals; a gold table, its late rows and
    its state), each commit with the same record, the last one marked final. So the newest batch is
    looked for in all of them: a batch that wrote only late rows, or that stopped half way, counts too.
    Records of another version of the flow (`app` differs) are ignored. Records are grouped by query:
    the query of the newest commit wins (a replay's swap, which has no query, after the stream's own
    batches, or a new stream after the swap), and within a query the highest batch number; the result
    is marked final if any of that batch's commits is. The record returned is the one in the first of
    `table_paths` that has the batch (the flow's target, if it does).
    """
    paths = list(table_paths)
    found = [r for path in paths for r in _records(spark, path, flow_name)
             if "sources" in r.record and r.record.get("app", app) == app]
    if not found:
        return None
    newest = max(found, key=lambda r: (r.timestamp, r.table_version))
    if newest.query is None:
        return newest
    same = [r for r in found if r.query == newest.query]
    batch = max(r.batch for r in same)
    of_batch = [r for r in same if r.batch == batch]
    final = any(r.record.get("final") for r in of_batch)
    order = {path: n for n, path in enumerate(paths)}   # the caller's first table (its target) is named first
    chosen = min(of_batch, key=lambda r: order.get(r.table, len(order)))
    return Recorded(chosen.table, chosen.table_version, chosen.timestamp, {**chosen.record, "final": final})


def bronze_positions(spark: SparkSession, bronze_path: str) -> dict[str, dict[int, int]]:
    """Where a bronze table's stream resumes: per topic and partition, the highest offset it holds plus one.

    Bronze rows carry their Kafka coordinates and the Delta sink commits each micro-batch atomically,
    so these are exactly the next records to read. Partitions bronze holds nothing of are absent
    (read them from the earliest offset). An empty or missing table gives {}.
    """
    if not has_delta_log(spark, bronze_path):
        return {}
    rows = (spark.read.format("delta").load(bronze_path).groupBy("topic", "partition")
            .agg(F.max("offset").alias("last")).collect())
    out: dict[str, dict[int, int]] = {}
    for row in rows:
        out.setdefault(row["topic"], {})[int(row["partition"])] = int(row["last"]) + 1
    return out


def kafka_starting_offsets(positions: Mapping[str, Mapping[int, int]], partitions: Mapping[str, Iterable[int]]) -> str:
    """Spark's startingOffsets JSON: every partition of each topic, at its position or earliest (-2)."""
    spec = {topic: {str(p): int(positions.get(topic, {}).get(p, -2)) for p in sorted(parts)}
            for topic, parts in partitions.items()}
    return json.dumps(spec, separators=(",", ":"))


# ---------------------------------------------------------------- checkpoint files (through Hadoop)

def exists(spark: SparkSession, path: str) -> bool:
    fs, jpath = hadoop_fs(spark, path)
    return bool(fs.exists(jpath))


def read_text(spark: SparkSession, path: str) -> str | None:
    """A small file's text, or None if it does not exist (raises if it cannot be read)."""
    fs, jpath = hadoop_fs(spark, path)
    if not fs.exists(jpath):
        return None
    stream = fs.open(jpath)
    try:
        return spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str) -> None:
    fs, jpath = hadoop_fs(spark, path)
    out = fs.create(jpath, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def _batch_files(spark: SparkSession, folder: str) -> list[int]:
    fs, jpath = hadoop_fs(spark, folder)
    if not fs.exists(jpath):
        return []
    return sorted(int(s.getPath().getName()) for s in fs.listStatus(jpath) if s.getPath().getName().isdigit())


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def move_aside(spark: SparkSession, checkpoint: str, why: str) -> str | None:
    """Rename the checkpoint folder to `<checkpoint>.<why>-<utc timestamp>`; None if there is none."""
    fs, jpath = hadoop_fs(spark, checkpoint)
    if not fs.exists(jpath):
        return None
    aside = f"{checkpoint.rstrip('/')}.{why}-{_utc_stamp()}"
    if not fs.rename(jpath, spark._jvm.org.apache.hadoop.fs.Path(aside)):
        raise OSError(f"could not move the checkpoint {checkpoint} aside to {aside}")
    return aside


def reset_checkpoint(flow: "Flow", ctx: "FlowContext", spark: SparkSession | None = None) -> str | None:
    """Move a flow's checkpoint folder aside (to `<checkpoint>.reset-<utc timestamp>`); returns where, or None.

    Call it with the flow's query stopped, after writing its target table with `commit_metadata`
    naming where its sources stand: the next run finds no checkpoint and resumes from the newest
    positions recorded for the flow (`startingVersion` per source), with a new checkpoint and so new
    txn app ids. A bronze flow resumes after the Kafka offsets its table holds. The old folder is
    kept for inspection; nothing reads it again.
    """
    spark = spark or SparkSession.getActiveSession()
    assert spark is not None, "reset_checkpoint needs an active Spark session"
    checkpoint = flow.checkpoint(ctx)
    aside = move_aside(spark, checkpoint, "reset")
    if aside:
        log.info("checkpoint of flow %s moved aside to %s; the flow resumes from its recorded positions", flow.name, aside)
    return aside


@dataclass(frozen=True)
class CheckpointState:
    """What a checkpoint folder holds: "ok", "missing" (no folder, or no offsets yet) or "corrupt"."""

    state: str
    reason: str = ""
    query_id: str | None = None
    folder_exists: bool = False


_VERSION_LINE = re.compile(r"^v\d+$")


def _check_log_file(text: str | None, what: str) -> str | None:
    """Why a Spark offsets or commits file cannot be read, or None if it looks sound."""
    if text is None:
        return f"{what} is missing"
    lines = text.split("\n")
    if len(lines) < 2 or not _VERSION_LINE.match(lines[0].strip()):
        return f"{what} does not start with a log version"
    for line in lines[1:]:
        if line.strip() in ("", "-"):
            continue
        try:
            if not isinstance(json.loads(line), dict):
                return f"{what} holds a line that is not a JSON object"
        except ValueError:
            return f"{what} holds a line that is not JSON"
    return None


def inspect_checkpoint(spark: SparkSession, checkpoint: str) -> CheckpointState:
    """Read a checkpoint's metadata and its latest offsets and commit files, without starting a query."""
    try:
        if not exists(spark, checkpoint):
            return CheckpointState("missing")
        try:
            meta = json.loads(read_text(spark, f"{checkpoint}/metadata") or "")
            query_id = meta["id"] if isinstance(meta, dict) and isinstance(meta.get("id"), str) else None
        except ValueError:
            query_id = None
        offsets = _batch_files(spark, f"{checkpoint}/offsets")
        if query_id is None:
            if not offsets:
                return CheckpointState("missing", "it holds neither a query id nor offsets", folder_exists=True)
            return CheckpointState("corrupt", "its metadata file holds no query id", folder_exists=True)
        if not offsets:
            return CheckpointState("missing", "it holds no offsets yet", query_id, folder_exists=True)
        why = _check_log_file(read_text(spark, f"{checkpoint}/offsets/{offsets[-1]}"), f"offsets/{offsets[-1]}")
        commits = _batch_files(spark, f"{checkpoint}/commits")
        if why is None and commits:
            why = _check_log_file(read_text(spark, f"{checkpoint}/commits/{commits[-1]}"), f"commits/{commits[-1]}")
        if why is None:
            try:
                parse_replay(read_text(spark, f"{checkpoint}/{REPLAY_FILE}"))
            except ValueError:
                why = f"its {REPLAY_FILE} file holds no batch number and query id"
        if why:
            return CheckpointState("corrupt", why, query_id, folder_exists=True)
        return CheckpointState("ok", "", query_id, folder_exists=True)
    except Exception as exc:  # noqa: BLE001 - a checksum error, an unreadable file: the folder cannot be used
        return CheckpointState("corrupt", f"it cannot be read: {_error_text(exc)}", folder_exists=True)


def _error_text(exc: Exception) -> str:
    """The first line of an error, the JVM's own if it came through py4j."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    return (text.splitlines() or [""])[0][:300]


# ---------------------------------------------------------------- Spark's offset log, read and rebuilt
# Spark 4.2 writes `<checkpoint>/offsets/<batch>` before it runs a batch: "v1", a JSON line of batch
# metadata (watermark, batch time, the SQL settings the query was planned with), then one line per
# source in the query's order (the source's offset JSON, or "-" if it has none yet);
# `<checkpoint>/commits/<batch>` ("v1", {"nextBatchWatermarkMs": ..}) once the batch is done; and
# `<checkpoint>/metadata` ({"id": <query id>}) when the query first starts.

# Beside a rebuilt checkpoint's offsets: the batch it replays and the query id that first ran it (whose txn ids
# the replay must write under). Spark ignores files of the checkpoint folder it does not know.
REPLAY_FILE = "lakehouse-replay"



def parse_replay(text: str | None) -> tuple[int, str] | None:
    """The (batch, query id) of a `REPLAY_FILE`'s text, None without one; ValueError when it holds anything else."""
    if text is None:
        return None
    meta = json.loads(text)
    if not (isinstance(meta, dict) and isinstance(meta.get("batch"), int) and isinstance(meta.get("query"), str)
            and meta["query"]):
        raise ValueError(f"{REPLAY_FILE} holds no batch number and query id")
    return meta["batch"], meta["query"]


# The SQL settings Spark 4.2 records with each batch (their values are taken from the session when a
# checkpoint is rebuilt, as Spark would for a new query). Spark requires at least the shuffle partitions.
OFFSET_LOG_CONF = (
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution",
    "spark.sql.streaming.stateStore.encodingFormat",
    "spark.sql.streaming.statefulOperator.useStrictDistribution",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.stateStore.rowChecksum.enabled",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.function.protobufExtensions.enabled",
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.join.stateFormatVersion",
    "spark.sql.streaming.stateStore.compression.codec",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
)
_COMMIT_FILE = 'v1\n{"nextBatchWatermarkMs":0}'


@dataclass(frozen=True)
class OffsetLogEntry:
    """One `offsets/<batch>` file: the batch time and each source's offset JSON (None for "-")."""

    batch_timestamp_ms: int
    watermark_ms: int
    offsets: tuple[dict[str, Any] | None, ...]


def read_offset_log(spark: SparkSession, checkpoint: str, batch_id: int) -> OffsetLogEntry | None:
    text = read_text(spark, f"{checkpoint}/offsets/{batch_id}")
    if text is None:
        return None
    lines = text.split("\n")
    meta = json.loads(lines[1])
    offsets = tuple(None if line.strip() == "-" else json.loads(line) for line in lines[2:] if line.strip())
    return OffsetLogEntry(int(meta.get("batchTimestampMs", 0)), int(meta.get("batchWatermarkMs", 0)), offsets)


def _from_offset(offset: dict[str, Any]) -> dict[str, Any]:
    """A source's offset JSON as a position (see the module docstring for the forms)."""
    if "reservoirId" in offset:
        pos: dict[str, Any] = {"version": int(offset["reservoirVersion"])}
        index = int(offset.get("index", -1))
        if index != -1:
            pos["index"] = index
        if offset.get("isStartingVersion"):
            pos["snapshot"] = True
        pos["table_id"] = offset["reservoirId"]
        return pos
    return {"offsets": offset}


def _to_offset(pos: Position | None) -> str:
    """A position as the offset line Spark reads back (Delta's DeltaSourceOffset JSON, or Kafka's)."""
    if pos is None:
        return "-"
    if "offsets" in pos:
        return json.dumps(pos["offsets"], separators=(",", ":"))
    index = int(pos.get("index", -1))
    return json.dumps({
        # Version 3 of Delta's format only for its schema-change indexes (-20, -19); -1 is its BASE_INDEX.
        "sourceVersion": 3 if index in (-20, -19) else 1,
        "reservoirId": pos["table_id"], "reservoirVersion": int(pos["version"]), "index": index,
        "isStartingVersion": bool(pos.get("snapshot", False)),
    }, separators=(",", ":"))


def _offsets_file(spark: SparkSession, positions: Mapping[str, Position | None], at_ms: int, watermark_ms: int) -> str:
    conf = {}
    for key in OFFSET_LOG_CONF:
        try:
            value = spark.conf.get(key)
        except Exception:  # noqa: BLE001 - a setting this Spark does not know
            continue
        if value is not None:
            conf[key] = value
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": at_ms, "conf": conf}
    return "\n".join(["v1", json.dumps(meta, separators=(",", ":")), *(_to_offset(p) for p in positions.values())])


def rebuild_checkpoint(spark: SparkSession, checkpoint: str, found: Recorded) -> None:
    """Write the checkpoint a stream had after its recorded batch: same batch numbers and offsets, a new query id.

    The batch's end offsets become `offsets/<batch>` and its start `offsets/<batch-1>` (Spark reads
    the previous batch's offsets when it resumes), committed; the batch itself is committed only if
    its final write was recorded, otherwise Spark runs it again with the same input and id, and the
    writers, told the query that first ran it (`REPLAY_FILE`), use the same txn ids, so Delta skips what
    it had written. The folder is written beside the target name and renamed into place, so a failure
    half way leaves no half checkpoint.
    """
    record = found.record
    batch, query = found.batch, found.query
    assert query is not None and batch >= 0, "only a stream's own records can rebuild its checkpoint"
    at = int(record.get("at") or 0)
    watermark = int(record.get("watermark_ms") or 0)
    staging = f"{checkpoint.rstrip('/')}.rebuilding-{_utc_stamp()}"
    write_text(spark, f"{staging}/metadata", json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")))
    if not record.get("final"):
        write_text(spark, f"{staging}/{REPLAY_FILE}", json.dumps({"batch": batch, "query": query}))
    if batch > 0:
        start = record.get("from")
        if not isinstance(start, dict):
            raise ValueError(f"the record of batch {batch} of flow {record['flow']} has no start offsets")
        write_text(spark, f"{staging}/offsets/{batch - 1}", _offsets_file(spark, start, at, watermark))
        write_text(spark, f"{staging}/commits/{batch - 1}", _COMMIT_FILE)
    write_text(spark, f"{staging}/offsets/{batch}", _offsets_file(spark, record["sources"], at, watermark))
    if record.get("final"):
        write_text(spark, f"{staging}/commits/{batch}", _COMMIT_FILE)
    fs, jpath = hadoop_fs(spark, staging)
    if not fs.rename(jpath, spark._jvm.org.apache.hadoop.fs.Path(checkpoint)):
        raise OSError(f"could not move the rebuilt checkpoint {staging} to {checkpoint}")


# ---------------------------------------------------------------- what the writers record

@dataclass
class StreamBinding:
    """What a writer needs to know about the streaming query it runs in, to record positions with its commits."""

    flow: str                               # the flow's name
    app: str                                # its base txn app id (Flow.app_id: name and query version)
    checkpoint: str                         # the query's checkpoint folder
    sources: Mapping[str, str]              # source name -> path (Delta table) or "" (Kafka topic)
    starting: Mapping[str, Position] | None = None   # where the query started if not from its checkpoint
    _query: str | None = field(default=None, repr=False)
    _replay: tuple[int, str] | None = field(default=None, repr=False)
    _names: dict[str, str] | None = field(default=None, repr=False)

    def query_id(self, spark: SparkSession) -> str:
        """The checkpoint's query id: kept by Spark across restarts of one checkpoint, new with a new one."""
        if self._query is None:
            meta = json.loads(read_text(spark, f"{self.checkpoint}/metadata") or "{}")
            if not meta.get("id"):
                raise RuntimeError(f"the checkpoint {self.checkpoint} of flow {self.flow} has no query id")
            self._query = str(meta["id"])
        return self._query

    def batch_query(self, spark: SparkSession, batch_id: int) -> str:
        """The query id batch `batch_id` writes under: the one that first ran it, if this checkpoint was rebuilt to replay it."""
        if self._replay is None:   # checked by inspect_checkpoint before the query started
            self._replay = parse_replay(read_text(spark, f"{self.checkpoint}/{REPLAY_FILE}")) or (-1, "")
        replayed, query = self._replay
        return query if batch_id == replayed else self.query_id(spark)

    def _source_names(self, spark: SparkSession) -> dict[str, str]:
        """Delta table id (or Kafka topic) -> source name, to name the lines of the offset log."""
        if self._names is None:
            names = {}
            for name, path in self.sources.items():
                tid = table_id(spark, path) if path else None
                names[tid or name] = name
            self._names = names
        return self._names

    def _positions(self, spark: SparkSession, entry: OffsetLogEntry) -> dict[str, Any]:
        names = self._source_names(spark)
        out: dict[str, Any] = {}
        unnamed = [n for n in self.sources]
        keyed = []
        for offset in entry.offsets:
            if offset is None:
                keyed.append((None, None))
                continue
            key = offset.get("reservoirId") if "reservoirId" in offset else next(iter(offset), None)
            name = names.get(key)
            if name is None:
                raise RuntimeError(f"flow {self.flow}: its checkpoint reads a source ({key}) that is not one of "
                                   f"{', '.join(self.sources)}; was a source table replaced?")
            unnamed.remove(name)
            keyed.append((name, _from_offset(offset)))
        for name, pos in keyed:   # "-" lines: sources with no offset yet, named by elimination
            out[name if name is not None else unnamed.pop(0)] = pos
        return out

    def record(self, spark: SparkSession, batch_id: int) -> dict[str, Any]:
        """The record for every commit of batch `batch_id`: its end and start offsets, from the offset log."""
        end = read_offset_log(spark, self.checkpoint, batch_id)
        if end is None:
            raise RuntimeError(f"flow {self.flow}: {self.checkpoint}/offsets/{batch_id} is missing while its batch runs")
        start: Any = None
        if batch_id > 0:
            previous = read_offset_log(spark, self.checkpoint, batch_id - 1)
            start = self._positions(spark, previous) if previous else None
        elif self.starting:
            start = {name: _position(pos) for name, pos in self.starting.items()}
        return {
            "flow": self.flow, "batch": batch_id, "sources": self._positions(spark, end),
            "query": self.batch_query(spark, batch_id), "app": self.app, "from": start, "at": end.batch_timestamp_ms,
            "watermark_ms": end.watermark_ms or None,
        }


@dataclass(frozen=True)
class BatchRecord:
    """One batch's txn app id and the userMetadata its commits carry."""

    txn_app_id: str
    record: dict[str, Any] | None

    def metadata(self, *, final: bool = False, **extra: Any) -> str | None:
        """The JSON for a commit of this batch; `final` marks the batch's last write, `extra` adds keys."""
        if self.record is None:
            return None
        record = {**self.record, **extra}
        flow, batch, sources = record.pop("flow"), record.pop("batch", None), record.pop("sources", None)
        return commit_metadata(flow, batch, sources, **record, final=True if final else None)

    @property
    def ends_inside_a_commit(self) -> bool:
        """Whether the batch stopped part way through a source table's commit (or its initial snapshot).

        A byte or file cap splits a commit's files over several batches, in file order, not event
        time order: the event-time writers hold their watermark until a batch ends on a commit's
        boundary, so that a cap never turns the rest of a commit into late arrivals.
        """
        sources = (self.record or {}).get("sources") or {}
        return any(pos is not None and "offsets" not in pos and not is_exact_version(pos) for pos in sources.values())


class RecordsPositions:
    """Mixin of the `(batch_df, batch_id)` writers: their txn app id and the record their commits carry.

    A writer called directly (the batch lane) uses its `app_id` as given and records nothing, or the
    positions its caller supplies (`record_positions`). In a stream, the runner binds it to the query
    (`bind_stream`): the txn app id becomes `<app_id>-<query id>`, so it is new with a new checkpoint
    (whose batch ids restart at 0) and the same across restarts of one checkpoint (a replayed batch is
    skipped), and each commit records the batch's source positions.
    """

    app_id: str
    stream: StreamBinding | None = None
    supplied: tuple[str, dict[str, Any]] | None = None

    def bind_stream(self, binding: StreamBinding) -> "RecordsPositions":
        self.stream = binding
        return self

    def record_positions(self, flow_name: str, positions: Mapping[str, Position | int]) -> "RecordsPositions":
        """Record `positions` (see `commit_metadata`) with every commit of batches called directly."""
        self.supplied = (flow_name, {name: _position(pos) for name, pos in positions.items()})
        return self

    def batch_record(self, spark: SparkSession, batch_id: int) -> BatchRecord:
        if self.stream is not None:
            record = self.stream.record(spark, batch_id)
            return BatchRecord(f"{self.app_id}-{record['query']}", record)
        if self.supplied is not None:
            flow, positions = self.supplied
            return BatchRecord(self.app_id, {"flow": flow, "batch": batch_id, "sources": positions})
        return BatchRecord(self.app_id, None)


class UserMetadata:
    """Sets the session's userMetadata for the next commits (MERGE, UPDATE) and puts back what was there."""

    def __init__(self, spark: SparkSession, text: str | None):
        self.spark, self.text, self.before = spark, text, None

    def __enter__(self) -> "UserMetadata":
        if self.text is not None:
            self.before = self.spark.conf.get(USER_METADATA_CONF, None)
            self.spark.conf.set(USER_METADATA_CONF, self.text)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.text is None:
            return
        if self.before is None:
            self.spark.conf.unset(USER_METADATA_CONF)
        else:
            self.spark.conf.set(USER_METADATA_CONF, self.before)
