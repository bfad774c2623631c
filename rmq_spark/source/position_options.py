"""The ``rocketlite`` source's position options: where a query starts and where a batch ends.

:func:`starting_position` reads ``startingOffsets`` (``earliest``, ``latest``, ``group`` or
JSON offsets), ``startingTimestamp``, ``startingOffsetsByTimestamp`` and ``groupFallback``;
:func:`ending_position` reads ``endingOffsets`` and ``endingTimestamp``. They check that the
options given pick one position and fit the query's mode, and :func:`check_positions` that
the two positions fit each other and the topics read; every problem raises
:class:`~rmq_spark.errors.InvalidArgumentError` naming the option. Turning a position into
offsets, once the brokers' queues are known, is :mod:`rmq_spark.source.positions`' job.

>>> from rmq_spark.spark_options.option_values import RawOptions
>>> starting_position(RawOptions({"startingTimestamp": "5"}, streaming=True), None)
StartingPosition(kind='timestamp', offsets=None, timestamp_ms=5, group_fallback=None)
>>> ending_position(RawOptions({}, streaming=False)).kind
'latest'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.spark import parse_offsets_json, parse_timestamps_json
from rmq_spark.spark_options.option_values import RawOptions, bad
from rmq_spark.structs import MessageQueue

__all__ = [
    "EndKind",
    "EndingPosition",
    "GroupFallback",
    "StartKind",
    "StartingPosition",
    "check_positions",
    "ending_position",
    "starting_position",
]

StartKind = Literal["earliest", "latest", "group", "offsets", "timestamp", "byTimestamp"]
GroupFallback = Literal["earliest", "latest", "timestamp"]
EndKind = Literal["latest", "offsets", "timestamp"]

#: the shape of the JSON offsets these options take
_JSON_SHAPE = "{topic: {brokerName: {queueId: value}}}"


@dataclass(frozen=True)
class StartingPosition:
    """Where a query without a checkpoint starts reading each queue.

    - ``earliest`` / ``latest``: every queue's first / next-to-be-written offset.
    - ``group``: the group's committed offset; queues without one use ``group_fallback``
      (``timestamp`` then uses ``timestamp_ms``), as RocketMQ's ConsumeFromWhere does.
    - ``offsets``: ``offsets`` per queue, where -2 means earliest and -1 latest.
    - ``timestamp``: the first message stored at or after ``timestamp_ms`` in every queue.
    - ``byTimestamp``: ``offsets`` holds that timestamp per queue.

    Queues that ``offsets`` does not name start at earliest, as queues discovered while a
    query runs do, so nothing written to them is skipped.
    """

    kind: StartKind
    offsets: dict[MessageQueue, int] | None = None
    timestamp_ms: int | None = None
    group_fallback: GroupFallback | None = None


@dataclass(frozen=True)
class EndingPosition:
    """Where a batch query stops (exclusive): ``latest`` when the query is planned, per-queue
    ``offsets`` (-1 means latest; queues not named end at latest), or the first message
    stored at or after ``timestamp_ms``."""

    kind: EndKind
    offsets: dict[MessageQueue, int] | None = None
    timestamp_ms: int | None = None


def starting_position(raw: RawOptions, group: str | None) -> StartingPosition:
    """The starting position the options choose; ``group`` is the checked ``group`` option."""
    by_timestamp = raw.get("startingOffsetsByTimestamp")
    timestamp = raw.timestamp_ms("startingTimestamp")
    text = raw.get("startingOffsets")
    keyword = text.strip().lower() if text is not None else None
    if raw.has("groupFallback") and keyword != "group":
        raise InvalidArgumentError(
            "option groupFallback only applies with startingOffsets=group; remove it or set "
            "startingOffsets to group"
        )
    if by_timestamp is not None:
        others = [n for n in ("startingOffsets", "startingTimestamp") if raw.has(n)]
        if others:
            raise InvalidArgumentError(
                f"option startingOffsetsByTimestamp cannot be combined with {others[0]}; "
                "give one way to choose the starting position"
            )
        offsets = parse_timestamps_json(by_timestamp, "startingOffsetsByTimestamp")
        _check_not_empty("startingOffsetsByTimestamp", by_timestamp, offsets)
        return StartingPosition("byTimestamp", offsets=offsets)
    if keyword == "group":
        return _starting_from_group(raw, group, timestamp)
    if timestamp is not None:
        if text is not None:
            raise InvalidArgumentError(
                f"option startingTimestamp cannot be combined with startingOffsets={text!r} "
                "(only with startingOffsets=group, as the fallback for queues the group has "
                "not committed); remove one of them"
            )
        return StartingPosition("timestamp", timestamp_ms=timestamp)
    if keyword is None:
        keyword = _mode_default(raw)
    if keyword in ("earliest", "latest"):
        if keyword == "latest" and not raw.streaming:
            raise bad(
                "startingOffsets",
                text,
                "a batch query cannot start at latest (it would read nothing); use earliest, "
                "group, JSON offsets or startingTimestamp",
            )
        return StartingPosition(keyword)  # type: ignore[arg-type]
    assert text is not None
    if not text.lstrip().startswith("{"):
        raise bad(
            "startingOffsets",
            text,
            f"expected earliest, latest, group or JSON offsets {_JSON_SHAPE} "
            "(-2 = earliest, -1 = latest)",
        )
    offsets = parse_offsets_json(text, "startingOffsets", allow_latest=raw.streaming)
    _check_not_empty("startingOffsets", text, offsets)
    return StartingPosition("offsets", offsets=offsets)


def _starting_from_group(
    raw: RawOptions, group: str | None, timestamp: int | None
) -> StartingPosition:
    if group is None:
        raise InvalidArgumentError(
            "option startingOffsets=group needs the option group (the consumer group whose "
            "committed offsets to start from)"
        )
    text = raw.get("groupFallback")
    if text is None:
        # A timestamp given next to "group" can only mean the fallback.
        fallback = "timestamp" if timestamp is not None else _mode_default(raw)
    else:
        fallback = text.strip().lower()
        if fallback not in ("earliest", "latest", "timestamp"):
            raise bad("groupFallback", text, "expected earliest, latest or timestamp")
    if fallback == "timestamp" and timestamp is None:
        raise InvalidArgumentError(
            "option groupFallback=timestamp needs the option startingTimestamp (epoch ms)"
        )
    if fallback != "timestamp" and timestamp is not None:
        raise InvalidArgumentError(
            f"option startingTimestamp is unused with groupFallback={fallback}; remove it or "
            "set groupFallback=timestamp"
        )
    if fallback == "latest" and not raw.streaming:
        raise bad("groupFallback", text, "a batch query cannot fall back to latest")
    return StartingPosition("group", timestamp_ms=timestamp, group_fallback=fallback)  # type: ignore[arg-type]


def _mode_default(raw: RawOptions) -> str:
    return "latest" if raw.streaming else "earliest"


def ending_position(raw: RawOptions) -> EndingPosition:
    """The end of a batch query the options choose (``latest`` when none is given)."""
    text = raw.get("endingOffsets")
    timestamp = raw.timestamp_ms("endingTimestamp")
    if timestamp is not None:
        if text is not None:
            raise InvalidArgumentError(
                "options endingOffsets and endingTimestamp cannot be combined; give one"
            )
        return EndingPosition("timestamp", timestamp_ms=timestamp)
    if text is None or text.strip().lower() == "latest":
        return EndingPosition("latest")
    if not text.lstrip().startswith("{"):
        raise bad("endingOffsets", text, f"expected latest or JSON offsets {_JSON_SHAPE}")
    offsets = parse_offsets_json(text, "endingOffsets", allow_earliest=False)
    _check_not_empty("endingOffsets", text, offsets)
    return EndingPosition("offsets", offsets=offsets)


def check_positions(
    starting: StartingPosition,
    ending: EndingPosition | None,
    subscribes: Callable[[str], bool],
    target: str,
) -> None:
    """Raise when JSON offsets name a topic the source does not read (``subscribes``; its
    options say ``target``), or the start lies after the end."""
    _check_json_topics(starting, ending, subscribes, target)
    _check_start_before_end(starting, ending)


def _check_json_topics(
    starting: StartingPosition,
    ending: EndingPosition | None,
    subscribes: Callable[[str], bool],
    target: str,
) -> None:
    start_name = (
        "startingOffsetsByTimestamp" if starting.kind == "byTimestamp" else "startingOffsets"
    )
    named = [
        (start_name, starting.offsets),
        ("endingOffsets", ending and ending.offsets),
    ]
    for name, offsets in named:
        for mq in sorted(offsets or {}):
            if not subscribes(mq.topic):
                raise InvalidArgumentError(
                    f"option {name} names topic {mq.topic!r}, which this source does not "
                    f"read ({target}); remove it or subscribe to it"
                )


def _check_start_before_end(start: StartingPosition, end: EndingPosition | None) -> None:
    if end is None:
        return
    if start.kind == "timestamp" and end.kind == "timestamp":
        assert start.timestamp_ms is not None and end.timestamp_ms is not None
        if start.timestamp_ms > end.timestamp_ms:
            raise InvalidArgumentError(
                f"option startingTimestamp={start.timestamp_ms} is after "
                f"endingTimestamp={end.timestamp_ms}"
            )
    if start.kind == "offsets" and end.kind == "offsets":
        assert start.offsets is not None and end.offsets is not None
        for mq in sorted(start.offsets.keys() & end.offsets.keys()):
            first, last = start.offsets[mq], end.offsets[mq]
            if first >= 0 and last >= 0 and first > last:
                raise InvalidArgumentError(
                    f"option startingOffsets starts topic {mq.topic!r} broker "
                    f"{mq.broker_name!r} queue {mq.queue_id} at {first}, after its "
                    f"endingOffsets {last}"
                )


def _check_not_empty(name: str, text: str, offsets: dict[MessageQueue, int]) -> None:
    if not offsets:
        raise bad(name, text, f"names no queue; expected {_JSON_SHAPE}")
