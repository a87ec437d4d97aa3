"""The timestamp literals gold's pruning conditions are built from are exact to the microsecond."""

from datetime import datetime, timezone

from streaming.gold_batches import timestamp_literal


def test_a_timestamp_literal_keeps_every_microsecond():
    for micros in (1_793_610_000_123_457, 1_793_610_000_999_999, 1_793_610_000_000_001, 0):
        seconds, fraction = divmod(micros, 1_000_000)
        expected = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        assert timestamp_literal(micros) == f"TIMESTAMP '{expected}.{fraction:06d}Z'"
