"""Admission control: how far each queue may advance in one micro-batch. Pure arithmetic.

Given the next offset to read (``start``) and the brokers' latest offsets (``latest``) per
queue, :func:`limit_offsets` returns the end offsets of the next batch:

- Every end lies in ``[start, max(start, latest)]``: never past the data, never backwards.
- Without a limit, or when the whole backlog fits, every queue ends at ``latest``.
- Otherwise exactly ``budget`` messages are admitted (``budget`` below), shared in
  proportion to each queue's backlog, like Spark's Kafka source. The rule, exactly:

  * ``budget >= n`` (``n`` queues with backlog): each of them first gets 1 message, so a
    small queue next to large ones is never starved; the remaining ``budget - n`` are
    shared in proportion to ``backlog - 1``, each queue taking the floor of its share and
    the leftover messages going one each to the largest fractional parts (ties: queue
    order).
  * ``budget < n``: ``budget`` queues get 1 message each, taken as a window of consecutive
    queues (sorted order, wrapping) starting at ``sum(start offsets) % n``. Each trigger
    adds exactly ``budget`` to that sum, so successive triggers visit the following windows:
    round robin without keeping state, the same after a restart from the checkpoint.

- ``budget`` is ``maxMessagesPerTrigger``.
- ``maxBytesPerTrigger`` then narrows those ends by bytes, exactly: the brokers measure each
  queue's range from the record sizes in its consume-queue entries, :func:`byte_budgets`
  shares the limit in proportion to those bytes, and each broker says how far its queue's
  share goes (``QueueOffsetsQuery.size_budget_bytes``). A batch holds at most
  ``maxBytesPerTrigger`` bytes of records, except that a queue whose next message alone is
  larger than its share still reads that one message.

``minMessagesPerTrigger`` and ``maxTriggerDelay`` are decided by :func:`should_delay`.

Spark's Python API takes one :class:`ReadLimit` per source (no composite limit), so
:meth:`TriggerLimits.default_read_limit` reports the main one and the reader applies the
others itself; a :class:`ReadAllAvailable` from the engine (``Trigger.Once``) lifts them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.spark import Offsets
from rmq_spark.source.trigger_options import DEFAULT_MAX_TRIGGER_DELAY_MS
from rmq_spark.structs import MessageQueue

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import ReadLimit

    from rmq_spark.source.options import SourceOptions


@dataclass(frozen=True)
class TriggerLimits:
    """The limits one ``latestOffset`` call honours; all None means read everything.

    >>> TriggerLimits(max_messages=100).default_read_limit()
    ReadMaxRows(max_rows=100)
    """

    max_messages: int | None = None
    max_bytes: int | None = None
    min_messages: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS

    @classmethod
    def from_options(cls, options: SourceOptions) -> TriggerLimits:
        return cls(
            max_messages=options.max_messages_per_trigger,
            max_bytes=options.max_bytes_per_trigger,
            min_messages=options.min_messages_per_trigger,
            max_trigger_delay_ms=options.max_trigger_delay_ms,
        )

    def default_read_limit(self) -> ReadLimit:
        """The ReadLimit for ``getDefaultReadLimit``: max messages, else max bytes, else min."""
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadMaxBytes,
            ReadMaxRows,
            ReadMinRows,
        )

        if self.max_messages is not None:
            return ReadMaxRows(self.max_messages)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        if self.min_messages is not None:
            return ReadMinRows(self.min_messages)
        return ReadAllAvailable()

    def for_read_limit(self, limit: ReadLimit) -> TriggerLimits:
        """The limits for a ``latestOffset(start, limit)`` call.

        ``ReadAllAvailable`` means the engine wants everything (no maximum, no waiting); a
        ``ReadMaxRows`` / ``ReadMaxBytes`` / ``ReadMinRows`` replaces that one limit and keeps
        the others from the options.
        """
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadMaxBytes,
            ReadMaxRows,
            ReadMinRows,
        )

        if isinstance(limit, ReadAllAvailable):
            return TriggerLimits(max_trigger_delay_ms=self.max_trigger_delay_ms)
        if isinstance(limit, ReadMaxRows):
            return replace(self, max_messages=limit.max_rows)
        if isinstance(limit, ReadMaxBytes):
            return replace(self, max_bytes=limit.max_bytes)
        if isinstance(limit, ReadMinRows):
            return replace(self, min_messages=limit.min_rows)
        raise InvalidArgumentError(
            f"read limit {limit!r} is not supported by the rocketlite source; it understands "
            "ReadAllAvailable, ReadMaxRows, ReadMaxBytes and ReadMinRows"
        )


def backlogs(
    start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int]
) -> dict[MessageQueue, int]:
    """Messages waiting per queue (``latest - start``), only queues with some waiting.

    Every queue of ``latest`` must be in ``start``: where a new queue starts reading is the
    reader's decision, not this arithmetic's.
    """
    unknown = sorted(latest.keys() - start.keys())
    if unknown:
        raise InvalidArgumentError(
            f"latest offsets name queue {unknown[0]} that has no start offset; add newly "
            "discovered queues to the start offsets first"
        )
    return {mq: latest[mq] - start[mq] for mq in sorted(latest) if latest[mq] > start[mq]}


def byte_budgets(range_bytes: Mapping[MessageQueue, int], max_bytes: int) -> Offsets | None:
    """Each queue's share of ``max_bytes`` in proportion to the bytes it has waiting in this
    batch's ranges (measured by the brokers); None when everything fits.

    The shares add up to at most ``max_bytes``; a queue whose share is smaller than its
    next message still reads that one message (the broker's ``budget_end_offset``), so one
    large message cannot stall the stream.

    >>> a, b = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    >>> list(byte_budgets({a: 30_000, b: 10_000}, 20_000).values())
    [15000, 5000]
    """
    total = sum(range_bytes.values())
    if total <= max_bytes:
        return None
    return {mq: max_bytes * size // total for mq, size in sorted(range_bytes.items())}


def share(waiting: Mapping[MessageQueue, int], budget: int, rotation: int = 0) -> Offsets:
    """Messages admitted per queue (queues with backlog only); the rule is in the module doc.

    >>> mqs = [MessageQueue("t", "b", i) for i in range(3)]
    >>> list(share({mqs[0]: 1000, mqs[1]: 1000, mqs[2]: 2}, 100).values())
    [50, 49, 1]
    """
    if budget < 1:
        raise InvalidArgumentError(f"a trigger's message budget must be >= 1, got {budget}")
    queues = sorted(mq for mq, count in waiting.items() if count > 0)
    total = sum(waiting[mq] for mq in queues)
    if budget >= total:
        return {mq: waiting[mq] for mq in queues}
    if budget < len(queues):
        first = rotation % len(queues)
        chosen = {queues[(first + i) % len(queues)] for i in range(budget)}
        return {mq: 1 if mq in chosen else 0 for mq in queues}
    rest = budget - len(queues)
    weight_total = total - len(queues)  # > 0 because budget < total
    taken: Offsets = {}
    remainders: dict[MessageQueue, int] = {}
    for mq in queues:
        whole, remainders[mq] = divmod(rest * (waiting[mq] - 1), weight_total)
        taken[mq] = 1 + whole
    leftover = budget - sum(taken.values())
    # Exact integer remainders compare the fractional parts without rounding error.
    for mq in sorted(queues, key=lambda q: (-remainders[q], q))[:leftover]:
        taken[mq] += 1
    return taken


def limit_offsets(
    start: Mapping[MessageQueue, int],
    latest: Mapping[MessageQueue, int],
    limits: TriggerLimits,
) -> Offsets:
    """End offsets for every queue of ``start`` under ``maxMessagesPerTrigger`` (see the
    module doc); the byte limit is applied to these ends afterwards.

    >>> a, b = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    >>> limit_offsets({a: 0, b: 10}, {a: 90, b: 20}, TriggerLimits(max_messages=50))
    {MessageQueue(topic='t', broker_name='b', queue_id=0): 45, \
MessageQueue(topic='t', broker_name='b', queue_id=1): 15}
    """
    waiting = backlogs(start, latest)
    budget = limits.max_messages
    admitted = waiting if budget is None else share(waiting, budget, sum(start.values()))
    return {mq: start[mq] + admitted.get(mq, 0) for mq in sorted(start)}


def should_delay(
    waiting_total: int,
    limits: TriggerLimits,
    *,
    last_trigger_ms: int | None,
    now_ms: int,
    available_now: bool = False,
) -> bool:
    """True when this trigger should read nothing yet (``latestOffset`` returns ``start``).

    That is when ``minMessagesPerTrigger`` is set, fewer messages than that are waiting (but
    some are), and less than ``maxTriggerDelay`` has passed since the last batch.
    ``last_trigger_ms`` None (the first trigger of this run) never waits, so a restarted
    query catches up at once, as Kafka's source does; ``Trigger.AvailableNow`` never waits,
    since no more data will be admitted. The caller records ``now_ms`` as the last trigger
    time whenever it plans a batch with data.
    """
    if limits.min_messages is None or available_now or last_trigger_ms is None:
        return False
    if waiting_total <= 0 or waiting_total >= limits.min_messages:
        return False
    return now_ms - last_trigger_ms < limits.max_trigger_delay_ms
