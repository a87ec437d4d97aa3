"""The timestamp literals of pruning conditions, and the instants reported in logs and metadata, are exact to the microsecond."""

from datetime import datetime, timezone

from lakehouse.streaming.context import iso_micros, timestamp_literal


def test_a_timestamp_literal_keeps_every_microsecond():
    for micros in (1_793_610_000_123_457, 1_793_610_000_999_999, 1_793_610_000_000_001, 0):
        seconds, fraction = divmod(micros, 1_000_000)
        expected = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        assert timestamp_literal(micros) == f"TIMESTAMP '{expected}.{fraction:06d}Z'"


def test_an_instant_is_reported_to_the_microsecond_even_in_year_9999():
    """A far-future event time (bad input) is reported as it is, not rounded by a float into year 10000."""
    assert iso_micros(253_402_300_799_999_999) == "9999-12-31T23:59:59.999999+00:00"
    assert iso_micros(164_061_845_704_258_037) == "7168-11-29T22:55:04.258037+00:00"
    assert iso_micros(None) is None
