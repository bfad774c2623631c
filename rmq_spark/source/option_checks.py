"""Checks across the ``rocketlite`` source's options, once each has parsed on its own.

Options that contradict each other (an allocation strategy with range splitting, a minimum
above a maximum, JSON offsets for a topic the source does not read, a start after the end)
raise :class:`~rmq_spark.errors.InvalidArgumentError` naming both options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.spark_options.option_values import RawOptions

if TYPE_CHECKING:
    from rmq_spark.source.options import SourceOptions

__all__ = ["check_combinations"]


def check_combinations(raw: RawOptions, opts: SourceOptions) -> None:
    _check_trigger_limits(raw, opts)
    _check_partitioning(opts)
    _check_json_topics(opts)
    _check_start_before_end(opts)


def _check_trigger_limits(raw: RawOptions, opts: SourceOptions) -> None:
    low, high = opts.min_messages_per_trigger, opts.max_messages_per_trigger
    if low is not None and high is not None and low > high:
        raise InvalidArgumentError(
            f"option minMessagesPerTrigger={low} is above maxMessagesPerTrigger={high}; "
            "the minimum must not exceed the maximum"
        )
    if raw.has("maxTriggerDelay") and low is None:
        raise InvalidArgumentError(
            "option maxTriggerDelay only applies with minMessagesPerTrigger (it bounds how "
            "long a trigger waits for that many messages); remove it or set both"
        )


def _check_partitioning(opts: SourceOptions) -> None:
    if (opts.allocate_strategy is None) != (opts.num_partitions is None):
        given, missing = (
            ("allocateStrategy", "numPartitions")
            if opts.num_partitions is None
            else ("numPartitions", "allocateStrategy")
        )
        raise InvalidArgumentError(
            f"option {given} needs the option {missing}: allocateStrategy groups the queues "
            "into numPartitions Spark partitions"
        )
    splitting = [
        name
        for name, value in (
            ("minPartitions", opts.min_partitions),
            ("maxMessagesPerPartition", opts.max_messages_per_partition),
        )
        if value is not None
    ]
    if opts.allocate_strategy is not None and splitting:
        raise InvalidArgumentError(
            f"option {splitting[0]} splits queue ranges, allocateStrategy groups whole queues; "
            "use one or the other"
        )
    if opts.min_messages_per_partition is not None:
        if opts.allocate_strategy is not None:
            raise InvalidArgumentError(
                "option minMessagesPerPartition groups queues by their message counts, "
                "allocateStrategy by a RocketMQ strategy; use one or the other"
            )
        if splitting:
            raise InvalidArgumentError(
                f"option {splitting[0]} splits queue ranges, minMessagesPerPartition groups "
                "whole queues; use one or the other"
            )


def _check_json_topics(opts: SourceOptions) -> None:
    start_name = (
        "startingOffsetsByTimestamp" if opts.starting.kind == "byTimestamp" else "startingOffsets"
    )
    named = [
        (start_name, opts.starting.offsets),
        ("endingOffsets", opts.ending and opts.ending.offsets),
    ]
    for name, offsets in named:
        for mq in sorted(offsets or {}):
            if not opts.subscribes(mq.topic):
                raise InvalidArgumentError(
                    f"option {name} names topic {mq.topic!r}, which this source does not "
                    f"read ({_target(opts)}); remove it or subscribe to it"
                )


def _check_start_before_end(opts: SourceOptions) -> None:
    start, end = opts.starting, opts.ending
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


def _target(opts: SourceOptions) -> str:
    if opts.topic_pattern is not None:
        return f"topicPattern={opts.topic_pattern!r}"
    return f"topics {', '.join(opts.topics)}"
