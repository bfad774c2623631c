"""Where the source starts and ends reading, and how a trigger reconciles a running stream
with the brokers' queues. Pure: no broker, no Spark session."""

from __future__ import annotations

import pytest

from rmq_spark.client.offsets import QueueOffsets
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.offsets.spark import DataLoss
from rmq_spark.source.position_options import EndingPosition, StartingPosition
from rmq_spark.source.positions import (
    batch_ranges,
    ending_offsets,
    ranges_from,
    reconcile,
    starting_offsets,
    timestamps_needed,
)
from rmq_spark.structs import MessageQueue

A, B, C = (MessageQueue("t", "broker-a", i) for i in range(3))
OTHER = MessageQueue("t", "broker-b", 0)
QUEUES = {A: QueueOffsets(0, 10), B: QueueOffsets(5, 20), C: QueueOffsets(0, 0)}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("earliest", {A: 0, B: 5, C: 0}), ("latest", {A: 10, B: 20, C: 0})],
)
def test_earliest_and_latest(kind, expected):
    assert starting_offsets(StartingPosition(kind), QUEUES) == expected


def test_timestamp_start_uses_the_search_result_of_every_queue():
    position = StartingPosition("timestamp", timestamp_ms=1234)
    assert timestamps_needed(position, QUEUES) == {A: 1234, B: 1234, C: 1234}
    found = {A: 3, B: 20, C: 0}
    assert starting_offsets(position, QUEUES, at_time=found) == found


def test_group_committed_offset_wins_and_only_others_fall_back():
    committed = {A: 0, B: 7}  # 0 is a committed offset like any other
    for fallback, c_start in (("earliest", 0), ("latest", 0)):
        position = StartingPosition("group", group_fallback=fallback)
        assert starting_offsets(position, QUEUES, committed=committed) == {A: 0, B: 7, C: c_start}
    latest = StartingPosition("group", group_fallback="latest")
    assert starting_offsets(latest, QUEUES, committed={A: 4}) == {A: 4, B: 20, C: 0}


def test_group_fallback_by_timestamp_searches_only_uncommitted_queues():
    position = StartingPosition("group", timestamp_ms=99, group_fallback="timestamp")
    committed = {A: 4}
    assert timestamps_needed(position, QUEUES, committed) == {B: 99, C: 99}
    assert starting_offsets(position, QUEUES, committed=committed, at_time={B: 11, C: 0}) == {
        A: 4,
        B: 11,
        C: 0,
    }


def test_group_offset_past_the_end_starts_at_the_end():
    position = StartingPosition("group", group_fallback="earliest")
    assert starting_offsets(position, QUEUES, committed={A: 50})[A] == 10


def test_group_offset_below_the_min_is_kept_for_the_data_loss_check():
    position = StartingPosition("group", group_fallback="earliest")
    assert starting_offsets(position, QUEUES, committed={B: 1})[B] == 1


def test_json_offsets_resolve_specials_and_start_other_queues_at_earliest():
    position = StartingPosition("offsets", offsets={A: 4, B: -1})
    assert starting_offsets(position, QUEUES) == {A: 4, B: 20, C: 0}
    assert starting_offsets(StartingPosition("offsets", offsets={B: -2}), QUEUES)[B] == 5


def test_json_offsets_refuse_unknown_queues_and_offsets_past_the_end():
    with pytest.raises(NotFoundError, match=r"queue 7, which does not exist \(queues 0\.\.2"):
        starting_offsets(StartingPosition("offsets", offsets={A._replace(queue_id=7): 0}), QUEUES)
    with pytest.raises(NotFoundError, match="no readable queues on broker 'broker-b'"):
        starting_offsets(StartingPosition("offsets", offsets={OTHER: 0}), QUEUES)
    with pytest.raises(InvalidArgumentError, match="queue 0 at 11, past its end 10"):
        starting_offsets(StartingPosition("offsets", offsets={A: 11}), QUEUES)


def test_by_timestamp_searches_named_queues_only():
    position = StartingPosition("byTimestamp", offsets={B: 500})
    assert timestamps_needed(position, QUEUES) == {B: 500}
    assert starting_offsets(position, QUEUES, at_time={B: 9}) == {A: 0, B: 9, C: 0}


def test_ending_offsets():
    assert ending_offsets(EndingPosition("latest"), QUEUES) == {A: 10, B: 20, C: 0}
    named = EndingPosition("offsets", offsets={A: 6, B: -1})
    assert ending_offsets(named, QUEUES) == {A: 6, B: 20, C: 0}
    found = {A: 1, B: 6, C: 0}
    assert ending_offsets(EndingPosition("timestamp", timestamp_ms=5), QUEUES, found) == found
    with pytest.raises(InvalidArgumentError, match="queue 1 at 21, past its end 20"):
        ending_offsets(EndingPosition("offsets", offsets={B: 21}), QUEUES)


def test_batch_ranges_move_a_deleted_start_to_the_min():
    ranges, losses = batch_ranges({A: 2, B: 1, C: 0}, {A: 8, B: 20, C: 0}, QUEUES)
    assert ranges == {A: (2, 8), B: (5, 20), C: (0, 0)}
    assert losses == [DataLoss(B, "deleted", 1, 5)]
    ranges, losses = batch_ranges({A: 9}, {A: 3}, QUEUES)  # start after end: nothing
    assert ranges == {A: (9, 9)} and losses == []


def test_reconcile_keeps_healthy_queues_and_adds_new_ones_at_zero():
    state = reconcile({A: 3, B: 5}, QUEUES, lambda broker: True)
    assert state.start == {A: 3, B: 5, C: 0}
    assert state.latest == {A: 10, B: 20, C: 0}
    assert state.losses == [] and state.silent == []


def test_reconcile_finds_each_kind_of_data_loss_and_skips_to_the_min():
    queues = {A: QueueOffsets(4, 10), B: QueueOffsets(0, 3)}
    state = reconcile({A: 2, B: 8, C: 1}, queues, lambda broker: True)
    assert state.losses == [
        DataLoss(A, "deleted", 2, 4),  # retention removed 2..3
        DataLoss(B, "reset", 8, 3),  # the queue ends before the next offset
        DataLoss(C, "vanished", 1),  # the queue is gone
    ]
    assert state.start == {A: 4, B: 0}
    assert state.latest == {A: 10, B: 3}


def test_reconcile_reports_a_new_queue_whose_first_messages_are_gone():
    state = reconcile({}, {A: QueueOffsets(6, 9)}, lambda broker: True)
    assert state.losses == [DataLoss(A, "deleted", 0, 6)]
    assert state.start == {A: 6}


def test_reconcile_keeps_queues_of_a_silent_broker_where_they_were():
    state = reconcile({A: 3, OTHER: 7}, {A: QueueOffsets(0, 10)}, lambda b: b == "broker-a")
    assert state.losses == [] and state.silent == [OTHER]
    assert state.start == {A: 3, OTHER: 7}
    assert state.latest == {A: 10, OTHER: 7}


def test_ranges_from_reads_new_and_reset_queues_from_zero():
    assert ranges_from({A: 3, B: 9}, {A: 6, B: 2, C: 4}) == {A: (3, 6), B: (0, 2), C: (0, 4)}


def test_reconcile_reads_a_queue_that_went_backwards_from_its_start_not_on():
    # It ended at 15 before; now it ends at 10: re-created, even though 5 <= 10.
    state = reconcile({A: 5}, {A: QueueOffsets(0, 10)}, lambda broker: True, {A: 15})
    assert state.losses == [DataLoss(A, "shrunk", 15, 10)]
    assert state.start == {A: 0} and state.latest == {A: 10}
    grown = reconcile({A: 5}, {A: QueueOffsets(0, 20)}, lambda broker: True, {A: 15})
    assert grown.losses == [] and grown.start == {A: 5}
