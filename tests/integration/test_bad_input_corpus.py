"""The bad-input corpus (bench/bad_records.py) through the real broker while bronze and silver run as
continuous queries (a processing-time trigger, as `lakehouse stream` runs them): the queries never stop,
every kind lands where the corpus says with its own reason and its Kafka coordinates, every good event
is in silver exactly once, and every bronze record is accounted for.

Where each record must be is computed in plain Python from what was sent and the coordinates the
producer's delivery reports gave (bench/drill_bad_input.py: settle, compare); the flows' own counters
are never consulted. The full-size drill is `python -m bench.drill_bad_input --copies K`.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from bench.bad_records import GOOD, OUTCOMES, TOPICS, corpus, encode
from bench.drill_bad_input import Outgoing, compare, from_bad, read_lake, send, settle
from lakehouse.schemas import reasons, topics
from lakehouse.pipelines.shop import BY_TOPIC
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.runner import start_flow

pytestmark = pytest.mark.integration

TRIGGER = {"processingTime": "1 second"}


@pytest.fixture(scope="module")
def kafka(broker):
    ensure_topics(broker.kafka_bootstrap, topics.ALL)
    return broker


def good_events(prefix: str, count: int, first: datetime, step: timedelta) -> list[Outgoing]:
    """Valid events over the corpus's three topics in turn, ids <prefix>-<n>, keys c-0<n>."""
    out = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        customer = f"c-{n % 40:05d}"
        payload = GOOD[topic](f"{prefix}-{n}", first + n * step, customer=customer)
        out.append(Outgoing(label="good", topic=topic, key=customer.encode(), value=encode(payload), outcome=None,
                            event_id=payload["event_id"]))
    return out


def interleave(bad: list[Outgoing], good: list[Outgoing]) -> list[Outgoing]:
    """One or two good events before each bad one, the rest after: both keep their order."""
    out, goods = [], iter(good)
    for i, rec in enumerate(bad):
        out += [next(goods) for _ in range(1 + i % 2)]
        out.append(rec)
    return out + list(goods)


def test_the_corpus_lands_where_it_must_and_the_streams_never_stop(spark, kafka, tmp_path):
    bootstrap = kafka.kafka_bootstrap
    ctx = FlowContext(lake_root=str(tmp_path / "lake"), kafka_bootstrap=bootstrap)
    now = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=2)
    kinds = corpus("ci", now=now)
    assert len(kinds) >= 25 and len({k.kind for k in kinds}) == len(kinds)
    assert {k.outcome for k in kinds} == set(OUTCOMES)
    assert {k.reason for k in kinds if k.outcome == "quarantine"} == set(reasons.ALL)

    # Warm-up: silver holds events up to `now` before the corpus comes (so late_event is behind its watermark).
    sent = send(bootstrap, good_events("warm", 30, now - timedelta(minutes=10), timedelta(seconds=20)))
    bronze = [start_flow(spark, BY_NAME[f"bronze_{BY_TOPIC[t].entity}"], ctx, trigger=TRIGGER) for t in TOPICS]
    queries = list(bronze)
    try:
        for q in bronze:
            q.processAllAvailable()
        silver = [start_flow(spark, BY_NAME[f"silver_{BY_TOPIC[t].entity}"], ctx, trigger=TRIGGER) for t in TOPICS]
        queries += silver
        for q in silver:
            q.processAllAvailable()

        # The corpus, each kind among good events, then more good events once it has been through.
        mixed = interleave([from_bad(k) for k in kinds], good_events("mixed", 2 * len(kinds) + 10, now, timedelta(0)))
        sent += send(bootstrap, mixed)
        for q in (*bronze, *silver):
            q.processAllAvailable()
        assert all(q.isActive and q.exception() is None for q in queries), \
            [(q.name, q.exception()) for q in queries if not q.isActive]
        sent += send(bootstrap, good_events("after", 12, now + timedelta(seconds=5), timedelta(seconds=1)))
        for q in (*bronze, *silver):
            q.processAllAvailable()
        time.sleep(2)   # two more triggers with nothing new: still running
        stopped = [(q.name, q.exception()) for q in queries if not q.isActive or q.exception() is not None]
        assert not stopped, f"queries stopped: {stopped}"
        batches = {q.name: sum(1 for p in q.recentProgress if p.numInputRows) for q in silver}
    finally:
        for q in queries:
            q.stop()
    lake = read_lake(spark, ctx.lake_root)
    assert all(n >= 3 for n in batches.values()), batches   # the warm-up, the corpus and the tail: separate batches

    settled = settle(sent)
    by_kind = {s.record.label: s for s in settled if s.record.label not in ("good",)}
    assert set(by_kind) == {k.kind for k in kinds}
    # Each quarantined kind: its own reason and detail, at the coordinates the producer got, raw bytes kept.
    for k in kinds:
        s = by_kind[k.kind]
        if k.outcome == "quarantine":
            assert lake.quarantine.get(s.coords) == (k.reason, k.detail, k.value), (k.kind, s.coords)
        elif k.outcome == "refused":
            assert s.coords is None and s.error == k.refusal, (k.kind, s.error)
        elif k.outcome == "silver":
            assert lake.silver.get(s.coords) == k.event_id, k.kind
        elif k.outcome == "late":
            assert lake.late.get(s.coords) == k.event_id, k.kind
        else:
            assert s.outcome == "duplicate" and s.coords in lake.bronze, k.kind
            assert s.coords not in lake.silver and s.coords not in lake.quarantine and s.coords not in lake.late
    # Every good event in silver exactly once, by the coordinates it was first sent at.
    good = [s for s in settled if s.record.label == "good"]
    assert all(lake.silver.get(s.coords) == s.record.event_id for s in good)
    assert max(lake.silver_ids.values()) == 1
    # The identity, record by record: bronze = what was delivered = silver + quarantine + late + duplicates.
    delivered = {s.coords for s in settled if s.coords is not None}
    homes = Counter([*lake.silver, *lake.quarantine, *lake.late])
    assert lake.bronze == delivered
    assert max(homes.values()) == 1 and set(homes) <= lake.bronze
    assert lake.bronze - set(homes) == {s.coords for s in settled if s.outcome == "duplicate"}
    findings = compare(sent, lake)
    assert findings.differences == [], "\n".join(findings.differences)
    assert findings.checked == len(sent)
