"""Planning a read by message key: only the found offsets, within the options' range."""

from __future__ import annotations

import pytest

from rmq_spark.source.key_lookup import narrowed, ranges_holding, spans
from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.structs import MessageQueue

A, B, C = (MessageQueue("t", "b", i) for i in range(3))


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({A: [5]}, [(A, 5, 6)]),
        ({A: [5, 6, 7, 9]}, [(A, 5, 8), (A, 9, 10)]),
        ({A: [9, 5, 5, 6]}, [(A, 5, 7), (A, 9, 10)]),  # unordered, repeated
        ({A: [-1, 0, 99, 100, 250]}, [(A, 0, 1), (A, 99, 100)]),  # outside the range: dropped
        ({B: [5]}, []),  # another queue
        ({}, []),
    ],
)
def test_ranges_holding_the_found_offsets(found, expected):
    got = ranges_holding([QueueRange(A, 0, 100)], found)
    assert [(r.mq, r.start, r.end) for r in got] == expected


def test_spans_bound_the_planning_and_leave_out_queues_without_a_match():
    ranges = {A: (10, 100), B: (0, 50), C: (0, 10)}
    found = {A: [3, 20, 70], B: [49], C: [10, 11]}
    assert spans(ranges, found) == {A: (20, 71), B: (49, 50)}


def test_each_task_reads_only_the_found_offsets_and_empty_tasks_go():
    planned = [
        PlannedPartition((QueueRange(A, 20, 50), QueueRange(B, 0, 10))),
        PlannedPartition((QueueRange(A, 50, 71),)),
    ]
    tasks = narrowed(planned, {A: [20, 21, 35], B: [49]})
    assert [[(r.mq, r.start, r.end) for r in t.ranges] for t in tasks] == [
        [(A, 20, 22), (A, 35, 36)]
    ]
