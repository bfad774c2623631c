"""ProcessQueue: in-flight offsets and the committable offset they allow."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.client.process_queue import ProcessQueue
from rmq_spark.errors import InvalidArgumentError


def test_nothing_put_is_minus_one():
    pq = ProcessQueue()
    assert pq.committable_offset() == -1
    assert pq.remove_messages([3]) == -1
    assert pq.msg_count == 0 and pq.max_offset_put == -1


def test_slow_first_message_holds_back_the_commit():
    pq = ProcessQueue()
    assert pq.put_messages(range(10)) == 10
    assert pq.committable_offset() == 0
    assert pq.remove_messages(range(1, 10)) == 0  # 1..9 done, 0 still in flight
    assert pq.msg_count == 1 and pq.in_flight_offsets() == [0]
    assert pq.remove_messages([0]) == 10  # empty: max put + 1
    assert pq.committable_offset() == 10


def test_commit_advances_to_the_smallest_in_flight():
    pq = ProcessQueue()
    pq.put_messages([5, 6, 7, 8])
    assert pq.remove_messages([5]) == 6
    assert pq.remove_messages([7]) == 6
    assert pq.remove_messages([6]) == 8
    assert pq.remove_messages([6]) == 8  # removing again changes nothing
    pq.put_messages([9, 10])
    assert pq.remove_messages([8, 9, 10]) == 11


def test_duplicates_and_sizes():
    pq = ProcessQueue()
    assert pq.put_messages([1, 2, 2], body_sizes=[10, 20, 99]) == 2
    assert pq.put_messages([2, 3], body_sizes=[5, 30]) == 1
    assert pq.msg_count == 3 and pq.msg_size == 60
    pq.remove_messages([2])
    assert pq.msg_size == 40


def test_offsets_below_committed_are_ignored():
    pq = ProcessQueue()
    pq.put_messages([5])
    assert pq.remove_messages([5]) == 6
    assert pq.put_messages([3]) == 0  # already committed past
    assert pq.committable_offset() == 6
    assert pq.put_messages([6]) == 1
    assert pq.committable_offset() == 6


def test_out_of_order_puts_before_any_commit_are_kept():
    pq = ProcessQueue()
    pq.put_messages([5, 6])
    pq.put_messages([2, 3])
    assert pq.committable_offset() == 2


def test_timestamps_and_drop():
    now = iter(range(100, 200))
    pq = ProcessQueue(clock_ms=lambda: next(now))
    assert (pq.last_pull_timestamp_ms, pq.last_consume_timestamp_ms) == (100, 101)
    pq.put_messages([1])
    assert pq.last_pull_timestamp_ms == 102
    pq.remove_messages([1])
    assert pq.last_consume_timestamp_ms == 103
    assert not pq.is_dropped
    pq.drop()
    assert pq.is_dropped


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1"])
def test_bad_offsets(bad):
    with pytest.raises(InvalidArgumentError):
        ProcessQueue().put_messages([bad])
    with pytest.raises(InvalidArgumentError):
        ProcessQueue().remove_messages([bad])


def test_sizes_must_match():
    with pytest.raises(InvalidArgumentError, match="body sizes"):
        ProcessQueue().put_messages([1, 2], body_sizes=[1])
    with pytest.raises(InvalidArgumentError, match="body size"):
        ProcessQueue().put_messages([1], body_sizes=[-1])


def test_numpy_arrays_work_like_lists():
    pq = ProcessQueue()
    offsets = np.arange(100, 356, dtype=np.int64)
    assert pq.put_messages(offsets, np.full(256, 10, dtype=np.int32)) == 256
    assert pq.msg_size == 2560
    assert pq.remove_messages(offsets[32:64]) == 100  # 100..131 still in flight
    assert pq.remove_messages(offsets[:32]) == 164
    assert pq.put_messages(np.array([120, 400], dtype=np.uint64)) == 1  # 120 committed past
    assert pq.remove_messages(offsets[64:]) == 400
    assert pq.msg_count == 1 and pq.msg_size == 0


def test_bad_numpy_offsets_are_refused_naming_the_value():
    with pytest.raises(InvalidArgumentError, match="offset -4 must be"):
        ProcessQueue().put_messages(np.array([3, -4], dtype=np.int64))
    with pytest.raises(InvalidArgumentError, match="must be a whole number"):
        ProcessQueue().remove_messages(np.array([1.5]))
    with pytest.raises(InvalidArgumentError, match="body size -1"):
        ProcessQueue().put_messages(np.array([1]), np.array([-1]))


operations = st.lists(
    st.tuples(st.sampled_from(["put", "remove", "query"]), st.lists(st.integers(0, 40))),
    max_size=40,
)


@given(operations)
def test_committable_matches_a_model(ops):
    pq = ProcessQueue()
    in_flight: set[int] = set()
    max_put = -1
    handed_out = -1
    for kind, offsets in ops:
        if kind == "put":
            new = {o for o in offsets if o not in in_flight and o >= handed_out}
            assert pq.put_messages(offsets) == len(new)
            in_flight |= new
            max_put = max([max_put, *new])
            continue
        if kind == "remove":
            in_flight -= set(offsets)
            got = pq.remove_messages(offsets)
        else:
            got = pq.committable_offset()
        if in_flight:
            expected = min(in_flight)  # the smallest offset in flight ...
        elif max_put == -1:
            expected = -1  # ... or -1 when nothing was ever put ...
        else:
            expected = max_put + 1  # ... or one past the largest ever put
        assert got == expected
        assert got >= handed_out  # ... never decreasing
        handed_out = got
        assert pq.msg_count == len(in_flight)
        assert pq.in_flight_offsets() == sorted(in_flight)
