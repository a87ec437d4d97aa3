"""Every stateful gold table against a plain-Python reference that applies the same watermark rule.

Events are produced to the real broker in waves; after each wave the flows catch up (bronze and
silver in several micro-batches of a small maxOffsetsPerTrigger, each gold flow in one batch), so
the gold watermark moves between batches and events sent behind it are really late. The reference
knows only the produced events and the rule: a flow's watermark for a batch is the newest event time
it saw in earlier batches minus its delay, and an event behind it is late.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

from lakehouse.pipelines import shop
from lakehouse.schemas import sources, tables
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.pipelines.shop.generator import GeneratedRecord
from lakehouse.streaming.kafka_topics import ensure_topics
from lakehouse.streaming.parallel_runs import run_flows
from lakehouse.streaming.producer import produce

pytestmark = pytest.mark.integration

START = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
WAVES = 3
WAVE = timedelta(minutes=25)
DELAY = timedelta(minutes=10)                 # the gold watermark delay of this run
SESSION_GAP = timedelta(minutes=30)
WITHIN = timedelta(minutes=30)
SLIDING, THRESHOLD = timedelta(minutes=30), 2
HOP_SIZE, HOP_SLIDE = timedelta(minutes=15), timedelta(minutes=5)
CUSTOMERS = [f"c-{n}" for n in range(6)]
PRODUCTS = [f"p-{n}" for n in range(4)]
INPUTS = ("page_views", "orders", "payments")
GOLD = ("gold_revenue_per_minute", "gold_page_views_per_product_minute", "gold_revenue_hopping",
        "gold_order_velocity", "gold_sessions", "gold_order_payments", "gold_processing_delay")


def iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def naive(ts: datetime) -> datetime:
    """As Spark returns timestamps (session time zone UTC)."""
    return ts.astimezone(timezone.utc).replace(tzinfo=None)


class Log:
    """The produced events, by wave, with what the reference needs of each."""

    def __init__(self, seed: int = 21):
        self.rng = random.Random(seed)
        self.n = 0
        self.waves: list[list[tuple[str, dict]]] = []   # (entity, payload) in send order, duplicates included
        self.pending: list[tuple[str, dict]] = []        # payments whose time has not come yet

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n:05d}"

    def wave(self, k: int) -> list[tuple[str, dict]]:
        rng, out = self.rng, []
        base = START + k * WAVE
        # A payment is sent once its time has come (the last wave sends what is left).
        due = [e for e in self.pending if ts(e[1]) < base + WAVE or k == WAVES - 1]
        self.pending = [e for e in self.pending if e not in due]
        out.extend(due)
        if k == 0:
            # Shoppers who browse once early and leave: their sessions close as the watermark passes.
            for n in range(3):
                t = base + timedelta(minutes=rng.uniform(0, 5))
                out.append(("page_views", {
                    "event_id": self._id("e"), "occurred_at": iso(t), "customer_id": f"c-once-{n}",
                    "session_id": "s", "page_type": "home", "product_id": None, "url": "/", "referrer": "ad"}))
        for _ in range(90):
            t = base + timedelta(seconds=rng.uniform(0, WAVE.total_seconds()))
            roll = rng.random()
            if k and roll < 0.2:
                t -= timedelta(minutes=rng.uniform(12, 40))      # behind the watermark when it arrives
            elif roll < 0.25:
                t -= timedelta(minutes=rng.uniform(0.5, 6))      # out of order, within the watermark
            customer = rng.choice(CUSTOMERS)
            if rng.random() < 0.35:
                product = rng.choice(PRODUCTS)
                qty, price = rng.randint(1, 3), rng.randrange(100, 900)
                order = {"event_id": self._id("e"), "occurred_at": iso(t), "order_id": self._id("o"),
                         "customer_id": customer, "currency": rng.choice(["EUR", "USD"]),
                         "lines": [{"product_id": product, "quantity": qty, "unit_price_cents": price}],
                         "total_cents": qty * price}
                out.append(("orders", order))
                fate = rng.random()
                if fate < 0.75:   # paid, sometimes outside the bound, sometimes failed
                    later = timedelta(minutes=rng.choice([rng.uniform(0.2, 8), rng.uniform(31, 40)]))
                    self.pending.append(("payments", {
                        "event_id": self._id("e"), "occurred_at": iso(t + later), "payment_id": self._id("pay"),
                        "order_id": order["order_id"], "customer_id": customer, "amount_cents": order["total_cents"],
                        "currency": order["currency"], "status": rng.choice(["succeeded"] * 4 + ["failed"])}))
                    if k == WAVES - 1 or ts(self.pending[-1][1]) < base + WAVE:
                        out.append(self.pending.pop())
            else:
                product = rng.choice(PRODUCTS + [None])
                out.append(("page_views", {
                    "event_id": self._id("e"), "occurred_at": iso(t), "customer_id": customer,
                    "session_id": f"s-{customer}", "page_type": "product" if product else "home",
                    "product_id": product, "url": f"/p/{product}" if product else "/", "referrer": "direct"}))
        sent = [e for e in out]
        # A producer's retries: some events of this wave and of earlier ones are sent again.
        earlier = [e for w in self.waves for e in w]
        for pool in (out, earlier):
            for e in rng.sample(pool, min(4, len(pool))):
                sent.append(e)
        rng.shuffle(sent)
        self.waves.append(sent)
        return sent


def ts(payload: dict) -> datetime:
    return datetime.fromisoformat(payload["occurred_at"].replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def lake(spark, broker, tmp_path_factory):
    ensure_topics(broker.kafka_bootstrap, [getattr(shop, e.upper()).topic_spec for e in INPUTS])
    ctx = FlowContext(
        lake_root=str(tmp_path_factory.mktemp("gold-lake")), kafka_bootstrap=broker.kafka_bootstrap,
        max_offsets_per_trigger=20, gold_watermark="10 minutes", silver_dedup_watermark="1 day",
        params=shop.PIPELINE.param_values({}, session_gap="30 minutes", payment_within="30 minutes",
                                          sliding_window="30 minutes", sliding_threshold=THRESHOLD,
                                          hopping_window_size="15 minutes", hopping_window_slide="5 minutes"),
    )
    log = Log()
    runs = defaultdict(list)
    for k in range(WAVES):
        wave = log.wave(k)
        records = [
            GeneratedRecord(index=i, topic=getattr(shop, entity.upper()).topic, key=p["customer_id"].encode(),
                            kind="valid", event=p)
            for i, (entity, p) in enumerate(wave)
        ]
        report = produce(records, bootstrap=broker.kafka_bootstrap)
        assert report.delivered == len(records)
        # Three at once, as a catch-up runs them: each flow still starts after the flows it reads have ended. A query
        # per flow: the reference below has gold take each wave's silver rows in one batch, which a query per topic
        # does only without a cap on Kafka records per batch (this lake caps them at 20).
        flows = [BY_NAME[f"{layer}_{entity}"] for entity in INPUTS for layer in ("bronze", "silver")]
        for outcome in run_flows(spark, [*flows, *(BY_NAME[name] for name in GOLD)], ctx, parallel=3):
            assert outcome.error is None, (outcome.flow.name, outcome.error)
            if outcome.flow.name in GOLD:
                runs[outcome.flow.name].append(outcome.run)
    return log, ctx, runs


class Reference:
    """Plain Python: which events each flow accepts and which it calls late, wave by wave."""

    def __init__(self, log: Log):
        self.log = log

    def batches(self, entities: tuple[str, ...]) -> list[list[dict]]:
        """Per wave, the events silver passes on: the first copy of each event id never seen before."""
        seen: set[str] = set()
        out = []
        for wave in self.log.waves:
            batch = []
            for entity, p in wave:
                if entity in entities and p["event_id"] not in seen:
                    seen.add(p["event_id"])
                    batch.append({**p, "_entity": entity})
            out.append(batch)
        return out

    def split(self, entities: tuple[str, ...]) -> tuple[list[dict], set[str], datetime]:
        """On-time events, the ids of late ones, and the final watermark, for a flow reading `entities`."""
        newest, on_time, late = None, [], set()
        for batch in self.batches(entities):
            watermark = None if newest is None else newest - DELAY
            for p in batch:
                if watermark is not None and ts(p) < watermark:
                    late.add(p["event_id"])
                else:
                    on_time.append(p)
            times = [ts(p) for p in batch] + ([newest] if newest else [])
            newest = max(times) if times else None
        return on_time, late, newest - DELAY


@pytest.fixture(scope="module")
def ref(lake):
    return Reference(lake[0])


def table(spark, ctx, name):
    return spark.read.format("delta").load(tables.BY_NAME[name].path(ctx.lake_root))


def late_ids(spark, ctx, flow):
    rows = table(spark, ctx, "late_arrivals").where(F.col("flow") == flow).select("event_id").collect()
    ids = [r.event_id for r in rows]
    assert len(ids) == len(set(ids)), f"{flow}: an event is listed late twice"
    return set(ids)


def test_the_waves_hold_late_out_of_order_and_duplicate_events(lake, ref):
    """The log really exercises the rule: late events for every flow, in more than one wave, and retries."""
    log, _, runs = lake
    sent = sum(len(w) for w in log.waves)
    unique = sum(len(b) for b in ref.batches(INPUTS))
    assert sent - unique >= 8
    for entities in (("orders",), ("page_views", "orders"), ("orders", "payments")):
        _, late, _ = ref.split(entities)
        assert len(late) >= 5
    assert all(len(r) == WAVES for r in runs.values())


def _minute(t: datetime) -> datetime:
    return naive(t).replace(second=0, microsecond=0)


def test_tumbling_revenue_per_minute(spark, lake, ref):
    """Revenue, orders and items per minute and currency equal the reference; its late orders are in late_arrivals."""
    _, ctx, runs = lake
    on_time, late, _ = ref.split(("orders",))
    expected = defaultdict(lambda: [0, 0, 0])
    for o in on_time:
        acc = expected[(_minute(ts(o)), o["currency"])]
        acc[0] += o["total_cents"]
        acc[1] += 1
        acc[2] += sum(line["quantity"] for line in o["lines"])
    got = {(r.window_start, r.currency): [r.revenue_cents, r.orders, r.items]
           for r in table(spark, ctx, "gold_revenue_per_minute").collect()}
    assert got == dict(expected)
    assert late_ids(spark, ctx, "gold_revenue_per_minute") == late
    assert sum(r.late for r in (run.gold for run in runs["gold_revenue_per_minute"])) == len(late)


def test_tumbling_page_views_per_product_minute(spark, lake, ref):
    """Views per product and minute equal the reference; views of no product feed nothing and are never late."""
    _, ctx, _ = lake
    on_time, late, _ = ref.split(("page_views",))
    products = [p for p in on_time if p["product_id"]]
    expected = defaultdict(int)
    for p in products:
        expected[(_minute(ts(p)), p["product_id"])] += 1
    got = {(r.window_start, r.product_id): r.views for r in table(spark, ctx, "gold_page_views_per_product_minute").collect()}
    assert got == dict(expected)
    # The flow reads product pages only, so its watermark is theirs: recompute the rule over those alone.
    fed = Reference(ref.log)
    fed_batches = [[p for p in b if p["product_id"]] for b in ref.batches(("page_views",))]
    fed.batches = lambda entities: fed_batches  # type: ignore[method-assign]
    on_time_products, late_products, _ = fed.split(("page_views",))
    assert {p["event_id"] for p in on_time_products} == {p["event_id"] for p in products}
    assert late_ids(spark, ctx, "gold_page_views_per_product_minute") == late_products


def test_hopping_revenue(spark, lake, ref):
    """Each 15-minute window (one every 5 minutes) holds exactly the reference's on-time orders inside it."""
    _, ctx, _ = lake
    on_time, late, _ = ref.split(("orders",))
    expected = defaultdict(lambda: [0, 0])
    epoch = datetime(1970, 1, 1)
    for o in on_time:
        t = naive(ts(o))
        last = epoch + ((t - epoch) // HOP_SLIDE) * HOP_SLIDE
        start = last
        while start > t - HOP_SIZE:
            acc = expected[(start, o["currency"])]
            acc[0] += o["total_cents"]
            acc[1] += 1
            start -= HOP_SLIDE
    got = {(r.window_start, r.currency): [r.revenue_cents, r.orders] for r in table(spark, ctx, "gold_revenue_hopping").collect()}
    assert got == dict(expected)
    assert late_ids(spark, ctx, "gold_revenue_hopping") == late


def test_sliding_order_velocity_is_a_per_event_count(spark, lake, ref):
    """Each on-time order's count of the customer's on-time orders in the 30 minutes before it equals plain Python."""
    _, ctx, _ = lake
    on_time, late, _ = ref.split(("orders",))
    expected = {}
    for o in on_time:
        t = ts(o)
        n = sum(1 for p in on_time if p["customer_id"] == o["customer_id"] and t - SLIDING <= ts(p) < t)
        expected[o["order_id"]] = (n, n >= THRESHOLD)
    got = {r.order_id: (r.orders_before, r.flagged) for r in table(spark, ctx, "gold_order_velocity").collect()}
    assert got == expected
    assert any(flag for _, flag in expected.values())
    assert late_ids(spark, ctx, "gold_order_velocity") == late


def test_sessions(spark, lake, ref):
    """Sessions (30-minute gap) over on-time page views and orders equal a plain-Python sweep; closed ones are behind the watermark."""
    _, ctx, runs = lake
    on_time, late, final_watermark = ref.split(("page_views", "orders"))
    expected = {}
    for customer in {e["customer_id"] for e in on_time}:
        current = None
        for p in sorted((e for e in on_time if e["customer_id"] == customer), key=ts):
            if current and ts(p) - current["end"] < SESSION_GAP:
                current["end"] = ts(p)
            else:
                current = {"start": ts(p), "end": ts(p), "pages": 0, "orders": 0}
                expected[(customer, current["start"])] = current
            current["orders" if p["_entity"] == "orders" else "pages"] += 1
    want = {(c, naive(s)): (naive(v["end"]), v["pages"], v["orders"], v["orders"] > 0,
                            v["end"] + SESSION_GAP <= final_watermark)
            for (c, s), v in expected.items()}
    got = {(r.customer_id, r.session_start): (r.session_end, r.page_views, r.orders, r.ended_in_order, r.closed)
           for r in table(spark, ctx, "gold_sessions").collect()}
    assert got == want
    assert late_ids(spark, ctx, "gold_sessions") == late
    assert any(v[4] for v in want.values()) and not all(v[4] for v in want.values())


def test_orders_join_payments_within_the_bound(spark, lake, ref):
    """Matched pairs, unpaid orders and payments without an order equal the reference; the rest waits in bounded state."""
    _, ctx, runs = lake
    on_time, late, final_watermark = ref.split(("orders", "payments"))
    orders = [e for e in on_time if e["_entity"] == "orders"]
    payments = [e for e in on_time if e["_entity"] == "payments"]
    pairs = {(o["order_id"], p["payment_id"]) for o in orders for p in payments
             if p["order_id"] == o["order_id"] and ts(o) <= ts(p) <= ts(o) + WITHIN}
    matched_orders = {o for o, _ in pairs}
    matched_payments = {p for _, p in pairs}
    unpaid = {(o["order_id"], None) for o in orders
              if o["order_id"] not in matched_orders and ts(o) + WITHIN < final_watermark}
    orphans = {(p["order_id"], p["payment_id"]) for p in payments
               if p["payment_id"] not in matched_payments and ts(p) < final_watermark}
    got = defaultdict(set)
    for r in table(spark, ctx, "gold_order_payments").collect():
        got[r.outcome].add((r.order_id, r.payment_id))
    assert dict(got) == {"matched": pairs, "unpaid": unpaid, "payment_without_order": orphans}
    assert late_ids(spark, ctx, "gold_order_payments") == late
    # What is neither emitted nor late is still buffered, and only what the watermark has not passed.
    waiting = ({o["event_id"] for o in orders if ts(o) + WITHIN >= final_watermark}
               | {p["event_id"] for p in payments if ts(p) >= final_watermark})
    assert runs["gold_order_payments"][-1].gold.state_rows == len(waiting)
    assert unpaid and orphans and pairs


def percentile(values: list[float], p: float) -> float:
    """Exact percentile with linear interpolation between the closest ranks."""
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def test_processing_delay_per_minute_and_topic(spark, lake, ref):
    """p50/p95/max of each hop per minute and topic equal plain Python over every silver event's timestamps, late ones too."""
    _, ctx, runs = lake
    rows = []
    for entity in INPUTS:
        rows += table(spark, ctx, f"silver_{entity}").select(
            "topic", "occurred_at", "sent_at", "appended_at", "ingested_at").collect()
    assert len(rows) == sum(len(b) for b in ref.batches(INPUTS))
    hops = {"event_to_send": ("occurred_at", "sent_at"), "send_to_append": ("sent_at", "appended_at"),
            "append_to_ingest": ("appended_at", "ingested_at")}
    buckets = defaultdict(list)
    for r in rows:
        buckets[(r.occurred_at.replace(second=0, microsecond=0), r.topic)].append(r)
    got = {(r.minute, r.topic): r for r in table(spark, ctx, "gold_processing_delay").collect()}
    assert set(got) == set(buckets)
    for key, events in buckets.items():
        row = got[key]
        assert row.events == len(events)
        for hop, (a, b) in hops.items():
            ms = [(getattr(e, b) - getattr(e, a)) / timedelta(milliseconds=1) for e in events]
            assert getattr(row, f"{hop}_p50_ms") == pytest.approx(percentile(ms, 0.5), abs=1e-6)
            assert getattr(row, f"{hop}_p95_ms") == pytest.approx(percentile(ms, 0.95), abs=1e-6)
            assert getattr(row, f"{hop}_max_ms") == pytest.approx(max(ms), abs=1e-6)
    # Minutes touched by a later wave were recomputed, not left at the first wave's figures.
    assert sum(run.gold.batches for run in runs["gold_processing_delay"]) == WAVES
