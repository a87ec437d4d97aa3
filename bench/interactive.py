"""Bench: how long a person waits for `lakehouse sql`, with and without `lakehouse serve`, and for a small `lakehouse run`.

    .venv/bin/python -m bench.interactive [--events 20000] [--rounds 3]

Preloads shop events on a private broker and catches the whole pipeline up into a lake (untimed), then
starts `lakehouse serve` on that lake and times, as a user types them, each command in its own process:

- a gold query (revenue per currency over gold_revenue_per_minute) without an endpoint (the command starts
  its own Spark) and with the endpoint (`lakehouse serve`'s Spark Connect server) up;
- the same query with a mistyped table name (one sentence back), both ways;
- `lakehouse run bronze_customers` (a Dagster run of one small asset) without an endpoint (the run starts
  its own Spark) and with the endpoint up (the run's catch-up runs in the endpoint's session);
- `lakehouse backfill` of today's partition of gold_revenue_per_minute (no table reads it), as a partition
  materialized in the UI runs: the batch lane's recompute and its asset checks, both ways;
- before those rounds, the first of those backfills sent to a fresh endpoint, once with the endpoint's
  warm-up of the run path off and once after it (`LAKEHOUSE_SERVE_WARM_UP`).

"Without" runs from a second state folder on the same lake, where no endpoint is recorded. Each round
runs every case once, the order rotating; the figures are medians after a warm-up of each. The answers
with and without the endpoint must be the same text, or the bench stops. Issue 10's target: a gold query
in at most 3 s and a small materialization in at most 10 s when the services are up. It writes
<home>/bench/results/interactive.json (bench.harness.record) and prints the summary row for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from bench import harness
from bench.harness import say

NAME = "interactive"
LAKEHOUSE = Path(sys.executable).with_name("lakehouse")
QUERY = ("SELECT currency, sum(revenue_cents) AS revenue_cents, sum(orders) AS orders "
         "FROM gold_revenue_per_minute GROUP BY currency ORDER BY currency")
TYPO = "SELECT * FROM gold_revenue_per_minut"
TARGET_QUERY_S, TARGET_RUN_S = 3.0, 10.0
BACKFILLED = "gold_revenue_per_minute"


def environment(settings, home: str) -> dict[str, str]:
    return {**harness.this_checkout(os.environ), "LAKEHOUSE_HOME": home, "LAKEHOUSE_LAKE_ROOT": settings.lake_root,
            "LAKEHOUSE_JARS_DIR": settings.jars_dir, "LAKEHOUSE_KAFKA_PORT": str(settings.kafka_port),
            "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port)}


def command(env: dict[str, str], *args: str, ok: set[int] = frozenset({0})) -> Callable[[str], dict]:
    """A side that runs `lakehouse ARGS` once and returns its seconds and output."""
    def side(_label: str) -> dict:
        began = time.perf_counter()
        proc = subprocess.run([str(LAKEHOUSE), *args], env=env, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - began
        if proc.returncode not in ok:
            raise RuntimeError(f"lakehouse {' '.join(args)} exited {proc.returncode}: {proc.stderr[-1500:]}")
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        return {"seconds": seconds, "out": proc.stdout + "\n".join(errors)}
    return side


def caught_up_lake(settings, broker, events: int, name: str) -> None:
    """Send `events` shop events to the broker and catch all 22 flows up into the bench's lake (untimed)."""
    from bench.quality import catch_up

    harness.send(harness.shop_events(events), events, broker.bootstrap)
    with harness.spark_session(settings, name) as (spark, _pid):
        result = catch_up(spark, harness.project_context(settings, settings.lake_root), 3)
        say(f"lake caught up (untimed) in {result['total_s']:.0f} s")


def start_endpoint(env: dict[str, str], home: str) -> tuple[subprocess.Popen, float]:
    began = time.perf_counter()
    log = open(Path(home) / "serve.out", "w")
    proc = subprocess.Popen([str(LAKEHOUSE), "serve", "--port", str(harness.free_port())], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    state = Path(home) / "serve.json"
    while not state.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"lakehouse serve exited {proc.returncode}; see {home}/serve.out")
        time.sleep(0.1)
    return proc, time.perf_counter() - began


WARMED = re.compile(r"warmed up the run path in ([\d.]+) s")
WARM_UP_FAILED = "the warm-up of the run path failed"


def stop(endpoint: subprocess.Popen) -> None:
    endpoint.send_signal(signal.SIGTERM)
    endpoint.wait(timeout=120)


def first_backfill(env: dict[str, str], home: str, log: Path, backfill: tuple[str, ...], *,
                   warm_up: bool) -> dict[str, float | None]:
    """A fresh endpoint, its run-path warm-up on or off: the first backfill sent to it once the warm-up has ended."""
    env = {**env, "LAKEHOUSE_SERVE_WARM_UP": str(warm_up).lower()}
    seen = len(WARMED.findall(log.read_text())) if log.exists() else 0
    endpoint, _ = start_endpoint(env, home)
    try:
        warm_s = None
        if warm_up:
            deadline = time.monotonic() + 600
            while not (found := WARMED.findall(log.read_text())[seen:]):
                if WARM_UP_FAILED in log.read_text() or endpoint.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"lakehouse serve's warm-up did not end; see {log}")
                time.sleep(0.5)
            warm_s = float(found[0])
        first = command(env, *backfill)("first")["seconds"]
    finally:
        stop(endpoint)
    return {"warm_up_s": warm_s, "first_backfill_s": first}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.interactive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="shop events in the lake (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--no-record", action="store_true",
                        help="print only; do not write the JSON (<home>/bench/results/interactive.json)")
    args = parser.parse_args(argv)
    started, load = harness.utc_now(), harness.load_now()
    say(f"bench.interactive: {args.events:,} shop events, {args.rounds} rounds; {harness.machine()}")
    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker:
        caught_up_lake(settings, broker, args.events, NAME)
        warm = environment(settings, settings.home)
        cold_home = str(Path(settings.home) / "no-endpoint")
        cold = environment(settings, cold_home)
        today = harness.utc_now().date().isoformat()   # the newest events' date
        backfill = ("backfill", "--from", today, "--to", today, "--table", BACKFILLED)
        # A fresh endpoint's first run is its slowest: without the endpoint's warm-up of the run path, then with it.
        log_path = Path(settings.log_dir) / "lakehouse.log"
        cold_first = first_backfill(warm, settings.home, log_path, backfill, warm_up=False)
        warm_first = first_backfill(warm, settings.home, log_path, backfill, warm_up=True)
        say(f"first backfill sent to a fresh endpoint: {cold_first['first_backfill_s']:.2f} s without its warm-up, "
            f"{warm_first['first_backfill_s']:.2f} s after it (the warm-up took {warm_first['warm_up_s']:.1f} s)")
        offset = len(log_path.read_text())   # the log lines of the endpoint the rounds use come after
        endpoint, start_s = start_endpoint(warm, settings.home)
        say(f"lakehouse serve up in {start_s:.1f} s (pid {endpoint.pid})")
        try:
            sides = {
                "query, no endpoint": command(cold, "sql", QUERY),
                "query, endpoint": command(warm, "sql", QUERY),
                "typo, no endpoint": command(cold, "sql", TYPO, ok={2}),
                "typo, endpoint": command(warm, "sql", TYPO, ok={2}),
                "run, no endpoint": command(cold, "run", "bronze_customers"),
                "run, endpoint": command(warm, "run", "bronze_customers"),
                "backfill, no endpoint": command(cold, *backfill),
                "backfill, endpoint": command(warm, *backfill),
            }
            runs = harness.alternate(sides, args.rounds)
        finally:
            stop(endpoint)
        for case in ("query", "typo"):
            answers = {run["out"] for side in (f"{case}, no endpoint", f"{case}, endpoint") for run in runs[side]}
            if len(answers) != 1:
                raise RuntimeError(f"the {case} answers differ with and without the endpoint: {answers}")
        shutil.rmtree(cold_home, ignore_errors=True)
        # The endpoint logs how long each answer took inside it: the rest of a command's time is its own start.
        logged = log_path.read_text()[offset:]
        inside = [float(m.group(1)) for m in re.finditer(r"answered sql over Spark Connect in ([\d.]+) s", logged)]
        steps = [float(m.group(1)) for m in re.finditer(r"ran a catch_up step in ([\d.]+) s", logged)]
        backfills = [float(m.group(1)) for m in re.finditer(r"ran a backfill step in ([\d.]+) s", logged)]
        check_steps = [float(m.group(1)) for m in re.finditer(r"ran a check step in ([\d.]+) s", logged)]
        checks = len(check_steps)
        for kind, ran in (("run", steps), ("backfill", backfills)):
            if len(ran) < len(runs[f"{kind}, endpoint"]):
                raise RuntimeError(f"{len(runs[f'{kind}, endpoint'])} {kind}s with the endpoint up, {len(ran)} ran in it")
    median = {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()}
    for side, seconds in median.items():
        say(f"{side}: median {seconds:.2f} s")
    inside_s = statistics.median(inside) if inside else float("nan")
    say(f"inside the endpoint: median {inside_s:.2f} s per sql answer ({len(inside)} answers)")
    step_s = statistics.median(steps)
    say(f"inside the endpoint: median {step_s:.2f} s per catch-up step of lakehouse run ({len(steps)} steps)")
    backfill_s = statistics.median(backfills)
    say(f"inside the endpoint: median {backfill_s:.2f} s per backfill step ({len(backfills)} steps, and {checks} "
        f"check steps, {sum(check_steps):.1f} s in all)")
    figure = (f"gold query {median['query, no endpoint']:.1f} s -> {median['query, endpoint']:.2f} s with lakehouse serve "
              f"({median['query, no endpoint'] / median['query, endpoint']:.1f}x; target <= {TARGET_QUERY_S:.0f} s "
              f"{harness.met(median['query, endpoint'] <= TARGET_QUERY_S)}); mistyped table "
              f"{median['typo, no endpoint']:.1f} s -> {median['typo, endpoint']:.2f} s; inside the endpoint {inside_s:.2f} s "
              f"per answer; lakehouse run bronze_customers {median['run, no endpoint']:.1f} s -> "
              f"{median['run, endpoint']:.1f} s with lakehouse serve, {step_s:.1f} s of it in the endpoint (target <= {TARGET_RUN_S:.0f} s "
              f"{harness.met(median['run, endpoint'] <= TARGET_RUN_S)}); a one-day backfill of {BACKFILLED} with its "
              f"checks {median['backfill, no endpoint']:.1f} s -> {median['backfill, endpoint']:.1f} s, "
              f"{backfill_s:.1f} s of it the backfill step in the endpoint; the first backfill sent to a fresh "
              f"endpoint {cold_first['first_backfill_s']:.1f} s without its warm-up of the run path, "
              f"{warm_first['first_backfill_s']:.1f} s after it ({warm_first['warm_up_s']:.1f} s)")
    say(figure)
    if args.no_record:
        return 0
    result = {"started": started.isoformat(), "events": args.events, "rounds": args.rounds, "serve_start_s": round(start_s, 2),
              "inside_endpoint_median_s": round(inside_s, 3),
              "run_step_in_endpoint_median_s": round(step_s, 3),
              "backfill_step_in_endpoint_median_s": round(backfill_s, 3), "check_steps_in_endpoint": checks,
              "first_backfill_s": {"without_warm_up": round(cold_first["first_backfill_s"], 2),
                                   "after_warm_up": round(warm_first["first_backfill_s"], 2),
                                   "warm_up_s": warm_first["warm_up_s"]},
              "check_steps_in_endpoint_s": round(sum(check_steps), 2),
              "median_s": {k: round(v, 3) for k, v in median.items()},
              "runs": {side: harness.rounded([{k: v for k, v in r.items() if k != "out"} for r in rs])
                       for side, rs in runs.items()}}
    row = harness.docs_row(
        f"{started:%Y-%m-%d %H:%M}", f"`{harness.command_line('bench.interactive', argv)}`",
        f"a lake of {args.events:,} shop events (all 22 flows caught up); each command in its own process as a user "
        f"types it; median of {args.rounds} rotating rounds after a warm-up; before = no endpoint (the command starts "
        f"Spark), after = `lakehouse serve` up (started in {start_s:.1f} s)",
        f"gold query {median['query, no endpoint']:.2f} s; mistyped table {median['typo, no endpoint']:.2f} s; "
        f"lakehouse run bronze_customers {median['run, no endpoint']:.1f} s; one-day backfill of {BACKFILLED} "
        f"{median['backfill, no endpoint']:.1f} s",
        f"gold query {median['query, endpoint']:.2f} s; mistyped table {median['typo, endpoint']:.2f} s; "
        f"lakehouse run bronze_customers {median['run, endpoint']:.1f} s; one-day backfill of {BACKFILLED} "
        f"{median['backfill, endpoint']:.1f} s",
        figure, f"{harness.machine()}, {harness.load_now()} at the end (load {load} at the start)")
    harness.record(NAME, result, row)
    print(json.dumps(result["median_s"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
