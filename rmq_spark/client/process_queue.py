"""The pulled-but-not-yet-consumed messages of one queue (RocketMQ's ProcessQueue).

A consumer pulls a batch into the queue's :class:`ProcessQueue`
(:meth:`~ProcessQueue.put_messages`), hands the messages to its consume threads, and removes
each one when done (:meth:`~ProcessQueue.remove_messages`). What it may commit is the
smallest offset still in flight, or, when nothing is in flight, one past the largest offset
ever put: every message below the committable offset is done.

**A slow first message holds back every later commit.** Put 0..9, finish 1..9: the
committable offset stays 0, because message 0 is not done. A crash now re-delivers all ten
(at-least-once), so consumers must be idempotent. This is the price of committing a single
number per queue.

The committable offset never decreases: it is the largest value ever handed out, and an
offset put below it is ignored (it was already committed past). Offsets are kept in a dict
(offset -> body size) plus a min-heap with lazy deletion: put and the committable offset
are O(log n) (amortised), removal O(1) plus the heap clean-up. Thread-safe.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import is_valid_offset

__all__ = ["NOTHING_PUT", "ProcessQueue"]

log = logging.getLogger("rmq_spark.client")

#: :meth:`ProcessQueue.committable_offset` before any message was put (RocketMQ's -1).
NOTHING_PUT = -1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ProcessQueue:
    """In-flight offsets of one queue, with the committable offset they allow."""

    def __init__(self, clock_ms: Callable[[], int] = _now_ms) -> None:
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}  # offset -> body size
        self._heap: list[int] = []  # offsets; entries no longer in _in_flight are stale
        self._max_put = NOTHING_PUT
        self._committable = NOTHING_PUT  # the largest committable offset handed out
        self._msg_size = 0
        self._dropped = False
        self.last_pull_timestamp_ms = clock_ms()
        self.last_consume_timestamp_ms = clock_ms()

    # --- pulled / consumed ---------------------------------------------------------------

    def put_messages(self, offsets: Iterable[int], body_sizes: Iterable[int] | None = None) -> int:
        """Add pulled messages; returns how many were new.

        Offsets already in flight, and offsets below the committable offset (already
        committed past), are ignored. ``body_sizes`` (same length as ``offsets``) feed
        :attr:`msg_size`.
        """
        offsets = list(offsets)
        sizes = [0] * len(offsets) if body_sizes is None else list(body_sizes)
        if len(sizes) != len(offsets):
            raise InvalidArgumentError(
                f"{len(offsets)} offsets but {len(sizes)} body sizes; give one size per offset"
            )
        for offset, size in zip(offsets, sizes, strict=True):
            _check_offset(offset)
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidArgumentError(f"body size {size!r} must be a whole number >= 0")
        added = 0
        with self._lock:
            self.last_pull_timestamp_ms = self._clock_ms()
            for offset, size in zip(offsets, sizes, strict=True):
                if offset in self._in_flight:
                    continue
                if offset < self._committable:
                    log.debug(
                        "offset %d is below the committed %d; ignored", offset, self._committable
                    )
                    continue
                self._in_flight[offset] = size
                heapq.heappush(self._heap, offset)
                self._msg_size += size
                self._max_put = max(self._max_put, offset)
                added += 1
        return added

    def remove_messages(self, offsets: Iterable[int]) -> int:
        """Mark messages consumed; returns the committable offset (see :meth:`committable_offset`).

        Offsets not in flight are ignored.
        """
        offsets = list(offsets)
        for offset in offsets:
            _check_offset(offset)
        with self._lock:
            self.last_consume_timestamp_ms = self._clock_ms()
            for offset in offsets:
                size = self._in_flight.pop(offset, None)
                if size is not None:
                    self._msg_size -= size
            return self._committable_locked()

    def committable_offset(self) -> int:
        """The offset to commit: every message below it is done.

        The smallest offset in flight, or (largest offset ever put) + 1 when none is; ``-1``
        when nothing was ever put. Never decreases.
        """
        with self._lock:
            return self._committable_locked()

    def _committable_locked(self) -> int:
        heap = self._heap
        while heap and heap[0] not in self._in_flight:
            heapq.heappop(heap)
        if heap:
            candidate = heap[0]
        elif self._max_put == NOTHING_PUT:
            candidate = NOTHING_PUT
        else:
            candidate = self._max_put + 1
        self._committable = max(self._committable, candidate)
        return self._committable

    # --- state ---------------------------------------------------------------------------

    @property
    def msg_count(self) -> int:
        """Messages in flight."""
        with self._lock:
            return len(self._in_flight)

    @property
    def msg_size(self) -> int:
        """Sum of the body sizes of the messages in flight."""
        with self._lock:
            return self._msg_size

    @property
    def max_offset_put(self) -> int:
        """The largest offset ever put, or -1."""
        with self._lock:
            return self._max_put

    def in_flight_offsets(self) -> list[int]:
        """The offsets in flight, sorted."""
        with self._lock:
            return sorted(self._in_flight)

    @property
    def is_dropped(self) -> bool:
        """True once the queue went to another consumer: stop consuming, do not commit."""
        return self._dropped

    @is_dropped.setter
    def is_dropped(self, dropped: bool) -> None:
        self._dropped = bool(dropped)

    def drop(self) -> None:
        self.is_dropped = True


def _check_offset(offset: object) -> None:
    if not is_valid_offset(offset):
        raise InvalidArgumentError(f"offset {offset!r} must be a whole number >= 0")
