"""Partition planning: a batch's queue ranges to Spark input partitions. Pure.

A batch reads ``[start, end)`` of every queue. Queues with nothing to read are left out, so
a batch with no data has no partitions. Four layouts:

- **Default**: one partition per queue, like Spark's Kafka source.
- **allocateStrategy + numPartitions = N**: whole queues are grouped into up to ``N``
  partitions with a RocketMQ allocation strategy, as if ``N`` consumers ``spark-0`` ..
  ``spark-{N-1}`` shared the queues: partition ``i`` reads what ``spark-i`` would own. The
  strategy sees every queue of the batch (also those without new data), so a queue keeps its
  partition from batch to batch whatever the others received. Partitions that own nothing
  with data are dropped. A strategy that leaves a queue out or hands one out twice is an
  error: the offsets move past every queue, so each must be read exactly once.
- **maxMessagesPerPartition = M** and/or **minPartitions = P**: ranges are cut into
  contiguous pieces, in offset order, each piece its own partition. First every queue with
  ``n`` messages is cut into ``ceil(n / M)`` pieces. Then, while there are fewer than ``P``
  pieces, the queue whose pieces are currently the largest (``n / pieces``; ties: queue
  order) is cut into one more, until there are ``P`` pieces or every piece holds one
  message. A queue cut into ``k`` pieces gets near-equal ones: the first ``n % k`` hold
  one message more. (Kafka's KafkaOffsetRangeCalculator rounds shares instead and may end
  above or below ``P``; this rule reaches ``P`` exactly when there are enough messages.)
- **minMessagesPerPartition = M**: whole queues, in queue order, are grouped until a group
  holds at least ``M`` messages; a last group below ``M`` joins the one before it. A batch
  of fewer than ``M`` messages in all is one partition, while a large batch keeps one
  partition per queue. Spark spends a fixed 0.1-0.3 s on every task of a micro-batch, so
  small batches read by one task end sooner: this is the low-latency layout.

Output order is deterministic: by queue then offset, or by ``i`` with an allocation.
:class:`PlannedPartition` is a picklable value; the Spark reader wraps it in its
``InputPartition`` subclass.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

if TYPE_CHECKING:
    from rmq_spark.source.options import SourceOptions

Ranges = Mapping[MessageQueue, tuple[int, int]]

#: the consumer group name given to the allocation strategy when the source has none
DEFAULT_ALLOCATE_GROUP = "spark"


@dataclass(frozen=True)
class QueueRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one queue."""

    mq: MessageQueue
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PlannedPartition:
    """The ranges one Spark task reads, in this order."""

    ranges: tuple[QueueRange, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def ranges_between(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> Ranges:
    """``{mq: (start, end)}`` for every queue of ``end``; a queue missing from ``start`` or
    ending before its start is a bug in the caller and raises InvalidArgumentError."""
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    for mq in sorted(end):
        if mq not in start:
            raise InvalidArgumentError(f"end offsets name {mq}, which has no start offset")
        ranges[mq] = (start[mq], end[mq])
    _checked_ranges(ranges)
    return ranges


def plan_partitions(
    ranges: Ranges,
    *,
    allocate_strategy: str | None = None,
    num_partitions: int | None = None,
    group: str | None = None,
    min_partitions: int | None = None,
    max_messages_per_partition: int | None = None,
    min_messages_per_partition: int | None = None,
) -> list[PlannedPartition]:
    """Spark partitions for ``{mq: (start, end)}``; see the module doc for the layouts.

    >>> a, b = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    >>> [p.ranges[0].size for p in plan_partitions({a: (0, 10), b: (5, 5)}, min_partitions=3)]
    [4, 3, 3]
    """
    checked = _checked_ranges(ranges)
    if allocate_strategy is not None or num_partitions is not None:
        if allocate_strategy is None or num_partitions is None or num_partitions < 1:
            raise InvalidArgumentError(
                f"allocate_strategy={allocate_strategy!r} and num_partitions={num_partitions!r}"
                " go together; num_partitions must be >= 1"
            )
        layout = (min_partitions, max_messages_per_partition, min_messages_per_partition)
        if any(value is not None for value in layout):
            raise InvalidArgumentError(
                "an allocation strategy groups whole queues; it cannot be combined with "
                "min_partitions, max_messages_per_partition or min_messages_per_partition"
            )
        return _allocate(checked, allocate_strategy, num_partitions, group)
    sizes = {mq: end - start for mq, (start, end) in checked.items() if end > start}
    if min_messages_per_partition is not None:
        if min_partitions is not None or max_messages_per_partition is not None:
            raise InvalidArgumentError(
                "min_messages_per_partition groups whole queues; it cannot be combined with "
                "min_partitions or max_messages_per_partition, which cut them"
            )
        return [
            PlannedPartition(tuple(QueueRange(mq, *checked[mq]) for mq in queues))
            for queues in group_queues(sizes, min_messages_per_partition)
        ]
    counts = piece_counts(sizes, min_partitions, max_messages_per_partition)
    return [
        PlannedPartition((piece,))
        for mq in sorted(counts)
        for piece in split_range(QueueRange(mq, *checked[mq]), counts[mq])
    ]


def plan_for_options(ranges: Ranges, options: SourceOptions) -> list[PlannedPartition]:
    """:func:`plan_partitions` with the layout the source options ask for."""
    return plan_partitions(
        ranges,
        allocate_strategy=options.allocate_strategy,
        num_partitions=options.num_partitions,
        group=options.group,
        min_partitions=options.min_partitions,
        max_messages_per_partition=options.max_messages_per_partition,
        min_messages_per_partition=options.min_messages_per_partition,
    )


def group_queues(sizes: Mapping[MessageQueue, int], min_messages: int) -> list[list[MessageQueue]]:
    """Queues with messages, in queue order, grouped until each group holds at least
    ``min_messages``; a last group below it joins the one before.

    >>> q = [MessageQueue("t", "b", i) for i in range(4)]
    >>> [[mq.queue_id for mq in g] for g in group_queues(dict(zip(q, [5, 0, 3, 9])), 8)]
    [[0, 2], [3]]
    """
    if min_messages < 1:
        raise InvalidArgumentError(f"min_messages_per_partition must be >= 1, got {min_messages}")
    groups: list[list[MessageQueue]] = []
    current: list[MessageQueue] = []
    held = 0
    for mq in sorted(sizes):
        if sizes[mq] <= 0:
            continue
        current.append(mq)
        held += sizes[mq]
        if held >= min_messages:
            groups.append(current)
            current, held = [], 0
    if current:
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def piece_counts(
    sizes: Mapping[MessageQueue, int],
    min_partitions: int | None = None,
    max_messages_per_partition: int | None = None,
) -> dict[MessageQueue, int]:
    """Into how many pieces each queue range of ``sizes`` messages is cut (rule above).

    >>> a, b = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    >>> piece_counts({a: 100, b: 10}, min_partitions=4)
    {MessageQueue(topic='t', broker_name='b', queue_id=0): 3, \
MessageQueue(topic='t', broker_name='b', queue_id=1): 1}
    """
    for name, value in (
        ("min_partitions", min_partitions),
        ("max_messages_per_partition", max_messages_per_partition),
    ):
        if value is not None and value < 1:
            raise InvalidArgumentError(f"{name} must be >= 1, got {value}")
    limit = max_messages_per_partition
    counts = {
        mq: 1 if limit is None else -(-n // limit) for mq, n in sorted(sizes.items()) if n > 0
    }
    missing = (min_partitions or 0) - sum(counts.values())
    # Largest current piece first; only queues whose pieces still hold 2+ messages can be cut.
    heap = [(-sizes[mq] / k, mq) for mq, k in counts.items() if sizes[mq] > k]
    heapq.heapify(heap)
    while missing > 0 and heap:
        _, mq = heapq.heappop(heap)
        counts[mq] += 1
        missing -= 1
        if sizes[mq] > counts[mq]:
            heapq.heappush(heap, (-sizes[mq] / counts[mq], mq))
    return counts


def split_range(queue_range: QueueRange, parts: int) -> list[QueueRange]:
    """Cut a range into ``parts`` contiguous near-equal pieces (the first ``size % parts``
    hold one more); never more pieces than messages.

    >>> [(r.start, r.end) for r in split_range(QueueRange(MessageQueue("t", "b", 0), 10, 20), 3)]
    [(10, 14), (14, 17), (17, 20)]
    """
    if parts < 1:
        raise InvalidArgumentError(f"a range is cut into at least 1 piece, not {parts}")
    parts = max(1, min(parts, queue_range.size))
    small, bigger = divmod(queue_range.size, parts)
    pieces: list[QueueRange] = []
    offset = queue_range.start
    for i in range(parts):
        size = small + (1 if i < bigger else 0)
        pieces.append(QueueRange(queue_range.mq, offset, offset + size))
        offset += size
    return pieces


def _allocate(
    ranges: dict[MessageQueue, tuple[int, int]], name: str, num: int, group: str | None
) -> list[PlannedPartition]:
    from rmq_spark.allocate import get_strategy

    strategy = get_strategy(name)
    if not any(end > start for start, end in ranges.values()):
        return []
    cids = [f"spark-{i}" for i in range(num)]
    mq_all = sorted(ranges)
    owner: dict[MessageQueue, str] = {}
    partitions: list[PlannedPartition] = []
    for cid in cids:
        owned = strategy.allocate(group or DEFAULT_ALLOCATE_GROUP, cid, mq_all, cids)
        for mq in owned:
            if mq not in ranges:
                raise InvalidArgumentError(
                    f"allocate strategy {name!r} gave {cid} queue {mq}, which the batch does "
                    "not read; use a strategy that splits the given queues (avg, "
                    "avgByCircle, consistentHash)"
                )
            if mq in owner:
                raise InvalidArgumentError(
                    f"allocate strategy {name!r} gave queue {mq} to both {owner[mq]} and "
                    f"{cid}; each queue must be read by exactly one partition"
                )
            owner[mq] = cid
        pieces = tuple(QueueRange(mq, *ranges[mq]) for mq in sorted(owned))
        pieces = tuple(piece for piece in pieces if piece.size > 0)
        if pieces:
            partitions.append(PlannedPartition(pieces))
    unowned = [mq for mq in mq_all if mq not in owner]
    if unowned:
        raise InvalidArgumentError(
            f"allocate strategy {name!r} left {len(unowned)} queues to no partition (first: "
            f"{unowned[0]}); their offsets would advance unread, so this strategy cannot plan "
            "Spark partitions"
        )
    return partitions


def _checked_ranges(ranges: Ranges) -> dict[MessageQueue, tuple[int, int]]:
    checked: dict[MessageQueue, tuple[int, int]] = {}
    for mq in sorted(ranges):
        start, end = ranges[mq]
        if not (_is_int(start) and _is_int(end) and 0 <= start <= end):
            raise InvalidArgumentError(
                f"range {start!r}..{end!r} of {mq} must be integers with 0 <= start <= end"
            )
        checked[mq] = (start, end)
    return checked


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
