"""Planning a batch: how much each queue reads (admission control) and how the queue ranges
become Spark partitions. Pure arithmetic, no Spark session."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
)

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.limits import (
    TriggerLimits,
    backlogs,
    byte_budgets,
    limit_offsets,
    share,
    should_delay,
)
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import (
    PlannedPartition,
    QueueRange,
    group_queues,
    piece_counts,
    plan_for_options,
    plan_partitions,
    ranges_between,
    split_range,
)
from rmq_spark.structs import MessageQueue


def mq(queue_id: int, broker: str = "broker-a", topic: str = "orders") -> MessageQueue:
    return MessageQueue(topic, broker, queue_id)


def queues(n: int) -> list[MessageQueue]:
    return [mq(i) for i in range(n)]


# -- admission control -------------------------------------------------------------------

# Per queue: (start offset, backlog); a negative backlog is a queue whose latest offset went
# below the start (reset), which must stay put.
queue_states = st.lists(
    st.tuples(st.integers(0, 10**12), st.integers(-5, 10**6) | st.integers(0, 3)),
    min_size=1,
    max_size=12,
)


def offsets_from(states: list[tuple[int, int]]) -> tuple[dict, dict]:
    start = {mq(i): s for i, (s, _) in enumerate(states)}
    latest = {mq(i): max(0, s + b) for i, (s, b) in enumerate(states)}
    return start, latest


@settings(max_examples=100, deadline=None)
@given(queue_states, st.integers(1, 10**7))
def test_ends_stay_between_start_and_latest_and_admit_min_of_budget_and_backlog(
    states: list[tuple[int, int]], budget: int
) -> None:
    start, latest = offsets_from(states)
    ends = limit_offsets(start, latest, TriggerLimits(max_messages=budget))
    assert ends.keys() == start.keys()
    for q in start:
        assert start[q] <= ends[q] <= max(start[q], latest[q])
    waiting = backlogs(start, latest)
    total = sum(ends[q] - start[q] for q in start)
    assert total == min(budget, sum(waiting.values()))
    admitted = {q: ends[q] - start[q] for q in waiting}
    if budget >= len(waiting):
        # The starvation rule: every queue with a backlog moves when the budget allows it.
        assert all(count >= 1 for count in admitted.values())
    else:
        assert sorted(admitted.values()) == [0] * (len(waiting) - budget) + [1] * budget


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=10), st.integers(1, 10**6))
def test_shares_are_proportional_to_backlog_beyond_the_first_message(
    sizes: list[int], budget: int
) -> None:
    waiting = {mq(i): n for i, n in enumerate(sizes)}
    total, n = sum(sizes), len(sizes)
    taken = share(waiting, budget)
    if budget >= total:
        assert taken == waiting
    elif budget >= n:
        for q, count in taken.items():
            exact = 1 + (budget - n) * (waiting[q] - 1) / (total - n)
            assert abs(count - exact) < 1


@settings(max_examples=50)
@given(queue_states, st.integers(1, 1000), st.randoms())
def test_result_does_not_depend_on_dict_order(
    states: list[tuple[int, int]], budget: int, rnd: random.Random
) -> None:
    start, latest = offsets_from(states)
    items = list(start.items())
    rnd.shuffle(items)
    limits = TriggerLimits(max_messages=budget)
    assert limit_offsets(dict(items), latest, limits) == limit_offsets(start, latest, limits)


@pytest.mark.parametrize(
    ("backlog", "budget", "expected"),
    [
        ([90, 10], 50, [45, 5]),  # floors 44 + 4, the leftover to the larger remainder
        ([1000, 1000, 2], 100, [50, 49, 1]),  # the small queue still moves
        ([10, 10, 10], 10, [4, 3, 3]),  # tie on the remainder: queue order
        ([5, 0, 7], 100, [5, 0, 7]),  # everything fits
        ([3, 3, 3, 3], 4, [1, 1, 1, 1]),  # exactly one each
    ],
)
def test_share_table(backlog: list[int], budget: int, expected: list[int]) -> None:
    waiting = {mq(i): n for i, n in enumerate(backlog)}
    taken = share(waiting, budget)
    assert [taken.get(mq(i), 0) for i in range(len(backlog))] == expected


def test_tiny_budget_rotates_round_robin_across_triggers() -> None:
    # 5 busy queues, 2 messages per trigger: 5 triggers read each queue exactly twice.
    start = {q: 100 for q in queues(5)}
    latest = {q: 10**6 for q in queues(5)}
    reads = dict.fromkeys(start, 0)
    for _ in range(5):
        ends = limit_offsets(start, latest, TriggerLimits(max_messages=2))
        for q in start:
            reads[q] += ends[q] - start[q]
        start = ends
    assert set(reads.values()) == {2}


def test_no_limit_reads_to_latest_and_never_moves_back() -> None:
    start = {mq(0): 5, mq(1): 50, mq(2): 7}
    latest = {mq(0): 9, mq(1): 40}  # queue 1 went backwards, queue 2 vanished
    assert limit_offsets(start, latest, TriggerLimits()) == {mq(0): 9, mq(1): 50, mq(2): 7}


def test_new_queue_without_start_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="has no start offset"):
        limit_offsets({mq(0): 0}, {mq(0): 5, mq(1): 5}, TriggerLimits())


def test_byte_budgets_share_the_limit_by_measured_bytes() -> None:
    assert byte_budgets({mq(0): 300, mq(1): 100}, 10_000) is None  # everything fits
    assert byte_budgets({mq(0): 30_000, mq(1): 10_000}, 20_000) == {mq(0): 15_000, mq(1): 5_000}
    # A tiny share is still a share: the broker then admits that queue's next message.
    assert byte_budgets({mq(0): 10**9, mq(1): 10}, 1000) == {mq(0): 999, mq(1): 0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=8), st.integers(1, 10**9))
def test_byte_budgets_never_add_up_to_more_than_the_limit(sizes: list[int], max_bytes: int):
    budgets = byte_budgets({mq(i): size for i, size in enumerate(sizes)}, max_bytes)
    if sum(sizes) <= max_bytes:
        assert budgets is None
    else:
        assert budgets is not None and sum(budgets.values()) <= max_bytes
        assert all(0 <= budgets[mq(i)] <= size for i, size in enumerate(sizes))


@pytest.mark.parametrize(
    ("waiting", "last", "now", "available_now", "delay"),
    [
        (5, 0, 1_000, False, True),  # too few, not waited long enough
        (5, 0, 60_000, False, False),  # waited maxTriggerDelay: run with what is there
        (100, 0, 1_000, False, False),  # enough messages
        (0, 0, 1_000, False, False),  # nothing to wait for (the batch is empty anyway)
        (5, None, 1_000, False, False),  # first trigger of this run
        (5, 0, 1_000, True, False),  # Trigger.AvailableNow never waits
    ],
)
def test_should_delay(
    waiting: int, last: int | None, now: int, available_now: bool, delay: bool
) -> None:
    limits = TriggerLimits(min_messages=100, max_trigger_delay_ms=60_000)
    assert (
        should_delay(waiting, limits, last_trigger_ms=last, now_ms=now, available_now=available_now)
        is delay
    )
    assert should_delay(waiting, TriggerLimits(), last_trigger_ms=last, now_ms=now) is False


def test_default_read_limit_reports_the_main_limit() -> None:
    assert TriggerLimits().default_read_limit() == ReadAllAvailable()
    assert TriggerLimits(max_messages=5, max_bytes=9).default_read_limit() == ReadMaxRows(5)
    assert TriggerLimits(max_bytes=9, min_messages=2).default_read_limit() == ReadMaxBytes(9)
    assert TriggerLimits(min_messages=2).default_read_limit() == ReadMinRows(2)


def test_limits_for_the_engines_read_limit() -> None:
    configured = TriggerLimits(max_messages=5, max_bytes=9, min_messages=2, max_trigger_delay_ms=7)
    everything = configured.for_read_limit(ReadAllAvailable())
    assert (everything.max_messages, everything.max_bytes, everything.min_messages) == (
        None,
        None,
        None,
    )
    assert configured.for_read_limit(ReadMaxRows(3)).max_messages == 3
    assert configured.for_read_limit(ReadMaxRows(3)).max_bytes == 9
    assert configured.for_read_limit(ReadMaxBytes(4)).max_bytes == 4
    assert configured.for_read_limit(ReadMinRows(1)).min_messages == 1
    with pytest.raises(InvalidArgumentError, match=r"ReadMaxFiles.* is not supported"):
        configured.for_read_limit(ReadMaxFiles(1))


def test_limits_from_options() -> None:
    opts = SourceOptions.parse(
        {
            "endpoints": "h:1",
            "topic": "t",
            "maxMessagesPerTrigger": "10",
            "minMessagesPerTrigger": "3",
            "maxTriggerDelay": "5s",
        },
        streaming=True,
    )
    assert TriggerLimits.from_options(opts) == TriggerLimits(10, None, 3, 5000)


# -- partition planning ------------------------------------------------------------------


def covered(partitions: list[PlannedPartition]) -> dict[MessageQueue, list[tuple[int, int]]]:
    pieces: dict[MessageQueue, list[tuple[int, int]]] = {}
    for partition in partitions:
        for r in partition.ranges:
            pieces.setdefault(r.mq, []).append((r.start, r.end))
    return pieces


def assert_exact_cover(ranges: dict, partitions: list[PlannedPartition]) -> None:
    """Every queue with data is read once, in offset order, with no gap and no overlap."""
    pieces = covered(partitions)
    assert pieces.keys() == {q for q, (s, e) in ranges.items() if e > s}
    for q, parts in pieces.items():
        assert all(e > s for s, e in parts), "no empty piece"
        assert parts[0][0] == ranges[q][0] and parts[-1][1] == ranges[q][1]
        assert all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))


ranges_strategy = st.lists(
    st.tuples(st.integers(0, 10**9), st.integers(0, 5000)), min_size=0, max_size=16
).map(lambda rs: {mq(i, f"broker-{i % 3}"): (s, s + n) for i, (s, n) in enumerate(rs)})


def test_default_is_one_partition_per_queue_with_data() -> None:
    ranges = {mq(2): (5, 9), mq(0): (0, 3), mq(1): (7, 7)}
    assert plan_partitions(ranges) == [
        PlannedPartition((QueueRange(mq(0), 0, 3),)),
        PlannedPartition((QueueRange(mq(2), 5, 9),)),
    ]
    assert plan_partitions({mq(0): (4, 4)}) == []
    assert plan_partitions({}) == []


@settings(max_examples=60, deadline=None)
@given(ranges_strategy, st.none() | st.integers(1, 64), st.none() | st.integers(1, 3000))
def test_splitting_covers_every_range_exactly_once(
    ranges: dict, min_partitions: int | None, max_per_partition: int | None
) -> None:
    partitions = plan_partitions(
        ranges, min_partitions=min_partitions, max_messages_per_partition=max_per_partition
    )
    assert_exact_cover(ranges, partitions)
    sizes = [p.size for p in partitions]
    total = sum(e - s for s, e in ranges.values())
    if max_per_partition is not None:
        assert all(size <= max_per_partition for size in sizes)
    if min_partitions is not None:
        # Exactly minPartitions when there are enough messages, unless the other rules
        # already made more pieces.
        assert len(partitions) >= min(min_partitions, total)
        if max_per_partition is None and len(ranges) <= min_partitions <= total:
            assert len(partitions) == min_partitions
    # Deterministic, and ordered by queue then offset.
    assert partitions == plan_partitions(
        dict(reversed(ranges.items())),
        min_partitions=min_partitions,
        max_messages_per_partition=max_per_partition,
    )
    keys = [(p.ranges[0].mq, p.ranges[0].start) for p in partitions]
    assert keys == sorted(keys)


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "max_per", "expected"),
    [
        ([100, 10], None, None, [1, 1]),
        ([100, 10], 4, None, [3, 1]),  # the big queue is cut until there are 4 pieces
        ([100, 10], 2, None, [1, 1]),  # enough partitions already
        ([100, 100, 100], 4, None, [2, 1, 1]),  # ties: queue order
        ([3, 1], 10, None, [3, 1]),  # at most one piece per message
        ([100, 10], None, 30, [4, 1]),  # ceil(100 / 30)
        ([100, 10], 8, 30, [7, 1]),  # max first, then up to minPartitions
        ([1000, 10, 10], 4, None, [2, 1, 1]),
    ],
)
def test_piece_count_table(
    sizes: list[int], min_partitions: int | None, max_per: int | None, expected: list[int]
) -> None:
    counts = piece_counts({mq(i): n for i, n in enumerate(sizes)}, min_partitions, max_per)
    assert [counts[mq(i)] for i in range(len(sizes))] == expected


@pytest.mark.parametrize(
    ("sizes", "min_messages", "expected"),
    [
        ([5, 5, 5, 5], 100, [[0, 1, 2, 3]]),  # a small batch: one task
        ([50, 60, 70, 80], 10, [[0], [1], [2], [3]]),  # a large one: a task per queue
        ([5, 0, 3, 9], 8, [[0, 2], [3]]),  # queues without messages are left out
        ([9, 1, 1], 8, [[0, 1, 2]]),  # a last group under the minimum joins the one before
        ([4, 4, 4, 4, 4], 8, [[0, 1], [2, 3, 4]]),
        ([0, 0], 8, []),
    ],
)
def test_group_queues_table(sizes: list[int], min_messages: int, expected: list) -> None:
    groups = group_queues({mq(i): n for i, n in enumerate(sizes)}, min_messages)
    assert [[q.queue_id for q in group] for group in groups] == expected


@settings(max_examples=60, deadline=None)
@given(ranges_strategy, st.integers(1, 20_000))
def test_grouping_reads_every_range_whole_and_once(ranges: dict, min_messages: int) -> None:
    partitions = plan_partitions(ranges, min_messages_per_partition=min_messages)
    assert_exact_cover(ranges, partitions)
    assert all(len({r.mq for r in p.ranges}) == len(p.ranges) for p in partitions)
    assert all(p.size >= min_messages for p in partitions[:-1])
    if sum(e - s for s, e in ranges.values()) < 2 * min_messages:
        assert len(partitions) <= 1


@pytest.mark.parametrize(
    ("start", "end", "parts", "expected"),
    [
        (10, 20, 3, [(10, 14), (14, 17), (17, 20)]),
        (0, 4, 4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
        (0, 2, 5, [(0, 1), (1, 2)]),  # never an empty piece
        (7, 8, 1, [(7, 8)]),
    ],
)
def test_split_range_table(start: int, end: int, parts: int, expected: list) -> None:
    pieces = split_range(QueueRange(mq(0), start, end), parts)
    assert [(p.start, p.end) for p in pieces] == expected


@pytest.mark.parametrize("strategy", ["avg", "avgByCircle", "consistentHash"])
@settings(max_examples=30, deadline=None)
@given(ranges=ranges_strategy, num=st.integers(1, 20))
def test_each_allocation_strategy_covers_every_queue_once(
    strategy: str, ranges: dict, num: int
) -> None:
    partitions = plan_partitions(ranges, allocate_strategy=strategy, num_partitions=num)
    assert_exact_cover(ranges, partitions)
    assert len(partitions) <= num
    assert all(p.ranges for p in partitions)
    for p in partitions:
        assert list(p.ranges) == sorted(p.ranges, key=lambda r: r.mq)


def test_avg_groups_contiguous_blocks_like_consumers() -> None:
    ranges = {q: (0, 10) for q in queues(8)}
    partitions = plan_partitions(ranges, allocate_strategy="avg", num_partitions=3)
    # spark-0 .. spark-2 own 3, 3 and 2 queues as three RocketMQ consumers would.
    assert [[r.mq.queue_id for r in p.ranges] for p in partitions] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_allocation_ignores_which_queues_got_data() -> None:
    # A queue keeps its partition slot whether or not the other queues received data.
    busy = plan_partitions(
        {q: (0, 5) for q in queues(6)}, allocate_strategy="avg", num_partitions=3
    )
    quiet = {q: (0, 5) if q.queue_id == 4 else (5, 5) for q in queues(6)}
    only = plan_partitions(quiet, allocate_strategy="avg", num_partitions=3)
    assert only == [PlannedPartition((QueueRange(mq(4), 0, 5),))]
    assert any(QueueRange(mq(4), 0, 5) in p.ranges for p in busy)


def test_allocation_that_leaves_queues_unread_is_refused(monkeypatch) -> None:
    from rmq_spark.allocate import AllocateMessageQueueByMachineRoom

    # Offsets move past every queue of the batch, so a queue no partition reads is lost.
    room_one = AllocateMessageQueueByMachineRoom({"room1"})
    monkeypatch.setattr("rmq_spark.allocate.get_strategy", lambda name: room_one)
    ranges = {MessageQueue("t", "room1@b", 0): (0, 5), MessageQueue("t", "room2@b", 0): (0, 5)}
    with pytest.raises(InvalidArgumentError, match="left 1 queues to no partition"):
        plan_partitions(ranges, allocate_strategy="machineRoom", num_partitions=2)


def test_allocation_that_reads_a_queue_twice_is_refused(monkeypatch) -> None:
    from rmq_spark.allocate import AllocateMessageQueueByConfig

    everyone_reads_all = AllocateMessageQueueByConfig(queues(2))
    monkeypatch.setattr("rmq_spark.allocate.get_strategy", lambda name: everyone_reads_all)
    with pytest.raises(InvalidArgumentError, match=r"gave queue .* to both spark-0 and spark-1"):
        plan_partitions(
            {q: (0, 5) for q in queues(2)}, allocate_strategy="config", num_partitions=2
        )


def test_allocation_of_a_queue_outside_the_batch_is_refused(monkeypatch) -> None:
    from rmq_spark.allocate import AllocateMessageQueueByConfig

    elsewhere = AllocateMessageQueueByConfig([mq(7)])
    monkeypatch.setattr("rmq_spark.allocate.get_strategy", lambda name: elsewhere)
    with pytest.raises(InvalidArgumentError, match="which the batch does not read"):
        plan_partitions({mq(0): (0, 5)}, allocate_strategy="config", num_partitions=1)


def test_planning_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="go together"):
        plan_partitions({mq(0): (0, 1)}, allocate_strategy="avg")
    with pytest.raises(InvalidArgumentError, match="cannot be combined with min_partitions"):
        plan_partitions(
            {mq(0): (0, 1)}, allocate_strategy="avg", num_partitions=2, min_partitions=4
        )
    with pytest.raises(InvalidArgumentError, match="it cannot be combined with min_partitions"):
        plan_partitions({mq(0): (0, 1)}, min_messages_per_partition=4, min_partitions=2)
    with pytest.raises(InvalidArgumentError, match="min_messages_per_partition must be >= 1"):
        plan_partitions({mq(0): (0, 1)}, min_messages_per_partition=0)
    with pytest.raises(InvalidArgumentError, match=r"range 5\.\.3 of"):
        plan_partitions({mq(0): (5, 3)})
    with pytest.raises(InvalidArgumentError, match="unknown allocate strategy 'nope'"):
        plan_partitions({mq(0): (0, 0)}, allocate_strategy="nope", num_partitions=2)


def test_ranges_between_offsets() -> None:
    assert ranges_between({mq(0): 3, mq(1): 9}, {mq(0): 5, mq(1): 9}) == {
        mq(0): (3, 5),
        mq(1): (9, 9),
    }
    with pytest.raises(InvalidArgumentError, match="has no start offset"):
        ranges_between({}, {mq(0): 5})


def test_plan_for_options_and_partitions_pickle() -> None:
    opts = SourceOptions.parse(
        {"endpoints": "h:1", "topic": "orders", "maxMessagesPerPartition": "4"}, streaming=True
    )
    partitions = plan_for_options({mq(0): (0, 10)}, opts)
    assert [p.size for p in partitions] == [4, 3, 3]
    assert pickle.loads(pickle.dumps(partitions)) == partitions
