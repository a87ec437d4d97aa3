"""Which batch positions end on a source commit's boundary (where an event-time writer's watermark may move)."""

from __future__ import annotations

import pytest

from lakehouse.streaming.positions import BatchRecord, parse_replay


def record(**sources):
    return BatchRecord("app-q", {"flow": "silver_orders", "batch": 3, "sources": sources})


@pytest.mark.parametrize(("sources", "inside"), [
    ({"bronze_orders": {"version": 7, "table_id": "t"}}, False),                       # read version 6 to its end
    ({"bronze_orders": {"version": 7, "index": 2, "table_id": "t"}}, True),            # files 0..2 of version 7
    ({"bronze_orders": {"version": 7, "index": 4, "snapshot": True}}, True),           # part of the initial snapshot
    ({"bronze_orders": {"version": 7, "index": -1, "snapshot": True}}, True),          # snapshot not begun
    ({"silver_orders": {"version": 3}, "silver_page_views": {"version": 9, "index": 0}}, True),
    ({"silver_orders": {"version": 3}, "silver_page_views": None}, False),             # a source not read yet
    ({"orders": {"offsets": {"orders": {"0": 12}}}}, False),                           # Kafka: no commits
])
def test_a_batch_ends_inside_a_commit_only_when_a_delta_source_stopped_part_way(sources, inside):
    assert record(**sources).ends_inside_a_commit is inside


def test_batches_called_directly_never_hold_their_watermark():
    """The batch lane's calls record no positions, or whole versions: each is a commit boundary."""
    assert BatchRecord("app", None).ends_inside_a_commit is False
    assert BatchRecord("app", {"flow": "f", "sources": {"bronze_orders": {"version": 4}}}).ends_inside_a_commit is False


def test_extra_keys_go_into_the_commit_metadata_and_none_stays_out():
    text = record(bronze_orders={"version": 2, "index": 1}).metadata(final=True, held=True, held_max_micros=None)
    assert '"held":true' in text and "held_max_micros" not in text and '"final":true' in text


def test_a_replay_file_names_a_batch_and_a_query_or_is_refused():
    """A rebuilt checkpoint's replay file: absent is None; anything but a batch number and a query id is refused."""
    assert parse_replay(None) is None
    assert parse_replay('{"batch": 4, "query": "q-1"}') == (4, "q-1")
    for bad in ('', '{"batch": 4', '[]', '{"batch": "4", "query": "q"}', '{"batch": 4, "query": ""}', '{"batch": 4}',
                '\x00garbage'):
        with pytest.raises(ValueError):
            parse_replay(bad)
