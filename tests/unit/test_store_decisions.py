"""The store's decisions, each a pure function: which segments retention deletes, what a
read returns and where it goes next, where a time lands in a queue, which arguments are
refused, and what an open finds."""

from __future__ import annotations

import numpy as np
import pytest

from rmq_spark.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from rmq_spark.store import checks
from rmq_spark.store.checkpoint import Checkpoint, RocketMQCheckpoint
from rmq_spark.store.opening import existing_queues, last_store_timestamp
from rmq_spark.store.reads import first_offset_at, illegal_offset_next, pick_entries
from rmq_spark.store.retention import expired_end
from rmq_spark.store.topics import TopicConfig


@pytest.mark.parametrize(
    ("segments", "cutoff", "expected"),
    [
        ([], 10.0, None),  # only the segment being written: nothing to delete
        ([(100, 9.0)], 10.0, 100),
        ([(100, 10.0)], 10.0, None),  # modified at the cutoff: kept
        ([(100, 1.0), (200, 2.0), (300, 3.0)], 10.0, 300),
        ([(100, 1.0), (200, 12.0), (300, 3.0)], 10.0, 100),  # stops at the first young one
        ([(100, 12.0), (200, 1.0)], 10.0, None),
    ],
)
def test_retention_deletes_the_leading_run_of_old_segments(segments, cutoff, expected):
    assert expired_end(segments, cutoff) == expected


def test_retention_reads_no_modification_time_past_the_first_young_segment():
    asked = []

    def segments():
        for end, mtime in [(100, 1.0), (200, 12.0), (300, 3.0)]:
            asked.append(end)
            yield end, mtime

    assert expired_end(segments(), 10.0) == 100
    assert asked == [100, 200]


@pytest.mark.parametrize(
    ("offset", "lo", "hi", "expected"),
    [
        (3, 10, 20, 10),  # deleted by retention: the oldest
        (25, 10, 20, 20),  # past the end of a queue retention has cut: the end
        (25, 0, 20, 0),  # past the end, nothing ever deleted: read again from the start
        (-1, 0, 20, 0),
        (5, 0, 0, 0),  # a queue never written
    ],
)
def test_where_a_reader_outside_the_queue_goes(offset, lo, hi, expected):
    assert illegal_offset_next(offset, lo, hi) == expected


@pytest.mark.parametrize(
    ("tags", "sizes", "max_count", "max_bytes", "wanted", "picked", "limited"),
    [
        ([1, 2, 1], [10, 10, 10], 32, 100, None, [0, 1, 2], False),  # all fit
        ([1, 2, 1], [10, 10, 10], 2, 100, None, [0, 1], True),  # count reached
        ([1, 2, 1], [60, 60, 60], 32, 100, None, [0], True),  # bytes reached
        ([1, 2, 1], [500, 10, 10], 32, 100, None, [0], True),  # one, however large
        ([1, 2, 1], [10, 10, 10], 32, 100, [1], [0, 2], False),  # filtered by tag
        ([1, 2, 1], [10, 10, 10], 1, 100, [1], [0], True),
        ([1, 2, 1], [10, 10, 10], 32, 100, [7], [], False),  # nothing matches
        ([], [], 32, 100, None, [], False),
    ],
)
def test_which_entries_a_read_returns(tags, sizes, max_count, max_bytes, wanted, picked, limited):
    got, got_limited = pick_entries(
        np.array(tags, np.int64), np.array(sizes, np.int32), max_count, max_bytes, wanted
    )
    assert got.tolist() == picked
    assert got_limited == limited


@pytest.mark.parametrize(
    ("stored", "timestamp", "expected"),
    [
        ([100, 200, 300, 400], 0, 0),
        ([100, 200, 300, 400], 200, 1),
        ([100, 200, 300, 400], 250, 2),
        ([100, 200, 300, 400], 401, 4),  # after the last: the end
        ([100, 100, 100, 200], 100, 0),  # the first of equal times
        ([100, None, 300], 150, 1),  # an offset with no message counts as late enough
        ([], 5, 0),
    ],
)
def test_the_first_offset_stored_at_or_after_a_time(stored, timestamp, expected):
    assert first_offset_at(0, len(stored), stored.__getitem__, timestamp) == expected


def test_a_time_is_searched_from_the_queue_minimum():
    stored = {5: 100, 6: 200, 7: 300}
    assert first_offset_at(5, 8, stored.__getitem__, 150) == 6


ORDERS = TopicConfig("orders", 4, 4)


@pytest.mark.parametrize(
    ("check", "error", "message"),
    [
        (
            lambda: checks.check_writable("orders", TopicConfig("orders", 4, 4, perm=4)),
            PermissionDeniedError,
            "update it with perm 6",
        ),
        (
            lambda: checks.check_write_queue("orders", 4, ORDERS),
            InvalidArgumentError,
            r"queue id 4 is out of range .* 4 write queues \(0..3\)",
        ),
        (
            lambda: checks.check_write_queue("orders", "1", ORDERS),
            InvalidArgumentError,
            "queue id '1' is out of range",
        ),
        (
            lambda: checks.check_body_sizes(np.array([10, 900, 2000]), 800),
            InvalidArgumentError,
            "message 2: body of 2000 bytes exceeds the limit of 800",
        ),
        (
            lambda: checks.check_record_sizes(np.array([100, 5000]), 4096),
            InvalidArgumentError,
            "a record of 5000 bytes does not fit",
        ),
        (
            lambda: checks.check_read_args(True, 1, 1),
            InvalidArgumentError,
            "offset True must be a whole number",
        ),
        (lambda: checks.check_read_args(0, 0, 1), InvalidArgumentError, "max_count 0 must be"),
        (lambda: checks.check_read_args(0, 1, 0), InvalidArgumentError, "max_bytes 0 must be"),
        (
            lambda: checks.check_queue_id(-1),
            InvalidArgumentError,
            "queue id -1 must be a whole number >= 0",
        ),
        (
            lambda: checks.check_read_queue("gone", 0, None),
            NotFoundError,
            "topic 'gone' does not exist; create it first",
        ),
        (
            lambda: checks.check_read_queue("orders", 4, ORDERS),
            NotFoundError,
            "has 4 read queues; queue 4 does not exist",
        ),
    ],
)
def test_refused_arguments_name_the_value(check, error, message):
    with pytest.raises(error, match=message):
        check()


@pytest.mark.parametrize(
    "check",
    [
        lambda: checks.check_writable("orders", ORDERS),
        lambda: checks.check_write_queue("orders", 3, ORDERS),
        lambda: checks.check_body_sizes(np.array([800]), 800),
        lambda: checks.check_record_sizes(np.array([100]), 4096),
        lambda: checks.check_read_args(0, 1, 1),
        lambda: checks.check_queue_id(0),
        lambda: checks.check_read_queue("orders", 3, ORDERS),
        lambda: checks.check_read_queue("orders", 5, TopicConfig("orders", 4, 8)),
    ],
)
def test_accepted_arguments_pass(check):
    check()


@pytest.mark.parametrize(
    ("last", "rocketmq", "expected"),
    [
        (None, None, 0),
        (Checkpoint(1, 0, 1_500, 1_400), None, 1_500),
        (None, RocketMQCheckpoint(1_500, 1_400, 1_000), 1_500),
        (Checkpoint(1, 0, 1_000, 1_000), RocketMQCheckpoint(2_000, 0, 0), 2_000),
        (Checkpoint(1, 0, 3_000, 1_000), RocketMQCheckpoint(2_000, 0, 0), 3_000),
    ],
)
def test_appends_after_an_open_are_stamped_no_earlier_than_recorded(last, rocketmq, expected):
    assert last_store_timestamp(last, rocketmq) == expected


def test_an_open_finds_the_queue_directories(tmp_path):
    base = tmp_path / "consumequeue"
    assert existing_queues(base) == []
    for name in ("orders/1", "orders/0", "orders/10", "audit/3", "orders/tmp"):
        (base / name).mkdir(parents=True)
    assert existing_queues(base) == [("audit", 3), ("orders", 0), ("orders", 1), ("orders", 10)]
