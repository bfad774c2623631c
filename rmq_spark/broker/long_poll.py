"""Long polling: pulls that found nothing new wait here until a write to their queue.

RocketMQ's PullRequestHoldService re-checks held pulls every few milliseconds; here a held
pull is a future on the server's event loop, filed under its queue, and the write path wakes
exactly the pulls of the queue it wrote to. A held pull costs a few hundred bytes and no
thread, an idle broker does no work, and a message reaches a waiting consumer as soon as it
is stored.

Writes run on worker threads, so :meth:`PullNotifier.notify` is thread-safe and hands the
wake-up to the loop; waiting (:meth:`PullNotifier.wait`) happens on the loop only.

>>> import asyncio
>>> notifier = PullNotifier()
>>> asyncio.run(notifier.wait("TopicA", 0, 0.01, is_ready=lambda: False))
False
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rmq_spark.structs import PullStatus

if TYPE_CHECKING:
    from rmq_spark.store.message_store import GetResult

_Key = tuple[str, int]


class PullNotifier:
    """Wakes pulls held on a queue when that queue is written.

    One lock guards the table of waiters. A waiter files itself before it checks readiness,
    and a writer looks for waiters after it stored its data, so no wake-up can fall between
    a waiter's check and its sleep.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[_Key, dict[asyncio.Future, asyncio.AbstractEventLoop]] = {}
        self._closed = False

    async def wait(
        self, topic: str, queue_id: int, timeout_s: float, is_ready: Callable[[], bool]
    ) -> bool:
        """Wait until ``is_ready()`` is true (checked at every wake-up of this queue), the
        timeout passes or the notifier closes; returns the last ``is_ready()`` answer.

        ``is_ready`` runs on the event loop, so it must be quick (reading a queue's max
        offset is the intended use). A cancelled caller (its client went away) leaves no
        trace here.
        """
        return await self.wait_any([(topic, queue_id)], timeout_s, is_ready)

    async def wait_any(
        self, keys: list[_Key], timeout_s: float, is_ready: Callable[[], bool]
    ) -> bool:
        """:meth:`wait` on several queues at once: any write to one of ``keys`` wakes it
        (pop-style receives read whichever queue of a topic has messages)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            woken = loop.create_future()
            with self._lock:
                closed = self._closed
                if not closed:
                    for key in keys:
                        self._queues.setdefault(key, {})[woken] = loop
            try:
                if is_ready():
                    return True
                remaining = deadline - loop.time()
                if closed or remaining <= 0:
                    return False
                try:
                    async with asyncio.timeout(remaining):
                        await woken
                except TimeoutError:
                    return is_ready()
            finally:
                for key in keys:
                    self._forget(key, woken)

    def _forget(self, key: _Key, woken: asyncio.Future) -> None:
        with self._lock:
            waiters = self._queues.get(key)
            if waiters is not None:
                waiters.pop(woken, None)
                if not waiters:
                    del self._queues[key]

    def notify(self, topic: str, queue_id: int) -> None:
        """Wake every pull waiting on this queue (called after each append to it)."""
        with self._lock:
            waiters = self._queues.get((topic, queue_id))
            if not waiters:
                return
            woken = list(waiters.items())
        _wake(woken)

    def notify_topic(self, topic: str) -> None:
        """Wake every pull waiting on any queue of ``topic`` (e.g. it was deleted)."""
        with self._lock:
            woken = [
                item
                for (name, _), waiters in self._queues.items()
                if name == topic
                for item in waiters.items()
            ]
        _wake(woken)

    def waiting(self) -> int:
        """How many pulls are held right now (for tests and statistics); a receive waiting
        on several queues counts once."""
        with self._lock:
            return len({future for waiters in self._queues.values() for future in waiters})

    def close(self) -> None:
        """Release every held pull now and make later waits return at once (shutdown)."""
        with self._lock:
            self._closed = True
            woken = [item for waiters in self._queues.values() for item in waiters.items()]
        _wake(woken)


async def hold(
    notifier: PullNotifier,
    topic: str,
    queue_id: int,
    offset: int,
    timeout_s: float,
    *,
    max_offset: Callable[[], int],
    read: Callable[[int], Awaitable[GetResult]],
    result: GetResult,
) -> GetResult:
    """A pull of ``topic``/``queue_id`` that found nothing new at ``offset`` (``result``),
    held up to ``timeout_s`` for a message that passes its filter; the last read answers.

    ``max_offset()`` is the queue's end (checked on the loop at each wake-up) and
    ``read(offset)`` reads the queue again from ``offset`` (off the loop). Arrivals the
    filter rejects do not end the wait, as with RocketMQ's hold service; the answer then
    moves next_begin_offset past them. The wait holds no thread.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:

        def arrived(offset: int = offset) -> bool:
            return max_offset() > offset

        if not await notifier.wait(topic, queue_id, deadline - loop.time(), arrived):
            return result
        result = await read(offset)
        if result.status != PullStatus.NO_MATCHED_MSG:
            return result
        offset = result.next_begin_offset


def _wake(waiters: list[tuple[asyncio.Future, asyncio.AbstractEventLoop]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for future, loop in waiters:
        by_loop.setdefault(loop, []).append(future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, futures)
        except RuntimeError:  # that loop is closed; its waiters went with it
            pass


def _resolve(futures: list[asyncio.Future]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
