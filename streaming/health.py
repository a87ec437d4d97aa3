"""Where each flow stands, read from its checkpoint and its sources without a Spark session.

A stream's health is read from files: the checkpoint's newest committed batch (its offsets and the
time of its trigger), the newest version of each Delta source, and the Kafka end offsets. That makes
`lakehouse status` and the Dagster sensor answer in a second, and tell the truth whether the stream
runs, stalls or was stopped.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pyarrow import fs as pafs

from lakehouse.schemas.topics import TopicSpec
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.delta_log import MAINTENANCE, MAINTENANCE_RUN
from lakehouse.streaming.flows import Flow
from lakehouse.streaming.lake_files import DELTA_LOG_VERSION_FILE
from lakehouse.streaming.topic_query import covering
from lakehouse.streaming.sources import stream_path



def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and path for a lake URI: a local folder, s3a:// (as s3://), gs://, hdfs://."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    if uri.startswith(("s3a://", "s3n://", "s3://")):
        s3 = _s3(*_s3_settings())
        if s3 is not None:
            return s3, uri.split("://", 1)[1]
        uri = "s3://" + uri.split("://", 1)[1]
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file://"):]
    return pafs.FileSystem.from_uri(uri)


def _s3_settings() -> tuple[str, str, bool, str | None, str | None, str | None]:
    """The LAKEHOUSE_S3_* settings that Spark's S3A gets, and the keys from the environment, as S3A reads them.

    Read here rather than passed down: the callers (status, the Dagster sensors and definitions) know lake URIs only.
    """
    from lakehouse.infra.settings import PREFIX, Settings

    settings = Settings.from_env({k: v for k, v in os.environ.items() if k.startswith((f"{PREFIX}S3_", f"{PREFIX}PROFILE"))})
    return (settings.s3_endpoint, settings.s3_region, settings.s3_path_style, os.environ.get("AWS_ACCESS_KEY_ID"),
            os.environ.get("AWS_SECRET_ACCESS_KEY"), os.environ.get("AWS_SESSION_TOKEN"))


@functools.lru_cache(maxsize=4)
def _s3(endpoint: str, region: str, path_style: bool, key: str | None, secret: str | None,
        token: str | None) -> pafs.S3FileSystem | None:
    """pyarrow's S3 client for the lake's store; None for AWS with no region set (pyarrow then finds the bucket's)."""
    if not endpoint and not region:
        return None
    keys = {"access_key": key, "secret_key": secret, "session_token": token} if key and secret else {}
    # Short timeouts and no retries: these are glances (status, sensors, the definitions' load reads a log per table),
    # and with pyarrow's three attempts a store that is down held the definitions' load 47 s instead of 2. Spark's
    # own reads and writes keep S3A's retries.
    return pafs.S3FileSystem(
        region=region or "us-east-1", endpoint_override=endpoint.split("://", 1)[-1].rstrip("/") or None,
        scheme="https" if not endpoint or endpoint.startswith("https:") else "http",
        force_virtual_addressing=bool(endpoint) and not path_style, connect_timeout=3, request_timeout=10,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1), **keys)


def _listing(uri: str) -> list[pafs.FileInfo]:
    fs, path = filesystem(uri)
    try:
        return fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (OSError, FileNotFoundError):
        return []


def _read(uri: str) -> str:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read().decode("utf-8")


def latest_version(table_uri: str) -> int | None:
    """The newest version in a Delta table's log (None when there is no table)."""
    versions = [int(m.group(1)) for info in _listing(f"{table_uri.rstrip('/')}/_delta_log")
                if (m := DELTA_LOG_VERSION_FILE.match(info.base_name))]
    return max(versions) if versions else None


def latest_data_version(table_uri: str) -> int | None:
    """The newest version that wrote the table's rows: a compaction or VACUUM on top leaves nothing to read."""
    newest = latest_version(table_uri)
    if newest is None:
        return None
    for version in range(newest, max(newest - MAINTENANCE_RUN, -1), -1):
        try:
            first = _read(f"{table_uri.rstrip('/')}/_delta_log/{version:020d}.json").split("\n", 1)[0]
            operation = json.loads(first).get("commitInfo", {}).get("operation")
        except (OSError, FileNotFoundError, ValueError):
            return version
        if operation not in MAINTENANCE:
            return version
    return newest


@dataclass
class CommittedBatch:
    """The newest micro-batch a checkpoint has committed."""

    batch_id: int
    triggered_at: float | None          # epoch seconds of the batch's trigger (Spark's batchTimestampMs)
    committed_at: float | None          # epoch seconds when its commit file was written
    sources: list[dict]                  # one offset per source, in the query's source order


def committed_batch(checkpoint: str) -> CommittedBatch | None:
    """The newest batch in `<checkpoint>/commits` and its offsets (None: the query has committed nothing)."""
    commits = {int(i.base_name): i for i in _listing(f"{checkpoint.rstrip('/')}/commits") if i.base_name.isdigit()}
    if not commits:
        return None
    batch = max(commits)
    info = commits[batch]
    committed_at = info.mtime.timestamp() if info.mtime is not None else None
    try:
        lines = _read(f"{checkpoint.rstrip('/')}/offsets/{batch}").splitlines()
    except (OSError, FileNotFoundError):
        return CommittedBatch(batch, None, committed_at, [])
    meta = json.loads(lines[1]) if len(lines) > 1 else {}
    sources = [json.loads(line) if line.strip() not in ("", "-") else {} for line in lines[2:]]
    triggered = meta.get("batchTimestampMs")
    return CommittedBatch(batch, triggered / 1000 if triggered else None, committed_at, sources)


def settled_batch(checkpoint: str) -> CommittedBatch | None:
    """The newest committed batch, if no later batch was begun and left without its commit (else None)."""
    batch = committed_batch(checkpoint)
    if batch is None:
        return None
    begun = [int(i.base_name) for i in _listing(f"{checkpoint.rstrip('/')}/offsets") if i.base_name.isdigit()]
    return batch if max(begun, default=-1) == batch.batch_id else None


def done_version(offset: Mapping) -> int:
    """The newest source version a Delta source offset has read whole (-1: none)."""
    at = offset.get("reservoirVersion") if offset else None
    if at is None:
        return -1
    index = int(offset.get("index", -1))
    # index -1: nothing of `at` read yet; a huge index (Delta's END_INDEX): all of `at`; else part of `at`.
    return int(at) if index >= 2 ** 62 else int(at) - 1


@dataclass
class FlowHealth:
    """How far one flow is behind its sources, and when it last committed a batch."""

    flow: str
    table: str
    batch_id: int | None = None
    last_batch_at: float | None = None                       # epoch seconds of its newest committed batch
    kafka_lag: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> records behind the end
    versions_behind: dict[str, int] = field(default_factory=dict)   # source table -> Delta versions behind

    @property
    def lag_records(self) -> int | None:
        """Records behind the Kafka end offsets (None for a flow that reads tables)."""
        return sum(self.kafka_lag.values()) if self.kafka_lag else None

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since its newest committed batch."""
        return None if self.last_batch_at is None else max(0.0, (now or time.time()) - self.last_batch_at)

    @property
    def caught_up(self) -> bool:
        """Nothing left to read in any source (a caught-up stream commits no batch until new data comes)."""
        return not any(self.kafka_lag.values()) and not any(self.versions_behind.values())

    def lag_text(self) -> str:
        if self.kafka_lag:
            return f"{self.lag_records:,} records"
        if self.versions_behind:
            behind = {t: v for t, v in self.versions_behind.items() if v}
            return ", ".join(f"{v} version{'s' * (v > 1)} of {t}" for t, v in behind.items()) or "0 versions"
        return "-"


def end_offsets(bootstrap: str, topics: Iterable[TopicSpec], timeout_s: float = 10.0) -> dict[str, dict[int, tuple[int, int]]]:
    """(low, high) watermark offsets of every partition of each topic: retained records are high - low."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from lakehouse.streaming.kafka_topics import KafkaUnreachable

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakehouse-health", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        found: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            try:
                listed = consumer.list_topics(topic.name, timeout=timeout_s)
            except KafkaException:
                raise KafkaUnreachable.at(bootstrap) from None
            meta = listed.topics.get(topic.name)
            if meta is None or meta.error is not None:
                continue
            found[topic.name] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=timeout_s)
                for p in sorted(meta.partitions)
            }
        return found
    finally:
        consumer.close()


def flow_health(flow: Flow, ctx: FlowContext, ends: Mapping[str, Mapping[int, tuple[int, int]]]) -> FlowHealth:
    """Where a flow stands: its newest committed batch, and how far that is behind each source's end."""
    health = FlowHealth(flow.name, flow.target.name)
    batch = committed_batch(flow.checkpoint(ctx))
    sources = flow.sources
    hop = covering(flow, ctx)
    if hop is not None:
        # Last run inside its topic's query (streaming/topic_query.py), which reads the topic for all its flows.
        hop_batch = committed_batch(hop[0])
        if hop_batch is not None and (batch is None or _at(hop_batch) > _at(batch)):
            batch, sources = hop_batch, (hop[1],)
    if batch is not None:
        health.batch_id = batch.batch_id
        health.last_batch_at = batch.committed_at or batch.triggered_at
    for i, source in enumerate(sources):
        offset = batch.sources[i] if batch is not None and i < len(batch.sources) else {}
        if isinstance(source, TopicSpec):
            read = offset.get(source.name, {}) if offset else {}
            for partition, (low, high) in ends.get(source.name, {}).items():
                at = int(read.get(str(partition), low))
                health.kafka_lag[f"{source.name}/{partition}"] = max(0, high - max(at, low))
        else:
            newest = latest_data_version(stream_path(source, ctx))
            if newest is None:
                continue
            health.versions_behind[source.name] = max(0, newest - done_version(offset))
    return health


def _at(batch: CommittedBatch) -> float:
    return batch.committed_at or batch.triggered_at or 0.0


def stream_health(flows: Iterable[Flow], ctx: FlowContext) -> list[FlowHealth]:
    """The health of each flow, with one round of Kafka end-offset lookups for all of them."""
    flows = list(flows)
    topics = {s.name: s for f in flows for s in f.sources if isinstance(s, TopicSpec)}
    topics.update({hop[1].name: hop[1] for f in flows if (hop := covering(f, ctx)) is not None})
    ends = end_offsets(ctx.kafka_bootstrap, topics.values()) if topics else {}
    return [flow_health(f, ctx, ends) for f in flows]
