"""CONFIG: a consumer owns a fixed list of queues chosen by the operator."""

from __future__ import annotations

from collections.abc import Iterable

from rmq_spark.allocate.base import AllocateMessageQueueStrategy, sorted_queues
from rmq_spark.structs import MessageQueue


class AllocateMessageQueueByConfig(AllocateMessageQueueStrategy):
    """Returns the queues given at construction (sorted) for any valid input.

    The queues are not filtered by ``mq_all``: the operator decided, so a configured queue
    missing from the route is still returned (reading it then fails loudly, which is the
    point). Unlike RocketMQ's AllocateMessageQueueByConfig, a consumer id that is not in
    ``cid_all`` still gets ``[]`` like every other strategy, because it is not a member yet.

    >>> mine = [MessageQueue("t", "broker-a", 1)]
    >>> AllocateMessageQueueByConfig(mine).allocate(
    ...     "g", "c1", [MessageQueue("t", "broker-a", 0)], ["c1", "c2"]) == mine
    True
    """

    name = "config"
    aliases = ("CONFIG", "byConfig", "AllocateMessageQueueByConfig")

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = sorted_queues(message_queues, "message_queues")

    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        return list(self.message_queues)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.message_queues)!r})"
