"""Auto batching: single sends that arrive together are sent together, as RocketMQ's
producer does with ``autoBatch``.

Every gRPC call costs the broker about a millisecond of CPU whatever it carries, so one
message a call caps a broker at a few hundred sends a second. With
``ProducerConfig(auto_batch=True)``, :meth:`Producer.send` and :meth:`Producer.send_async`
of a message to a topic (round robin: no queue, sharding key or delay) go through here:

* when no batch of the topic is waiting for its answer, the message goes out at once (a
  ``send`` sends it in the calling thread, as without auto batching);
* otherwise it is held, with every other message for the topic that arrives meanwhile, and
  they go out as one request when that answer comes, when they reach ``batch_max_bytes``,
  or when the first of them has waited ``batch_max_delay_ms``, whichever is first.

So a lone message is not delayed, and under load a batch holds what arrived during one
round trip. Each message's future gets its own SendResult, or the request's error.

What changes for the caller:

* the messages of one request are stored together, in one queue, at consecutive offsets;
* a ``send`` returns when its batch is answered: one thread sending one message at a time
  sends one a request, as before; many threads, or ``send_async``, fill the batches;
* messages sent with a queue, a sharding key (ordered messages) or a delay level are sent
  on their own, as without auto batching, so their order and timing are as asked;
* when ``total_batch_max_bytes`` are already held or in flight, a send goes on its own
  rather than waiting for room;
* ``close()`` sends whatever is held, and waits for it, before closing the connections.

RocketMQ's client holds every message for ``batchMaxDelayMs``; here that is only the upper
bound, since holding a message while nothing is in flight gains nothing.

The decisions are pure functions (:func:`is_due`, :func:`next_wake`); :class:`Accumulator`
holds the messages and runs one thread that sends each batch when it is due.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from rmq_spark.client.message import Message, SendResult

__all__ = ["Accumulator", "Held", "is_due", "message_bytes", "next_wake"]

#: what a message costs in a request besides its body, tags, keys and properties, counted
#: high (the fixed fields of the Message proto and their tags)
MESSAGE_OVERHEAD_BYTES = 64

SendHeld = Callable[[str, list[Message]], list[SendResult]]


def message_bytes(message: Message) -> int:
    """About how many bytes ``message`` adds to a request (an upper estimate)."""
    size = MESSAGE_OVERHEAD_BYTES + len(message.body) + len(message.unique_key)
    size += len(message.tags or "") + sum(len(k) + 1 for k in message.keys)
    return size + sum(len(k) + len(v) + 4 for k, v in message.properties.items())


@dataclass
class Held:
    """The messages held for one topic, oldest first, and their futures."""

    topic: str
    since: float  # time.monotonic() when the first was added
    messages: list[Message] = field(default_factory=list)
    futures: list[Future[SendResult]] = field(default_factory=list)
    size: int = 0  # message_bytes of all of them


def is_due(
    held_bytes: int,
    since: float,
    now: float,
    in_flight: int,
    max_bytes: int,
    max_delay_s: float,
) -> bool:
    """Whether a topic's batch holding ``held_bytes`` since ``since`` goes out at ``now``,
    while ``in_flight`` earlier batches of the topic wait for their answer.

    >>> is_due(100, since=0.0, now=0.0, in_flight=0, max_bytes=32768, max_delay_s=0.01)
    True
    >>> is_due(100, since=0.0, now=0.005, in_flight=1, max_bytes=32768, max_delay_s=0.01)
    False
    >>> is_due(40000, since=0.0, now=0.0, in_flight=1, max_bytes=32768, max_delay_s=0.01)
    True
    >>> is_due(100, since=0.0, now=0.01, in_flight=1, max_bytes=32768, max_delay_s=0.01)
    True
    """
    return in_flight == 0 or held_bytes >= max_bytes or now >= since + max_delay_s


def next_wake(since_times: Iterable[float], max_delay_s: float) -> float | None:
    """When the oldest held batch is due (monotonic time); None when nothing is held.

    >>> next_wake([3.0, 1.0, 2.0], 0.5)
    1.5
    >>> next_wake([], 0.5) is None
    True
    """
    oldest = min(since_times, default=None)
    return None if oldest is None else oldest + max_delay_s


class Accumulator:
    """Holds single sends by topic and sends each topic's batch when it is due.

    ``send_held(topic, messages)`` sends one batch and returns a SendResult per message,
    in order; it runs on this accumulator's own threads (``senders`` of them), so several
    batches can be in flight at once.
    """

    def __init__(
        self,
        send_held: SendHeld,
        *,
        max_delay_ms: int,
        max_bytes: int,
        total_max_bytes: int,
        senders: int,
    ) -> None:
        self._send_held = send_held
        self._max_delay_s = max_delay_ms / 1000
        self._max_bytes = max_bytes
        self._total_max_bytes = total_max_bytes
        self._senders = senders
        self._held: dict[str, Held] = {}
        self._in_flight: dict[str, int] = {}  # batches sent and not yet answered, by topic
        self._total = 0  # bytes held or in flight
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def add(
        self, topic: str, message: Message, *, inline: bool = False
    ) -> Future[SendResult] | None:
        """Hold ``message`` for ``topic``; its future. None when the accumulator is full
        (``total_max_bytes`` held or in flight) or closing: send it on its own then.

        ``inline``: when nothing of the topic is held or in flight, send the message in the
        calling thread, now, and return its future done (what a waiting ``send`` wants: no
        hand-off to other threads); later messages of the topic wait for it as for a batch.
        """
        size = message_bytes(message)
        future: Future[SendResult] = Future()
        with self._cond:
            if self._closing or self._total + size > self._total_max_bytes:
                return None
            alone = topic not in self._held and not self._in_flight.get(topic)
            if inline and alone:
                self._in_flight[topic] = 1
                self._total += size
                now = Held(topic, time.monotonic(), [message], [future], size)
            else:
                now = None
                self._hold(topic, message, future, size)
        if now is not None:
            self._send(now)
        return future

    def close(self) -> None:
        """Send everything held, wait until every batch is answered, stop the threads."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # --- holding, and the flusher thread --------------------------------------------------

    def _hold(self, topic: str, message: Message, future: Future[SendResult], size: int) -> None:
        """Add ``message`` to the topic's held batch (``self._cond`` is held)."""
        if self._thread is None:
            self._start()
        held = self._held.get(topic)
        if held is None:
            held = self._held[topic] = Held(topic, time.monotonic())
            self._cond.notify()  # due now if nothing is in flight; else a new deadline
        held.messages.append(message)
        held.futures.append(future)
        held.size += size
        self._total += size
        if held.size >= self._max_bytes:
            self._cond.notify()

    def _start(self) -> None:
        self._pool = ThreadPoolExecutor(self._senders, thread_name_prefix="rmq-auto-batch-send")
        self._thread = threading.Thread(target=self._run, name="rmq-auto-batch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._take_due(time.monotonic())
                while not due:
                    if self._closing and not self._held:
                        return
                    wake = next_wake((h.since for h in self._held.values()), self._max_delay_s)
                    self._cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                    due = self._take_due(time.monotonic())
            assert self._pool is not None
            for held in due:
                self._pool.submit(self._send, held)

    def _take_due(self, now: float) -> list[Held]:
        """Remove and return the batches due at ``now`` (all of them when closing)."""
        due = [
            held
            for held in self._held.values()
            if self._closing
            or is_due(
                held.size,
                held.since,
                now,
                self._in_flight.get(held.topic, 0),
                self._max_bytes,
                self._max_delay_s,
            )
        ]
        for held in due:
            del self._held[held.topic]
            self._in_flight[held.topic] = self._in_flight.get(held.topic, 0) + 1
        return due

    def _send(self, held: Held) -> None:
        try:
            results = self._send_held(held.topic, held.messages)
            if len(results) != len(held.futures):
                raise RuntimeError(
                    f"{len(results)} results for a batch of {len(held.futures)} messages"
                )
        except BaseException as exc:  # every waiting sender gets the request's error
            for future in held.futures:
                future.set_exception(exc)
        else:
            for future, result in zip(held.futures, results, strict=True):
                future.set_result(result)
        finally:
            with self._cond:
                self._total -= held.size
                left = self._in_flight.pop(held.topic) - 1
                if left:
                    self._in_flight[held.topic] = left
                if held.topic in self._held:
                    self._cond.notify()  # what waited for this answer may go now
