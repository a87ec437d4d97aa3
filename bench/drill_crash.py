"""Drill: kill -9 `lakehouse stream` (its whole process group) at random points while events are produced.

    .venv/bin/python -m bench.drill_crash [--kills 20] [--events N] [--seed S] [--max-delay SECONDS]
                                          [--tables TABLE ...] [--quality] [--query-per-topic | --alternate] [--keep]

Issue 9, item 6. Its own broker on ports 19420/19421, state in a temporary folder. Each kill comes a
random delay after the stream has committed a micro-batch; the stream is started again each time.
After the last restart the producer finishes, the stream catches up and is stopped with SIGTERM, and
the lake is checked: bronze's coordinates, silver's ids, quarantine and late arrivals against what
the broker acknowledged; every silver and gold table against the batch lane's recomputation; and
gold_revenue_per_minute against plain Python. Prints the report; exit 0 only when every difference
is 0. The drill itself lives in bench/drills.py.
"""

from __future__ import annotations

import sys
from typing import Sequence

from bench import drills


def main(argv: Sequence[str] | None = None) -> int:
    return drills.main(["crash", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
