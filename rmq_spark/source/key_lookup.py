"""A batch read of the messages stored under one key (option ``messageKey``): one of their
KEYS, or their UNIQ_KEY (a producer's message id).

Planning asks each broker's message index (rocketlite's ``QueryMessagesByKey``, RocketMQ's
``QUERY_MESSAGE`` through a name server, or the ``index/`` files of a store directory) which
queue offsets hold such messages, plans the queues as usual over the span of the offsets
found (:func:`spans`), then has each task read only those offsets (:func:`narrowed`),
within the range the other options give (starting/ending offsets or timestamps). The index
answers a bounded number of messages per broker and topic (:data:`MAX_PER_BROKER`; Apache
RocketMQ's brokers 64); reaching that bound is logged, since more may exist.

The decisions are pure functions.

>>> from rmq_spark.structs import MessageQueue
>>> mq = MessageQueue("t", "b", 0)
>>> found = {mq: [7, 8, 9, 42, 150]}
>>> [(r.start, r.end) for r in ranges_holding([QueueRange(mq, 0, 100)], found)]
[(7, 10), (42, 43)]
>>> spans({mq: (0, 100)}, found)[mq]
(7, 43)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.source")

#: messages a lookup asks each broker for, per topic
MAX_PER_BROKER = 1000


def ranges_holding(
    ranges: Iterable[QueueRange], found: Mapping[MessageQueue, Iterable[int]]
) -> list[QueueRange]:
    """The parts of ``ranges`` that hold a found offset: runs of consecutive offsets become
    one range each, in queue and offset order."""
    narrowed: list[QueueRange] = []
    for queue_range in ranges:
        offsets = sorted(
            {o for o in found.get(queue_range.mq, ()) if queue_range.start <= o < queue_range.end}
        )
        run_start = None
        for i, offset in enumerate(offsets):
            if run_start is None:
                run_start = offset
            if i + 1 == len(offsets) or offsets[i + 1] != offset + 1:
                narrowed.append(QueueRange(queue_range.mq, run_start, offset + 1))
                run_start = None
    return narrowed


def spans(
    ranges: Mapping[MessageQueue, tuple[int, int]], found: Mapping[MessageQueue, Iterable[int]]
) -> dict[MessageQueue, tuple[int, int]]:
    """Per queue, from its first to past its last found offset inside its range; queues
    with none are left out."""
    kept = {}
    for mq, (start, end) in ranges.items():
        inside = [o for o in found.get(mq, ()) if start <= o < end]
        if inside:
            kept[mq] = (min(inside), max(inside) + 1)
    return kept


def narrowed(
    planned: Iterable[PlannedPartition], found: Mapping[MessageQueue, Iterable[int]]
) -> list[PlannedPartition]:
    """Each partition reading only the found offsets of its ranges (empty ones dropped)."""
    tasks = [PlannedPartition(tuple(ranges_holding(p.ranges, found))) for p in planned]
    return [task for task in tasks if task.ranges]


class KeyIndex(Protocol):
    """The brokers' message indexes, as a :class:`~rmq_spark.source.access.BrokerAccess`
    answers them."""

    #: the most messages a key lookup gets from one broker for one topic
    @property
    def max_key_matches(self) -> int: ...

    def offsets_by_key(
        self, topic: str, key: str, max_count: int
    ) -> dict[MessageQueue, list[int]]: ...


def offsets_by_key(
    access: KeyIndex, topics: Iterable[str], key: str
) -> dict[MessageQueue, list[int]]:
    """Every queue offset the brokers' indexes name for ``key`` in ``topics``."""
    found: dict[MessageQueue, list[int]] = {}
    for topic in sorted(set(topics)):
        per_queue = access.offsets_by_key(topic, key, access.max_key_matches)
        for mq, offsets in per_queue.items():
            found.setdefault(mq, []).extend(offsets)
        by_broker: dict[str, int] = {}
        for mq, offsets in per_queue.items():
            by_broker[mq.broker_name] = by_broker.get(mq.broker_name, 0) + len(offsets)
        cap = access.max_key_matches
        full = sorted(name for name, n in by_broker.items() if n >= cap)
        if full:
            log.warning(
                "key %r in topic %r: brokers %s answered %d messages, as many as a lookup "
                "gets; more may be stored under it",
                key, topic, ", ".join(full), cap,
            )  # fmt: skip
    return found
