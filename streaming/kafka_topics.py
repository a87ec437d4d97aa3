"""Create topics from their specs through the AdminClient, and report drift instead of changing live topics."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from lakehouse.infra.settings import SettingsError
from lakehouse.schemas.topics import TopicSpec

T = TypeVar("T")

log = logging.getLogger(__name__)


class KafkaUnreachable(RuntimeError):
    """No broker answered at the bootstrap address."""

    @classmethod
    def at(cls, bootstrap: str) -> "KafkaUnreachable":
        return cls(f"No Kafka broker answers at {bootstrap}; start one with `lakehouse kafka start` "
                   "or set LAKEHOUSE_KAFKA_BOOTSTRAP.")


class TopicsMissing(RuntimeError):
    """Records were to be sent to topics the broker does not have."""


class ReplicationImpossible(SettingsError):
    """New topics ask for more replicas than the cluster has brokers; the message says how to fix it."""


# librdkafka's "no value": the broker's default.replication.factor (3 on the embedded three-node cluster).
CLUSTER_DEFAULT = -1


def topic_replication(replication_factor: int) -> tuple[int, dict[str, str]]:
    """NewTopic's replication factor and the configs that go with it: 0 or less follows the cluster.

    A factor that is given comes with its min.insync.replicas (2 from RF 3 on, else 1): a topic-level value, so
    that RF 1 on a cluster whose default min ISR is 2 still accepts acks=all writes.
    """
    if replication_factor <= 0:
        return CLUSTER_DEFAULT, {}
    return replication_factor, {"min.insync.replicas": "2" if replication_factor >= 3 else "1"}


def check_topics_exist(admin: AdminClient, bootstrap: str, names: Iterable[str]) -> None:
    """Raise TopicsMissing, one sentence, unless the broker has every topic named."""
    wanted = set(names)
    if not wanted:
        return
    missing = sorted(wanted - set(admin.list_topics(timeout=10).topics))
    if missing:
        what = f"topic {missing[0]} does" if len(missing) == 1 else f"topics {', '.join(missing)} do"
        raise TopicsMissing(f"The {what} not exist at {bootstrap}; create the topics first with `lakehouse topics` "
                            "(or materialize the topic assets in the Dagster UI).")


@dataclass
class TopicStatus:
    """A topic as the broker holds it, compared with its spec."""

    name: str
    created: bool
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    drift: dict[str, dict[str, str]] = field(default_factory=dict)  # setting -> {"spec": .., "live": ..}
    end_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        """Records currently retained, by end offset (a lower bound after retention deletes the head)."""
        return sum(self.end_offsets.values())


def admin_client(bootstrap: str, timeout_s: float = 10) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        raise KafkaUnreachable.at(bootstrap) from None
    return admin


def _create_missing(admin: AdminClient, specs: list[TopicSpec], replication_factor: int,
                    replay_window_ms: int = 0, bootstrap: str = "") -> set[str]:
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return set()
    factor, extra = topic_replication(replication_factor)
    futures = admin.create_topics(
        [NewTopic(s.name, num_partitions=s.partitions, replication_factor=factor,
                  config={**s.config(replay_window_ms), **extra})
         for s in missing]
    )
    created = set()
    for name, future in futures.items():
        try:
            future.result()
            created.add(name)
            log.info("created topic %s", name)
        except KafkaException as exc:
            err = exc.args[0]
            # More replicas than registered brokers (a dead but registered broker counts: KRaft places replicas
            # on it, and the partition starts under-replicated).
            if err.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                asked = (f"LAKEHOUSE_KAFKA_REPLICATION_FACTOR={replication_factor}" if replication_factor > 0
                         else "the cluster's default.replication.factor (LAKEHOUSE_KAFKA_REPLICATION_FACTOR=0)")
                raise ReplicationImpossible(
                    f"Topic {name} cannot be created at {bootstrap} with {asked}: {err.str().rstrip('.')}; set "
                    "LAKEHOUSE_KAFKA_REPLICATION_FACTOR to at most the cluster's brokers (0 follows the cluster), or "
                    "start more (`lakehouse kafka start --nodes 3`).") from None
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # already there: another caller won the race
                raise
    return created


# Leadership not settled yet: normal for a moment after create_topics.
_LEADERSHIP_SETTLING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
}


def end_offsets(admin: AdminClient, topic: str, partitions: int, timeout_s: float = 15) -> dict[int, int]:
    """The next offset of each partition; waits out leader election on a topic just created."""
    requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    return _settled(lambda: {tp.partition: fut.result().offset for tp, fut in admin.list_offsets(requests).items()},
                    timeout_s)


def _settled(ask: Callable[[], T], timeout_s: float = 15) -> T:
    """`ask()`, asked again while the cluster's answer is one that settles by itself after a topic's creation."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask()
        except KafkaException as exc:
            err = exc.args[0]
            settling = err.retriable() or err.code() in _LEADERSHIP_SETTLING
            if not settling or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _await_metadata(admin: AdminClient, names: set[str], timeout_s: float = 15) -> None:
    """Wait until the broker's metadata lists the topics just created (at most `timeout_s`).

    The controller accepts a creation before every broker's metadata holds the topic: a fresh-clone CI
    once saw `lakehouse topics` report a topic it had just created as missing. After the timeout,
    describe_topics says what is still missing.
    """
    deadline = time.monotonic() + timeout_s
    while names - set(admin.list_topics(timeout=10).topics) and time.monotonic() < deadline:
        time.sleep(0.2)


def describe_topics(admin: AdminClient, specs: Iterable[TopicSpec], created: set[str] = frozenset(),
                    replay_window_ms: int = 0) -> list[TopicStatus]:
    """Live partitions, config and end offsets of each topic, and where they differ from the spec (and window)."""
    specs = list(specs)
    metadata = admin.list_topics(timeout=10).topics
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs if s.name in metadata]
    # On a cluster, the broker asked may learn of a topic just created after the one that listed it.
    configs = _settled(lambda: {res.name: fut.result() for res, fut in admin.describe_configs(resources).items()}
                       ) if resources else {}
    statuses = []
    for spec in specs:
        if spec.name not in metadata:
            statuses.append(TopicStatus(spec.name, False, 0, drift={"exists": {"spec": "yes", "live": "no"}}))
            continue
        live = {k: v.value for k, v in configs[spec.name].items()}
        partitions = len(metadata[spec.name].partitions)
        drift = {
            key: {"spec": want, "live": str(live.get(key))}
            for key, want in spec.config(replay_window_ms).items()
            if str(live.get(key)) != want
        }
        if partitions != spec.partitions:
            drift["partitions"] = {"spec": str(spec.partitions), "live": str(partitions)}
        offsets = end_offsets(admin, spec.name, partitions)
        statuses.append(
            TopicStatus(
                spec.name, spec.name in created, partitions,
                config={k: str(live.get(k)) for k in spec.config()}, drift=drift, end_offsets=dict(sorted(offsets.items())),
            )
        )
    return statuses


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], *, replication_factor: int = 0,
                  replay_window_ms: int = 0) -> list[TopicStatus]:
    """Create missing topics from their specs (idempotent); existing ones are compared, never altered.

    `replication_factor` (LAKEHOUSE_KAFKA_REPLICATION_FACTOR): 0 follows the cluster's default.replication.factor
    (1 on one node, 3 with min.insync.replicas 2 on the embedded three-node cluster).
    `replay_window_ms` (LAKEHOUSE_REPLAY_WINDOW): topics that delete by time keep records at least that long.
    """
    specs = list(specs)
    admin = admin_client(bootstrap)
    created = _create_missing(admin, specs, replication_factor, replay_window_ms, bootstrap)
    _await_metadata(admin, created)
    statuses = describe_topics(admin, specs, created, replay_window_ms)
    for status in statuses:
        if status.drift:
            log.warning("topic %s differs from its spec: %s", status.name, status.drift)
    return statuses
