"""The timer's progress rule and its encodings (rmq_spark.broker.delivery.timer_progress)."""

from __future__ import annotations

import doctest
import random

import pytest

from rmq_spark.broker.delivery import timer_progress
from rmq_spark.broker.delivery.timer_progress import (
    TimerProgress,
    encode_done,
    parse_done,
    progress_from_json,
)
from rmq_spark.errors import CorruptDataError
from rmq_spark.offsets.journal import OffsetJournal, read_journal


def test_doctests():
    assert doctest.testmod(timer_progress).failed == 0


def test_marks_in_any_order_or_twice_give_the_same_progress():
    rng = random.Random(3)
    offsets = list(range(100))
    rng.shuffle(offsets)
    progress = TimerProgress()
    for i in range(0, 100, 7):
        progress.mark(offsets[i : i + 7])
        progress.mark(offsets[i : i + 3])  # replayed
        done = set(offsets[: i + 7])
        assert all(progress.is_done(o) == (o in done) for o in range(110))
        assert progress.low == min(set(range(101)) - done)
        assert progress.done == {o for o in done if o > progress.low}
    assert (progress.low, progress.done) == (100, set())


def test_skip_below_and_cut_at():
    progress = TimerProgress(5, [7, 9, 20])
    progress.skip_below(8)  # retention removed 5..7
    assert (progress.low, sorted(progress.done)) == (8, [9, 20])
    progress.skip_below(3)  # lower: nothing changes
    assert progress.low == 8
    progress.cut_at(10)  # the queue ends at 10: offset 20 will be new messages
    assert (progress.low, sorted(progress.done)) == (8, [9])
    progress.cut_at(4)
    assert (progress.low, progress.done) == (4, set())


@pytest.mark.parametrize(
    "document",
    [[], {"low": -1, "done": []}, {"low": 1}, {"low": True, "done": []}, {"low": 0, "done": ["x"]}],
)
def test_bad_progress_documents_are_refused(document):
    with pytest.raises(CorruptDataError):
        progress_from_json(document)


def test_journal_replay_stops_at_a_torn_tail(tmp_path):
    path = tmp_path / "timer.journal"
    journal = OffsetJournal(path, sync=False)
    journal.append(encode_done([0, 2]))
    journal.append(encode_done([1]))
    journal.close()
    intact = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x10torn")
    done, good = read_journal(path, parse_done)
    assert (done, good) == ([[0, 2], [1]], intact)
    progress = TimerProgress()
    for offsets in done:
        progress.mark(offsets)
    assert (progress.low, progress.done) == (3, set())
    assert parse_done(b'{"set":1}') is None


def test_journal_truncate_starts_over(tmp_path):
    path = tmp_path / "timer.journal"
    journal = OffsetJournal(path, sync=True)
    journal.make_durable(journal.append(encode_done([0])))
    journal.truncate()
    assert journal.size == 0 and path.stat().st_size == 0
    journal.make_durable(journal.append(encode_done([4])))
    journal.close()
    assert read_journal(path, parse_done)[0] == [[4]]
