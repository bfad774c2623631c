"""How a producer picks the queue of a send (pure; no network).

Queues are the writable queues of the merged route, sorted by (topic, broker_name,
queue_id), so every producer sees the same list in the same order.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Collection, Sequence

from rmq_spark.codec.java_hash import queue_by_hash
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

__all__ = ["RoundRobinSelector", "select_by_sharding_key"]


def select_by_sharding_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: the queue :func:`queue_by_hash` picks.

    Stable while the set of writable queues does not change.

    >>> qs = [MessageQueue("T", "b", i) for i in range(4)]
    >>> select_by_sharding_key(qs, "order-42") == select_by_sharding_key(qs, "order-42")
    True
    """
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"sharding key {key!r} must be a non-empty string")
    if not queues:
        raise InvalidArgumentError("no writable queue to pick from")
    return queues[queue_by_hash(key, len(queues))]


class RoundRobinSelector:
    """Round robin over a topic's queues, one counter per topic (RocketMQ's sendWhichQueue).

    Counters start at a random place so many producers do not all begin with queue 0.
    ``avoid`` names brokers to skip (they just failed); when every queue is on an avoided
    broker the next queue is used anyway.

    >>> rr = RoundRobinSelector(start=0)
    >>> qs = [MessageQueue("T", "a", 0), MessageQueue("T", "b", 0)]
    >>> [rr.select(qs).broker_name for _ in range(3)]
    ['a', 'b', 'a']
    >>> rr.select(qs, avoid={"a"}).broker_name
    'b'
    """

    def __init__(self, start: int | None = None) -> None:
        self._start = start
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def _next(self, topic: str) -> int:
        with self._lock:
            counter = self._counters.get(topic)
            if counter is None:
                begin = random.randrange(1 << 16) if self._start is None else self._start
                counter = self._counters[topic] = itertools.count(begin)
            return next(counter)

    def select(self, queues: Sequence[MessageQueue], avoid: Collection[str] = ()) -> MessageQueue:
        if not queues:
            raise InvalidArgumentError("no writable queue to pick from")
        first = self._next(queues[0].topic)
        if avoid:
            for step in range(len(queues)):
                queue = queues[(first + step) % len(queues)]
                if queue.broker_name not in avoid:
                    if step:
                        self._skip(queues[0].topic, step)
                    return queue
        return queues[first % len(queues)]

    def _skip(self, topic: str, steps: int) -> None:
        # Keep the rotation going from the queue actually used.
        with self._lock:
            counter = self._counters[topic]
            for _ in range(steps):
                next(counter)
