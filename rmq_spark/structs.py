"""Small value types shared by every layer."""

from __future__ import annotations

import enum
from typing import NamedTuple


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker. Ordered by (topic, broker_name, queue_id).

    >>> sorted([MessageQueue("t", "broker-b", 0), MessageQueue("t", "broker-a", 1)])[0]
    MessageQueue(topic='t', broker_name='broker-a', queue_id=1)
    """

    topic: str
    broker_name: str
    queue_id: int

    def describe(self) -> str:
        """The queue as error and log messages name it.

        >>> MessageQueue("Orders", "broker-a", 3).describe()
        "topic 'Orders' broker 'broker-a' queue 3"
        """
        return f"topic {self.topic!r} broker {self.broker_name!r} queue {self.queue_id}"


class PullStatus(enum.IntEnum):
    """Outcome of a read at a queue offset (RocketMQ's PullStatus)."""

    FOUND = 0
    NO_NEW_MSG = 1
    NO_MATCHED_MSG = 2
    OFFSET_ILLEGAL = 3


class Permission(enum.IntFlag):
    """Topic / broker permission bits, as in RocketMQ (2 write, 4 read, 6 both)."""

    WRITE = 2
    READ = 4
    READ_WRITE = 6
