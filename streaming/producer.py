"""Send generated records through an idempotent Kafka producer (acks=all), counting delivery reports."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from confluent_kafka import KafkaError, Producer

from lakehouse.streaming.kafka_topics import admin_client, check_topics_exist

log = logging.getLogger(__name__)

# Long enough for a remote cluster's metadata, short enough that a typo in the address fails at once.
REACHABLE_TIMEOUT_S = 5.0


class _ClientLog:
    """Takes librdkafka's own log lines (it retries noisily while a broker is away) and logs them at debug."""

    def log(self, _level: int, msg: str, *args: object) -> None:
        log.debug(msg, *args)


@dataclass(frozen=True)
class Delivery:
    """Where the broker put one record."""

    index: int
    topic: str
    partition: int
    offset: int


@dataclass
class ProduceReport:
    """What a produce run sent and what the broker acknowledged."""

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    by_topic: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    deliveries: dict[int, Delivery] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def producer_config(bootstrap: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        # Idempotence: the broker drops a retried batch it already has, so a retry never duplicates.
        "enable.idempotence": True,
        "acks": "all",
        # Same key -> same partition as the Java client would choose (librdkafka's default differs).
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "logger": _ClientLog(),  # librdkafka would otherwise print to stderr, hundreds of lines per minute
    }


def produce(
    records: Iterable[Any],
    *,
    bootstrap: str,
    rate: float = 0.0,
    progress: Callable[[ProduceReport], None] | None = None,
    progress_every_s: float = 5.0,
    topics: Iterable[str] = (),
) -> ProduceReport:
    """Send every record (paced to `rate` per second if > 0), flush, and report delivery counts.

    `topics`, the topics the records go to, are checked first: without them every record would fail.
    """
    # Without a broker the producer would queue and retry until the flush timeout; say so at once instead.
    admin = admin_client(bootstrap, timeout_s=REACHABLE_TIMEOUT_S)
    check_topics_exist(admin, bootstrap, topics)
    producer = Producer(producer_config(bootstrap))
    report = ProduceReport()
    started = time.monotonic()
    last_progress = started

    def on_delivery(index: int, kind: str):
        def callback(err: KafkaError | None, msg) -> None:
            if err is not None:
                report.failed += 1
                if len(report.errors) < 10:
                    report.errors.append(str(err))
                return
            report.delivered += 1
            report.by_topic[msg.topic()] += 1
            report.by_kind[kind] += 1
            report.deliveries[index] = Delivery(index, msg.topic(), msg.partition(), msg.offset())

        return callback

    for record in records:
        if rate > 0:
            lag = started + report.sent / rate - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        value = record.encode(datetime.now(timezone.utc))
        while True:
            try:
                producer.produce(
                    record.topic, key=record.key, value=value, headers=list(record.headers),
                    on_delivery=on_delivery(record.index, record.kind),
                )
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                producer.poll(0.5)
        report.sent += 1
        producer.poll(0)
        now = time.monotonic()
        if progress and now - last_progress >= progress_every_s:
            progress(report)
            last_progress = now
    remaining = producer.flush(60)
    if remaining:
        report.failed += remaining
        report.errors.append(f"{remaining} records were still unacknowledged after 60s")
    report.duration_s = round(time.monotonic() - started, 2)
    return report
