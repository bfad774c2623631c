"""The ``rocketlite`` source's trigger options: how much one micro-batch of a stream reads.

``maxMessagesPerTrigger`` and ``maxBytesPerTrigger`` cap a trigger; ``minMessagesPerTrigger``
holds a trigger back until that many messages wait, at most ``maxTriggerDelay``. Each is
parsed here with errors naming it, and :func:`check_trigger_options` checks them against each
other; applying them to a trigger is :mod:`rmq_spark.source.limits`' job.

>>> from rmq_spark.spark_options.option_values import RawOptions
>>> fields = trigger_options(RawOptions({"maxMessagesPerTrigger": "1000"}, streaming=True))
>>> fields["max_messages_per_trigger"], fields["max_trigger_delay_ms"]
(1000, 900000)
"""

from __future__ import annotations

from typing import TypedDict

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import MAX_OFFSET
from rmq_spark.spark_options.option_values import RawOptions

__all__ = [
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
    "TriggerFields",
    "check_trigger_options",
    "trigger_options",
]

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000


class TriggerFields(TypedDict):
    """The trigger fields of :class:`~rmq_spark.source.options.SourceOptions`."""

    max_messages_per_trigger: int | None
    max_bytes_per_trigger: int | None
    min_messages_per_trigger: int | None
    max_trigger_delay_ms: int


def trigger_options(raw: RawOptions) -> TriggerFields:
    """Each trigger option parsed on its own (see :func:`check_trigger_options`)."""
    return {
        "max_messages_per_trigger": raw.count("maxMessagesPerTrigger", MAX_OFFSET),
        "max_bytes_per_trigger": raw.size_bytes("maxBytesPerTrigger"),
        "min_messages_per_trigger": raw.count("minMessagesPerTrigger", MAX_OFFSET),
        "max_trigger_delay_ms": raw.duration_ms("maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
    }


def check_trigger_options(raw: RawOptions, fields: TriggerFields) -> None:
    """Raise when the trigger options contradict each other: a minimum above the maximum,
    a ``maxTriggerDelay`` without the minimum it bounds the wait for."""
    low, high = fields["min_messages_per_trigger"], fields["max_messages_per_trigger"]
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
