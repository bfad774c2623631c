"""MACHINE_ROOM: consumers read only the queues of brokers in the rooms (IDCs) they serve.

Brokers are named ``"<room><separator><broker>"``, e.g. ``"room1@broker-a"``.
"""

from __future__ import annotations

from collections.abc import Iterable

from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

DEFAULT_SEPARATOR = "@"


class AllocateMessageQueueByMachineRoom(AllocateMessageQueueStrategy):
    """Split the queues of the served rooms among all consumers, as RocketMQ's
    AllocateMessageQueueByMachineRoom does.

    A queue's room is the part of its broker name before the first ``separator``; a broker
    name without the separator, or with nothing before it, has no room and is never
    allocated. The ``k`` sorted queues in ``consumer_idcs`` rooms are split among the ``n``
    sorted consumer ids: consumer ``i`` takes the contiguous block
    ``[i * (k // n), (i + 1) * (k // n))``, and if ``i < k % n`` also the leftover queue at
    ``(k // n) * n + i`` (the tail is dealt round robin, AVG_BY_CIRCLE style). Every member
    must serve the same rooms, or queues are missed or doubly owned.

    ``consumer_idcs`` is any iterable of room names; a single string is read as a
    comma-separated list (``"room1,room2"``), the form a CLI flag or Spark option takes.

    >>> mqs = [MessageQueue("t", "room1@broker-a", 0), MessageQueue("t", "room2@broker-b", 0)]
    >>> AllocateMessageQueueByMachineRoom({"room1"}).allocate("g", "c1", mqs, ["c1"])
    [MessageQueue(topic='t', broker_name='room1@broker-a', queue_id=0)]
    """

    name = "machineRoom"
    aliases = ("MACHINE_ROOM", "AllocateMessageQueueByMachineRoom")

    def __init__(
        self, consumer_idcs: Iterable[str] | str, separator: str = DEFAULT_SEPARATOR
    ) -> None:
        if isinstance(consumer_idcs, str):
            consumer_idcs = [room.strip() for room in consumer_idcs.split(",")]
        rooms = frozenset(consumer_idcs)
        bad = sorted(repr(room) for room in rooms if not isinstance(room, str) or not room)
        if not rooms or bad:
            raise InvalidArgumentError(
                f"consumer_idcs must be non-empty room names, got {sorted(map(repr, rooms))}; "
                "name the machine rooms this consumer serves, e.g. {'room1'}"
            )
        if not isinstance(separator, str) or not separator:
            raise InvalidArgumentError(
                f"separator must be a non-empty string, got {separator!r}; "
                f"the default is {DEFAULT_SEPARATOR!r}"
            )
        self.consumer_idcs = rooms
        self.separator = separator

    def room_of(self, mq: MessageQueue) -> str | None:
        """The machine room of ``mq``'s broker, or None if its name carries none."""
        room, found, _ = mq.broker_name.partition(self.separator)
        return room if found and room else None

    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        served = [mq for mq in mq_all if self.room_of(mq) in self.consumer_idcs]
        n = len(cid_all)
        index = cid_all.index(current_cid)
        block, leftover = divmod(len(served), n)
        result = served[index * block : (index + 1) * block]
        if index < leftover:
            result.append(served[block * n + index])
        return result

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(consumer_idcs={sorted(self.consumer_idcs)!r}, "
            f"separator={self.separator!r})"
        )
