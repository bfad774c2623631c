"""Exactly once through ``nameServer``, its pure decisions as tables: the answer to a
broker's check of a half message given the records in the checkpoint, and which recorded
half messages a replay still commits. Plus the record's round trip through its file."""

from __future__ import annotations

import pytest

from rmq_spark.client.remoting.transactions import HalfRef
from rmq_spark.sink import half_record as hr

COMMITTED_NOT_ENDED = hr.RecordView(ended=False, keys=frozenset({"k1", "k2"}))
ENDED = hr.RecordView(ended=True)

CHECKS = [
    # (what, records, batch of the half message, its key) -> answer
    ("a row of a batch recorded as committed, not yet ended", {4: COMMITTED_NOT_ENDED}, 4, "k1",
     hr.COMMIT),
    ("a failed task attempt's row of that batch", {4: COMMITTED_NOT_ENDED}, 4, "stray",
     hr.ROLLBACK),
    ("a copy of a row of an ended batch (the broker wrote it while checking)", {4: ENDED}, 4,
     "k1", hr.ROLLBACK),
    ("a replay's row of a batch ended by the first run", {4: ENDED}, 4, "replayed",
     hr.ROLLBACK),
    ("a row of the batch being written (no record yet)", {4: ENDED}, 5, "k9", hr.UNKNOW),
    ("a row of the first batch of a new query", {}, 0, "k9", hr.UNKNOW),
    ("a row of an older batch with no record (aborted, or pruned)", {7: ENDED}, 3, "k1",
     hr.ROLLBACK),
    ("an older batch whose record is kept and ended", {3: ENDED, 7: ENDED}, 3, "k1",
     hr.ROLLBACK),
    ("a half message that names no batch", {4: COMMITTED_NOT_ENDED}, None, "k1", hr.UNKNOW),
]  # fmt: skip


@pytest.mark.parametrize(
    "records, batch, key, answer", [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS]
)
def test_the_answer_to_a_check(records, batch, key, answer):
    assert hr.check_answer(records, batch, key) == answer


def half(key: str, queue: int = 0, offset: int = 0) -> HalfRef:
    return HalfRef(key, "broker-a", "T", queue, offset * 100, offset)


RECORDED = [half("a", 0, 1), half("b", 1, 2), half("c", 0, 3), half("d", 1, 4)]

REPLAYS = [
    # (what, recorded half messages, unique keys found in their queues) -> keys to commit
    ("the first run committed nothing", RECORDED, set(), ["a", "b", "c", "d"]),
    ("it committed some: only the rest, in order", RECORDED, {"a", "d"}, ["b", "c"]),
    ("it committed every one: nothing", RECORDED, {"a", "b", "c", "d"}, []),
    ("rows of others found in the queues change nothing", RECORDED, {"x", "b"},
     ["a", "c", "d"]),
    ("a key recorded twice is committed once", [*RECORDED, half("a", 0, 9)], set(),
     ["a", "b", "c", "d"]),
    ("an empty batch", [], {"a"}, []),
]  # fmt: skip


@pytest.mark.parametrize(
    "recorded, visible, todo", [c[1:] for c in REPLAYS], ids=[c[0] for c in REPLAYS]
)
def test_what_a_replay_still_commits(recorded, visible, todo):
    assert [h.key for h in hr.still_to_end(recorded, visible)] == todo


def test_a_record_survives_its_file(tmp_path):
    state = hr.SinkState(tmp_path / "rocketlite-sink")
    record = hr.BatchRecord(
        "q-1",
        3,
        list(RECORDED),
        {"broker-a": "127.0.0.1:10911"},
        {("T", "broker-a", 0): 10, ("T", "broker-a", 1): 20},
        ordered=True,
    )
    state.save(record)
    back = hr.SinkState(tmp_path / "rocketlite-sink").load(3)
    assert back == record
    assert state.views() == {3: hr.RecordView(False, frozenset("abcd"))}
    record.ended = True
    state.save(record)
    ended = hr.SinkState(tmp_path / "rocketlite-sink").load(3)
    assert ended is not None and ended.ended and ended.halves == []  # coordinates dropped
    assert state.unended() == []


def test_old_ended_records_are_pruned_but_never_one_still_to_end(tmp_path):
    state = hr.SinkState(tmp_path)
    for batch in range(15):
        state.save(hr.BatchRecord("q-1", batch, ended=batch != 2))
    state.prune()
    assert state.batches() == [2, *range(5, 15)]
