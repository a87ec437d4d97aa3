"""The quality gate's results: a catch-up holds them and writes them once, when its last flow has ended."""

from __future__ import annotations

import pytest

from lakehouse.quality.gate import Gate


class CountingRecorder:
    """Stands in for the Delta and Data Docs writer (the gate's holding is under test, not the writes)."""

    def __init__(self):
        self.flushes = 0

    def flush(self, spark) -> int:
        self.flushes += 1
        return 1


def test_results_held_during_a_catch_up_are_written_once_at_its_end_even_when_it_fails(tmp_path):
    gate = Gate(str(tmp_path / "results"), suites={})
    gate.recorder = recorder = CountingRecorder()
    assert gate.flush(None) == 1 and recorder.flushes == 1       # a flow's run on its own writes at its end
    with gate.holding_results(None):
        assert [gate.flush(None) for _ in range(3)] == [0, 0, 0]  # three flows end: nothing written yet
        assert recorder.flushes == 1
    assert recorder.flushes == 2                                  # once, for all of them
    with pytest.raises(RuntimeError):
        with gate.holding_results(None):
            gate.flush(None)
            raise RuntimeError("a flow failed")
    assert recorder.flushes == 3                                  # a failed catch-up's results are written too
    assert gate.flush(None) == 1 and recorder.flushes == 4        # and holding ends with it
