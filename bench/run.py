"""Run one bench by name: `python -m bench.run NAME [its options]` (the CLI's `lakehouse bench NAME` calls main).

Each bench is a module of bench/ with a `main(argv) -> int`; `python -m bench.run NAME --help` shows its
options, `python -m bench.run --help` lists the benches.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module, one line). A bench added later (freshness) gets a line here.
BENCHES: dict[str, tuple[str, str]] = {
    "ingest": ("bench.ingest", "events/s of the bronze flow vs the barest Spark Kafka->Delta job and raw "
                               "confluent-kafka consumers (target bronze/bare >= 0.95)"),
    "pipeline": ("bench.pipeline", "events/s and seconds per layer of a whole bronze->silver->gold catch-up at "
                                   "two sizes: fixed cost and cost per event (target >= 50,000 events/s at 1.6M)"),
    "growth": ("bench.growth", "ingest and pipeline at three sizes: least-squares slope (µs/event), fixed cost "
                               "and R^2: does the time grow linearly?"),
    "quality": ("bench.quality", "what the quality gate costs a whole catch-up, with vs without validation"),
    "compaction": ("bench.compaction", "a gold query on many small files, before and after OPTIMIZE ZORDER BY"),
    "interactive": ("bench.interactive", "seconds a person waits for lakehouse sql with and without lakehouse serve, "
                                         "and for a small lakehouse run (targets 3 s and 10 s)"),
    "freshness": ("bench.freshness", "send -> silver and send -> gold delay (p50/p95/p99) of `lakehouse stream` at fixed rates "
                                     "(--floor: the barest job instead; --hops N: a chain of N bare queries, as the layers are)"),
    "verify": ("bench.verify", "lakehouse verify of every table, one at a time vs LAKEHOUSE_CATCH_UP_PARALLEL at once, "
                               "same verdicts required"),
    "cold_start": ("bench.cold_start", "lakehouse sql and a one-table lakehouse run with no endpoint up (each starts "
                                       "its own Spark driver), without and with the driver's class archive"),
    "gold_growth": ("bench.gold_growth", "one small silver and gold batch with hours of history in the lake against "
                                         "little: does a stream's batch cost more as the day goes on?"),
    "catch_up_job": ("bench.catch_up_job", "a whole catch-up as Dagster's catch_up job (lakehouse run, the demo, "
                                           "the UI) against its flows alone: what recording them adds"),
}


def usage() -> str:
    width = max(len(n) for n in BENCHES)
    lines = ["usage: python -m bench.run NAME [options]   (lakehouse bench NAME [options])", "",
             "Benches (each prints its figures and a summary row for docs/benchmarks.md, and writes its JSON "
             "to <home>/bench/results/NAME.json, by default .lakehouse/bench/results; NAME --help shows a "
             "bench's options):"]
    lines += [f"  {name:<{width}}  {line}" for name, (_, line) in BENCHES.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHES:
        print(f"There is no bench called {name!r}; choose one of {', '.join(BENCHES)} "
              "(python -m bench.run --help lists them).", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHES[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
