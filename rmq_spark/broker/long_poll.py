"""Long polling: pulls that found nothing new wait here until a write to their queue.

RocketMQ's PullRequestHoldService re-checks held pulls every few milliseconds; here a pull
sleeps on a condition variable of its own queue and the write path wakes exactly the pulls
of the queue it wrote to, so an idle broker does no work and a message reaches a waiting
consumer as soon as it is stored.

>>> notifier = PullNotifier()
>>> notifier.wait("TopicA", 0, 0.01, is_ready=lambda: False)
False
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class _QueueWaiters:
    """The condition pulls of one queue sleep on, and how many are sleeping."""

    __slots__ = ("condition", "count")

    def __init__(self, lock: threading.Lock) -> None:
        self.condition = threading.Condition(lock)
        self.count = 0


class PullNotifier:
    """Wakes pulls held on a queue when that queue is written. Thread-safe.

    One lock guards every queue's condition: the write path takes it once per append, which
    costs far less than the append itself, and a single lock rules out lost wake-ups between
    a waiter's readiness check and its sleep.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], _QueueWaiters] = {}
        self._closed = False

    def wait(
        self, topic: str, queue_id: int, timeout_s: float, is_ready: Callable[[], bool]
    ) -> bool:
        """Block until ``is_ready()`` is true (checked at every wake-up of this queue), the
        timeout passes or the notifier closes; returns the last ``is_ready()`` answer.

        ``is_ready`` runs under the notifier's lock, so it must be quick and must not call
        back into the notifier (reading a queue's max offset is the intended use).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        key = (topic, queue_id)
        with self._lock:
            waiters = self._queues.get(key)
            if waiters is None:
                waiters = self._queues[key] = _QueueWaiters(self._lock)
            waiters.count += 1
            try:
                while True:
                    if is_ready():
                        return True
                    remaining = deadline - time.monotonic()
                    if self._closed or remaining <= 0:
                        return False
                    waiters.condition.wait(remaining)
            finally:
                waiters.count -= 1
                if waiters.count == 0:
                    del self._queues[key]

    def notify(self, topic: str, queue_id: int) -> None:
        """Wake every pull waiting on this queue (called after each append to it)."""
        with self._lock:
            waiters = self._queues.get((topic, queue_id))
            if waiters is not None:
                waiters.condition.notify_all()

    def notify_topic(self, topic: str) -> None:
        """Wake every pull waiting on any queue of ``topic`` (e.g. it was deleted)."""
        with self._lock:
            for (name, _), waiters in self._queues.items():
                if name == topic:
                    waiters.condition.notify_all()

    def waiting(self) -> int:
        """How many pulls are held right now (for tests and statistics)."""
        with self._lock:
            return sum(w.count for w in self._queues.values())

    def close(self) -> None:
        """Release every held pull now and make later waits return at once (shutdown)."""
        with self._lock:
            self._closed = True
            for waiters in self._queues.values():
                waiters.condition.notify_all()
