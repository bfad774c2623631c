"""What a push consumer's listener receives and answers (RocketMQ's MessageListener types).

A concurrent listener is ``fn(messages, context) -> ConsumeStatus``; an orderly one is
``fn(messages, context) -> OrderlyStatus``. ``messages`` holds at most
``consume_message_batch_max_size`` messages of one queue, in queue order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

if TYPE_CHECKING:
    from rmq_spark.client.push.message import ReceivedMessage

__all__ = [
    "ConcurrentListener",
    "ConsumeContext",
    "ConsumeStatus",
    "OrderlyContext",
    "OrderlyListener",
    "OrderlyStatus",
]


class ConsumeStatus(enum.Enum):
    """A concurrent listener's answer (RocketMQ's ConsumeConcurrentlyStatus)."""

    #: every message up to ``context.ack_index`` (all when unset) is done
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    #: the messages after ``context.ack_index`` (all when unset) failed: retry them later
    RECONSUME_LATER = "RECONSUME_LATER"


class OrderlyStatus(enum.Enum):
    """An orderly listener's answer (RocketMQ's ConsumeOrderlyStatus)."""

    #: the messages are done; the queue moves on
    SUCCESS = "SUCCESS"
    #: retry the same messages after a pause; the queue waits meanwhile
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(init=False)
class ConsumeContext:
    """Passed to a concurrent listener with each batch; the listener may set its fields.

    ``ack_index``: index of the last message in the batch that succeeded. Unset (None)
    means all of them on CONSUME_SUCCESS and none on RECONSUME_LATER. On RECONSUME_LATER
    only the messages after ``ack_index`` are retried, unless the consumer was configured
    with ``retry_whole_batch_on_failure=True`` (RocketMQ's behaviour: the whole batch).

    ``delay_level_when_next_consume``: 0 lets the broker pick ``3 + reconsumeTimes``;
    1..18 asks for that delay level for the retried messages.
    """

    message_queue: MessageQueue
    ack_index: int | None = None
    delay_level_when_next_consume: int = 0

    def __init__(
        self,
        message_queue: MessageQueue,
        ack_index: int | None = None,
        delay_level_when_next_consume: int = 0,
    ) -> None:
        # made once per listener call: a field left at its default reads the class
        # attribute (None, 0); only values given go through the checks of __setattr__
        self.__dict__["message_queue"] = message_queue
        if ack_index is not None:
            self.ack_index = ack_index
        delay = delay_level_when_next_consume
        if type(delay) is not int or delay != 0:
            self.delay_level_when_next_consume = delay

    def __setattr__(self, name: str, value: object) -> None:
        bad_int = not isinstance(value, int) or isinstance(value, bool)
        if name == "ack_index" and value is not None and (bad_int or value < -1):  # type: ignore[operator]
            raise InvalidArgumentError(
                f"ack_index={value!r} must be -1 (none succeeded) or the index of the last "
                "message that succeeded"
            )
        if name == "delay_level_when_next_consume" and (bad_int or not 0 <= value <= 18):  # type: ignore[operator]
            raise InvalidArgumentError(
                f"delay_level_when_next_consume={value!r} must be 0 (broker's choice) or a "
                "delay level 1..18"
            )
        super().__setattr__(name, value)


@dataclass
class OrderlyContext:
    """Passed to an orderly listener; ``suspend_current_queue_time_ms`` is the pause before
    a SUSPEND_CURRENT_QUEUE_A_MOMENT retry (the consumer's setting unless changed here)."""

    message_queue: MessageQueue
    suspend_current_queue_time_ms: int = 1_000


ConcurrentListener = Callable[[Sequence["ReceivedMessage"], ConsumeContext], ConsumeStatus]
OrderlyListener = Callable[[Sequence["ReceivedMessage"], OrderlyContext], OrderlyStatus]
