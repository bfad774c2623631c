"""The ``rocketlite`` source's partitioning options: how a batch's queue ranges become Spark
partitions.

``allocateStrategy`` with ``numPartitions`` groups whole queues with one of RocketMQ's
allocation strategies; ``minPartitions`` and ``maxMessagesPerPartition`` split queue ranges;
``minMessagesPerPartition`` groups whole queues until a partition holds that many messages.
Each is parsed here with errors naming it, and :func:`check_partition_options` refuses the
combinations that contradict each other; planning the partitions is
:mod:`rmq_spark.source.planning`' job.

>>> from rmq_spark.spark_options.option_values import RawOptions
>>> raw = RawOptions({"allocateStrategy": "avg_by_circle", "numPartitions": "4"}, streaming=True)
>>> fields = partition_options(raw)
>>> fields["allocate_strategy"], fields["num_partitions"]
('avgByCircle', 4)
"""

from __future__ import annotations

from typing import TypedDict

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import MAX_OFFSET
from rmq_spark.spark_options.option_values import RawOptions, bad

__all__ = [
    "MAX_PARTITIONS",
    "PARTITIONING_STRATEGIES",
    "PartitionFields",
    "check_partition_options",
    "partition_options",
]

#: More Spark tasks than this per batch only adds scheduling overhead (and planning time).
MAX_PARTITIONS = 10_000
#: Strategies that split the queues among the partitions, each queue exactly once.
#: machineRoom and config pick queues by room or by a fixed list, which would leave
#: queues unread (their offsets still advance) or read twice.
PARTITIONING_STRATEGIES = ("avg", "avgByCircle", "consistentHash")


class PartitionFields(TypedDict):
    """The partitioning fields of :class:`~rmq_spark.source.options.SourceOptions`."""

    allocate_strategy: str | None
    num_partitions: int | None
    min_partitions: int | None
    max_messages_per_partition: int | None
    #: group whole queues until a partition holds this many messages (small batches: one task)
    min_messages_per_partition: int | None


def partition_options(raw: RawOptions) -> PartitionFields:
    """Each partitioning option parsed on its own (see :func:`check_partition_options`)."""
    return {
        "allocate_strategy": _allocate_strategy(raw),
        "num_partitions": raw.count("numPartitions", MAX_PARTITIONS),
        "min_partitions": raw.count("minPartitions", MAX_PARTITIONS),
        "max_messages_per_partition": raw.count("maxMessagesPerPartition", MAX_OFFSET),
        "min_messages_per_partition": raw.count("minMessagesPerPartition", MAX_OFFSET),
    }


def check_partition_options(fields: PartitionFields) -> None:
    """Raise when the partitioning options contradict each other, naming both."""
    strategy, num_partitions = fields["allocate_strategy"], fields["num_partitions"]
    if (strategy is None) != (num_partitions is None):
        given, missing = (
            ("allocateStrategy", "numPartitions")
            if num_partitions is None
            else ("numPartitions", "allocateStrategy")
        )
        raise InvalidArgumentError(
            f"option {given} needs the option {missing}: allocateStrategy groups the queues "
            "into numPartitions Spark partitions"
        )
    splitting = [
        name
        for name, value in (
            ("minPartitions", fields["min_partitions"]),
            ("maxMessagesPerPartition", fields["max_messages_per_partition"]),
        )
        if value is not None
    ]
    if strategy is not None and splitting:
        raise InvalidArgumentError(
            f"option {splitting[0]} splits queue ranges, allocateStrategy groups whole queues; "
            "use one or the other"
        )
    if fields["min_messages_per_partition"] is not None:
        if strategy is not None:
            raise InvalidArgumentError(
                "option minMessagesPerPartition groups queues by their message counts, "
                "allocateStrategy by a RocketMQ strategy; use one or the other"
            )
        if splitting:
            raise InvalidArgumentError(
                f"option {splitting[0]} splits queue ranges, minMessagesPerPartition groups "
                "whole queues; use one or the other"
            )


def _allocate_strategy(raw: RawOptions) -> str | None:
    text = raw.get("allocateStrategy")
    if text is None:
        return None
    key = text.strip().replace("_", "").replace("-", "").lower()
    for name in PARTITIONING_STRATEGIES:
        if key == name.lower():
            return name
    expected = f"expected one of {', '.join(PARTITIONING_STRATEGIES)}"
    if key in ("machineroom", "config"):
        expected += (
            f" ({text.strip()} assigns queues by machine room or a fixed list, which would "
            "leave some queues unread or read twice by a Spark batch)"
        )
    raise bad("allocateStrategy", text, expected)
