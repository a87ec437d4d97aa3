"""Drill: kill -9 the Kafka broker mid-stream while events are produced; start it again a few seconds later.

    .venv/bin/python -m bench.drill_broker_loss [--losses K] [--events N] [--seed S] [--down 5,30]
                                                [--tables TABLE ...] [--quality] [--keep]

Issue 9, item 6. Its own broker on ports 19422/19423, state in a temporary folder. Each loss comes a
random delay after the stream has committed a micro-batch; the broker is killed by the PID its
launcher recorded and started again after --down seconds (cycled over the losses: by default one short
loss and one past the stream's 20 s broker watchdog). `lakehouse stream` is never touched: it must
resume by itself. The producer buffers and retries meanwhile; only what the broker acknowledged counts
as produced, and only that must arrive. Then the same checks as the crash drill (bench/drills.py).
Prints the report; exit 0 only when every difference is 0.
"""

from __future__ import annotations

import sys
from typing import Sequence

from bench import drills


def main(argv: Sequence[str] | None = None) -> int:
    return drills.main(["broker-loss", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
