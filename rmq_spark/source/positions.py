"""Where reading starts and ends: the options plus what the brokers hold give offsets. Pure.

- :func:`starting_offsets` fixes a query's first offsets (``startingOffsets`` and friends);
  with ``group`` the committed offset always wins and only queues without one use the
  fallback, exactly as RocketMQ's ConsumeFromWhere.
- :func:`ending_offsets` fixes a batch query's exclusive ends (``latest`` resolved once).
- :func:`reconcile` compares a running stream's next offsets with the brokers' ranges at a
  trigger: new queues join at offset 0, and the four kinds of data loss are found (a
  start below the queue's min after retention, a vanished queue, a queue that now ends
  before the next offset, a queue that now ends below where it ended before). The
  effective offsets it returns already skip to the min, as ``failOnDataLoss=false`` asks;
  with ``true`` the caller fails on ``losses`` instead.

Offsets are ``dict[MessageQueue, int]``; a queue's range is a
:class:`~rmq_spark.client.offsets.QueueOffsets` (min, max exclusive).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rmq_spark.client.offsets import QueueOffsets
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.offsets.spark import EARLIEST, LATEST, DataLoss, Offsets
from rmq_spark.source.planning import Ranges
from rmq_spark.source.position_options import EndingPosition, StartingPosition
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.source")

__all__ = [
    "Reconciled",
    "batch_ranges",
    "ending_offsets",
    "ranges_from",
    "reconcile",
    "starting_offsets",
    "timestamps_needed",
]

Queues = Mapping[MessageQueue, QueueOffsets]


def timestamps_needed(
    position: StartingPosition,
    queues: Iterable[MessageQueue],
    committed: Mapping[MessageQueue, int] | None = None,
) -> dict[MessageQueue, int]:
    """The queues whose start must be searched by time, with the timestamp of each."""
    if position.kind == "timestamp" or (
        position.kind == "group" and position.group_fallback == "timestamp"
    ):
        assert position.timestamp_ms is not None
        skip = committed or {}
        return {mq: position.timestamp_ms for mq in queues if mq not in skip}
    if position.kind == "byTimestamp":
        assert position.offsets is not None
        present = set(queues)
        return {mq: ts for mq, ts in position.offsets.items() if mq in present}
    return {}


def starting_offsets(
    position: StartingPosition,
    queues: Queues,
    *,
    committed: Mapping[MessageQueue, int] | None = None,
    at_time: Mapping[MessageQueue, int] | None = None,
) -> Offsets:
    """The first offset of every queue of ``queues``.

    ``committed`` holds the group's committed offsets (kind ``group``), ``at_time`` the
    result of searching :func:`timestamps_needed` by time. Queues named by JSON offsets must
    exist; a named offset past the queue's end is refused. A start below the queue's min is
    kept: whether that is data loss is for the reader to say.

    >>> mq = MessageQueue("t", "b", 0)
    >>> starting_offsets(StartingPosition("latest"), {mq: QueueOffsets(3, 9)})
    {MessageQueue(topic='t', broker_name='b', queue_id=0): 9}
    """
    at_time = at_time or {}
    kind = position.kind
    if kind in ("earliest", "latest"):
        return {mq: _edge(queues[mq], kind) for mq in sorted(queues)}
    if kind == "timestamp":
        return {mq: _found_at_time(mq, at_time) for mq in sorted(queues)}
    if kind == "group":
        return _from_group(position, queues, committed or {}, at_time)
    assert position.offsets is not None
    name = "startingOffsetsByTimestamp" if kind == "byTimestamp" else "startingOffsets"
    _check_named(name, position.offsets, queues)
    result = {mq: queues[mq].min_offset for mq in sorted(queues)}
    for mq, value in position.offsets.items():
        if kind == "byTimestamp":
            result[mq] = _found_at_time(mq, at_time)
        elif value in (EARLIEST, LATEST):
            result[mq] = _edge(queues[mq], "earliest" if value == EARLIEST else "latest")
        elif value > queues[mq].max_offset:
            raise InvalidArgumentError(
                f"option startingOffsets starts {mq.describe()} at {value}, past its end "
                f"{queues[mq].max_offset} (readable {_range(queues[mq])}); use an offset in "
                "that range, or -1 for latest"
            )
        else:
            result[mq] = value
    return dict(sorted(result.items()))


def ending_offsets(
    position: EndingPosition, queues: Queues, at_time: Mapping[MessageQueue, int] | None = None
) -> Offsets:
    """A batch query's exclusive end for every queue of ``queues``."""
    if position.kind == "latest":
        return {mq: queues[mq].max_offset for mq in sorted(queues)}
    if position.kind == "timestamp":
        return {mq: _found_at_time(mq, at_time or {}) for mq in sorted(queues)}
    assert position.offsets is not None
    _check_named("endingOffsets", position.offsets, queues)
    result = {mq: queues[mq].max_offset for mq in sorted(queues)}
    for mq, value in position.offsets.items():
        if value == LATEST:
            continue
        if value > queues[mq].max_offset:
            raise InvalidArgumentError(
                f"option endingOffsets ends {mq.describe()} at {value}, past its end "
                f"{queues[mq].max_offset}: those messages do not exist yet; use at most "
                f"{queues[mq].max_offset}, or -1 for latest"
            )
        result[mq] = value
    return result


def batch_ranges(
    start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int], queues: Queues
) -> tuple[dict[MessageQueue, tuple[int, int]], list[DataLoss]]:
    """``[start, end)`` per queue for a batch query, and the queues whose start was deleted.

    A start below the queue's min is moved up to it (the loss is returned); a start at or
    past the end gives an empty range.
    """
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    losses: list[DataLoss] = []
    for mq in sorted(end):
        first = start[mq]
        low = queues[mq].min_offset
        if first < low and end[mq] > first:
            losses.append(DataLoss(mq, "deleted", first, low))
            first = low
        last = max(end[mq], first)
        ranges[mq] = (first, last)
    return ranges, losses


@dataclass(frozen=True)
class Reconciled:
    """A trigger's view of a running stream, see :func:`reconcile`."""

    #: the next offset of every queue the stream reads from now on (losses skipped)
    start: Offsets
    #: how far each of those queues can be read now (``start`` for silent brokers)
    latest: Offsets
    losses: list[DataLoss]
    #: queues of brokers that did not answer; kept at their offset
    silent: list[MessageQueue]


def reconcile(
    start: Mapping[MessageQueue, int],
    queues: Queues,
    answered: Callable[[str], bool],
    seen_max: Mapping[MessageQueue, int] | None = None,
    from_slave: Callable[[str], bool] | None = None,
) -> Reconciled:
    """Compare the stream's next offsets with the brokers' queue ranges.

    ``answered(broker_name)`` says whether that broker answered this time: the queues of a
    broker that did not are neither vanished nor readable, and keep their offset.
    ``seen_max`` holds the highest end each queue had before (earlier triggers, or the
    offsets a Trigger.AvailableNow query set out to reach): a queue that now ends below it
    went backwards (re-created) and is read again from its first message.
    ``from_slave(broker_name)`` says that a slave answered for that broker group: a slave
    may be behind its master, so a queue that ends below the next offset, or below where
    it ended before, is not lost there; it is silent (kept at its offset) until a replica
    holds more.

    >>> a, b = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    >>> r = reconcile({a: 2}, {a: QueueOffsets(5, 9), b: QueueOffsets(0, 4)}, lambda _: True)
    >>> r.start == {a: 5, b: 0}, r.latest == {a: 9, b: 4}, [loss.kind for loss in r.losses]
    (True, True, ['deleted'])
    """
    effective: Offsets = {}
    latest: Offsets = {}
    losses: list[DataLoss] = []
    silent: list[MessageQueue] = []
    for mq in sorted(start.keys() | queues.keys()):
        expected = start.get(mq, 0)  # a new queue is read from its first message
        if mq not in queues:
            if answered(mq.broker_name):
                losses.append(DataLoss(mq, "vanished", expected))
            else:
                silent.append(mq)
                effective[mq] = latest[mq] = expected
            continue
        low, high = queues[mq].min_offset, queues[mq].max_offset
        before = (seen_max or {}).get(mq)
        if from_slave is not None and from_slave(mq.broker_name):
            if expected > high:  # the slave has not got that far yet
                silent.append(mq)
                effective[mq] = latest[mq] = expected
                continue
            before = None  # ending below the master's end is no sign of a new queue
        if before is not None and high < before:
            losses.append(DataLoss(mq, "shrunk", before, high))
            expected = low
        elif expected > high:
            losses.append(DataLoss(mq, "reset", expected, high))
            expected = low
        elif expected < low:
            losses.append(DataLoss(mq, "deleted", expected, low))
            expected = low
        effective[mq] = expected
        latest[mq] = high
    return Reconciled(effective, latest, losses, silent)


def ranges_from(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> Ranges:
    """A micro-batch's ``[start, end)`` for every queue of ``end``.

    A queue missing from ``start`` (discovered at this trigger) or ending below its start
    (a reset queue skipped to its min) is read from 0: the pull moves past anything deleted,
    as the trigger that made ``end`` decided.
    """
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    for mq in sorted(end):
        first = start.get(mq, 0)
        if first > end[mq]:
            first = 0
        ranges[mq] = (first, end[mq])
    return ranges


def _from_group(
    position: StartingPosition,
    queues: Queues,
    committed: Mapping[MessageQueue, int],
    at_time: Mapping[MessageQueue, int],
) -> Offsets:
    result: Offsets = {}
    for mq in sorted(queues):
        offset = committed.get(mq)
        if offset is None:
            fallback = position.group_fallback or "latest"
            if fallback == "timestamp":
                result[mq] = _found_at_time(mq, at_time)
            else:
                result[mq] = _edge(queues[mq], fallback)
        elif offset > queues[mq].max_offset:
            # Past the end (a recreated queue, or a stale group): start at the end rather
            # than wait for messages that may never come. (A push consumer's pull there
            # answers OFFSET_ILLEGAL and starts over from the min when nothing was
            # deleted; this source reads what the checkpoint says, not from 0.)
            log.warning(
                "group offset %d of %s is past the queue's end %d; starting at the end",
                offset,
                mq.describe(),
                queues[mq].max_offset,
            )
            result[mq] = queues[mq].max_offset
        else:
            result[mq] = offset
    return result


def _edge(queue: QueueOffsets, kind: str) -> int:
    return queue.min_offset if kind == "earliest" else queue.max_offset


def _found_at_time(mq: MessageQueue, at_time: Mapping[MessageQueue, int]) -> int:
    if mq not in at_time:
        raise AssertionError(f"no search-by-time result for {mq}; a caller bug")
    return at_time[mq]


def _check_named(name: str, named: Mapping[MessageQueue, int], queues: Queues) -> None:
    missing = sorted(mq for mq in named if mq not in queues)
    if missing:
        mq = missing[0]
        known = sorted(q.queue_id for q in queues if q[:2] == mq[:2])
        where = (
            f"queues {known[0]}..{known[-1]} exist there"
            if known
            else f"the topic has no readable queues on broker {mq.broker_name!r}"
        )
        raise NotFoundError(f"option {name} names {mq.describe()}, which does not exist ({where})")


def _range(queue: QueueOffsets) -> str:
    return f"{queue.min_offset}..{queue.max_offset - 1}"
