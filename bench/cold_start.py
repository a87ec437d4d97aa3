"""Bench: a command that starts its own Spark, without and with the driver's class archive.

    .venv/bin/python -m bench.cold_start [--events 2000] [--rounds 3]

Preloads shop events on a private broker and catches the whole pipeline up into a lake (untimed), makes
sure the class archive of these jars exists (`lakehouse setup` builds it; built here if not), then times,
each in its own process as a user types it and with no `lakehouse serve` up:

- a gold query (`lakehouse sql`, revenue per currency over gold_revenue_per_minute);
- `lakehouse run gold_revenue_per_minute` (a Dagster run that starts its own Spark session);

each with `LAKEHOUSE_SPARK_CLASS_ARCHIVE=false` (before) and with the archive (after), alternating,
the first side rotating, medians after a warm-up of each. Each command's log must say which way its JVM
started, and both ways must give the same answer, or the bench stops. It writes
<home>/bench/results/cold_start.json (bench.harness.record) and prints the summary row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench import harness
from bench.harness import say
from bench.interactive import QUERY, caught_up_lake, command, environment

NAME = "cold_start"
RUN = ("run", "gold_revenue_per_minute")
SAID = {"false": "without a class archive", "true": "from the class archive"}   # infra/spark.py's log line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000, help="shop events in the lake (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    harness.recording_options(parser)
    args = parser.parse_args(argv)
    started, load = harness.utc_now(), harness.load_now()
    say(f"bench.cold_start: {args.events:,} shop events, {args.rounds} rounds; {harness.machine()}")
    from lakehouse.infra.class_archive import build

    with harness.bench_home(NAME) as settings, harness.private_broker(settings) as broker:
        built = build(settings.jars_dir, settings.spark_java_options)
        say(f"class archive {built.path.name}: {built.bytes / 2**20:.0f} MiB ("
            f"{'present' if built.reused else f'built in {built.seconds:.0f} s'})")
        caught_up_lake(settings, broker, args.events, NAME)
        envs = {archive: {**environment(settings, settings.home), "LAKEHOUSE_SPARK_CLASS_ARCHIVE": archive}
                for archive in SAID}
        log_path = Path(settings.log_dir) / "lakehouse.log"
        offset = len(log_path.read_text()) if log_path.exists() else 0
        sides = {f"{what}, {'archive' if archive == 'true' else 'no archive'}": command(envs[archive], *args_)
                 for what, args_ in (("sql", ("sql", QUERY)), ("run", RUN)) for archive in SAID}
        runs = harness.alternate(sides, args.rounds)
        logged = log_path.read_text()[offset:]
    answers = {run["out"] for side in ("sql, no archive", "sql, archive") for run in runs[side]}
    if len(answers) != 1:
        raise RuntimeError(f"the gold query's answers differ with and without the archive: {answers}")
    commands = len(sides) * (args.rounds + 1) // 2     # per way, warm-ups included
    for archive, said in SAID.items():
        if logged.count(said) < commands:
            raise RuntimeError(f"{commands} commands ran with LAKEHOUSE_SPARK_CLASS_ARCHIVE={archive}, but only "
                               f"{logged.count(said)} JVMs logged that they started {said}")
    median = {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()}
    for side, seconds in median.items():
        say(f"{side}: median {seconds:.2f} s")
    ratio = {what: harness.median_ratio([r["seconds"] for r in runs[f"{what}, no archive"]],
                                        [r["seconds"] for r in runs[f"{what}, archive"]]) for what in ("sql", "run")}
    figure = (f"gold query {median['sql, no archive']:.1f} s -> {median['sql, archive']:.1f} s "
              f"({ratio['sql']:.2f}x faster); lakehouse run gold_revenue_per_minute {median['run, no archive']:.1f} s -> "
              f"{median['run, archive']:.1f} s ({ratio['run']:.2f}x faster)")
    result = {"started": started.isoformat(), "events": args.events, "rounds": args.rounds,
              "archive_mib": round(built.bytes / 2**20), "median_s": {k: round(v, 3) for k, v in median.items()},
              "ratio_without_over_with": {k: round(v, 3) for k, v in ratio.items()},
              "runs": {side: harness.rounded([{k: v for k, v in r.items() if k != "out"} for r in rs])
                       for side, rs in runs.items()}}

    def row(_result) -> str:
        return harness.docs_row(
            f"{started:%Y-%m-%d %H:%M}", f"`{harness.command_line('bench.cold_start', argv)}`",
            f"a lake of {args.events:,} shop events (all 22 flows caught up); each command in its own process, no "
            f"endpoint up, so each starts a Spark driver JVM; median of {args.rounds} rotating rounds after a warm-up; "
            f"before = LAKEHOUSE_SPARK_CLASS_ARCHIVE=false, after = the class archive ({result['archive_mib']} MiB)",
            f"gold query {median['sql, no archive']:.2f} s; lakehouse run gold_revenue_per_minute "
            f"{median['run, no archive']:.1f} s",
            f"gold query {median['sql, archive']:.2f} s; lakehouse run gold_revenue_per_minute "
            f"{median['run, archive']:.1f} s",
            figure, f"{harness.machine()}, {harness.load_now()} at the end (load {load} at the start)")

    harness.publish(NAME, result, figure, row, harness.keeps(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
