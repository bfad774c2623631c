"""CONSISTENT_HASH: queues go to the consumer whose ring node follows them clockwise.

When a consumer joins or leaves, only the queues next to its ring nodes change owner (about
``1/n`` of them), instead of almost every queue as with AVG; the price is less even counts.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable

from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

HashFunction = Callable[[str], int]

DEFAULT_VIRTUAL_NODES = 10


def md5_64(key: str) -> int:
    """The first 8 bytes of MD5 over the UTF-8 key, as an unsigned big-endian integer.

    Stable across processes and platforms, unlike Python's salted ``hash()``.

    >>> md5_64("c1-0") == md5_64("c1-0") and 0 <= md5_64("c1-0") < 2**64
    True
    """
    digest = hashlib.md5(key.encode("utf-8", "surrogatepass"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def queue_key(mq: MessageQueue) -> str:
    """The string a queue is hashed by; the same text as Java's ``MessageQueue.toString()``.

    >>> queue_key(MessageQueue("t", "broker-a", 3))
    'MessageQueue [topic=t, brokerName=broker-a, queueId=3]'
    """
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateMessageQueueConsistentHash(AllocateMessageQueueStrategy):
    """A hash ring with ``virtual_nodes`` nodes per consumer; a queue belongs to the first
    node at or after ``hash_fn(queue_key(mq))``, wrapping past the top of the ring.

    Consumer ``cid``'s nodes sit at ``hash_fn(f"{cid}-{i}")`` for ``i`` in
    ``range(virtual_nodes)``. Nodes at equal positions are ordered by consumer id, so the
    result is deterministic even for a hash function with collisions. Every member of a
    group must use the same ``virtual_nodes`` and ``hash_fn``.

    >>> mqs = [MessageQueue("t", "broker-a", i) for i in range(4)]
    >>> AllocateMessageQueueConsistentHash().allocate("g", "c1", mqs, ["c1"]) == mqs
    True
    """

    name = "consistentHash"
    aliases = ("CONSISTENT_HASH", "AllocateMessageQueueConsistentHash")

    def __init__(
        self, virtual_nodes: int = DEFAULT_VIRTUAL_NODES, hash_fn: HashFunction = md5_64
    ) -> None:
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise InvalidArgumentError(
                f"virtual_nodes must be an int, got {virtual_nodes!r}; the default is "
                f"{DEFAULT_VIRTUAL_NODES}"
            )
        if virtual_nodes < 1:
            raise InvalidArgumentError(
                f"virtual_nodes is {virtual_nodes}; it must be at least 1 "
                f"(the default is {DEFAULT_VIRTUAL_NODES})"
            )
        if not callable(hash_fn):
            raise InvalidArgumentError(f"hash_fn must be a callable str -> int, got {hash_fn!r}")
        self.virtual_nodes = virtual_nodes
        self.hash_fn = hash_fn

    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        positions, owners = self._ring(cid_all)
        result = []
        for mq in mq_all:
            at = bisect_left(positions, self._hash(queue_key(mq)))
            if owners[at % len(owners)] == current_cid:
                result.append(mq)
        return result

    def _ring(self, cid_all: tuple[str, ...]) -> tuple[list[int], list[str]]:
        nodes = sorted(
            (self._hash(f"{cid}-{i}"), cid) for cid in cid_all for i in range(self.virtual_nodes)
        )
        return [position for position, _ in nodes], [cid for _, cid in nodes]

    def _hash(self, key: str) -> int:
        value = self.hash_fn(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(
                f"hash_fn {self.hash_fn!r} returned {value!r} for {key!r}; it must return an int"
            )
        return value

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(virtual_nodes={self.virtual_nodes}, "
            f"hash_fn={getattr(self.hash_fn, '__name__', self.hash_fn)!r})"
        )
