"""The client-side offset store: RocketMQ's ``OffsetStore`` interface, with an in-memory table.

A consumer keeps the *next* offset to consume of every queue it owns in memory
(:meth:`OffsetStore.update_offset`, increase-only by default), and persists it now and then
(every 5 s and at shutdown in RocketMQ) to where the next owner of the queue will read it:

- :class:`~rmq_spark.offsets.local_file.LocalFileOffsetStore` (BROADCASTING: every consumer
  reads every queue, so each keeps its own progress in a local file);
- :class:`~rmq_spark.offsets.remote_broker.RemoteBrokerOffsetStore` (CLUSTERING: queues move
  between consumers, so progress lives on the broker that serves the queue).

As in RocketMQ, an offset that is not known reads as ``-1`` (:data:`UNKNOWN_OFFSET`), which
the consumer turns into its ConsumeFromWhere start position. Everything is thread-safe.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import is_valid_offset
from rmq_spark.structs import MessageQueue

__all__ = ["UNKNOWN_OFFSET", "OffsetStore", "ReadOffsetType"]

#: What :meth:`OffsetStore.read_offset` answers for a queue without an offset (RocketMQ's -1).
UNKNOWN_OFFSET = -1


class ReadOffsetType(enum.Enum):
    """Where :meth:`OffsetStore.read_offset` looks (RocketMQ's ReadOffsetType)."""

    #: The in-memory table only.
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    #: The persistent store only (file or broker); a value found there is cached in memory.
    READ_FROM_STORE = "READ_FROM_STORE"
    #: Memory when the queue is there, else the store.
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(ABC):
    """Next offset to consume per :class:`MessageQueue`: a memory table plus a backing store.

    Subclasses implement :meth:`load`, :meth:`_read_from_store`, :meth:`persist_all`; the
    memory table and its lock live here. ``self._lock`` guards ``self._table`` only: never
    hold it during I/O.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[MessageQueue, int] = {}

    # --- the backing store (subclasses) --------------------------------------------------

    @abstractmethod
    def load(self) -> None:
        """Read what the backing store holds into memory (a no-op for the broker store)."""

    @abstractmethod
    def _read_from_store(self, mq: MessageQueue) -> int | None:
        """The persisted offset of ``mq``, or None when the store has none."""

    @abstractmethod
    def persist_all(
        self, mqs: Iterable[MessageQueue] | None = None
    ) -> Mapping[MessageQueue, object]:
        """Persist the in-memory offsets of ``mqs`` (every queue in memory when None).

        Queues without an offset in memory are skipped. Returns what was persisted, per
        queue (the form depends on the store).
        """

    def persist(self, mq: MessageQueue) -> None:
        """Persist one queue's in-memory offset (nothing happens when it has none)."""
        self.persist_all([mq])

    # --- the memory table ----------------------------------------------------------------

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> int:
        """Set ``mq``'s next offset to consume in memory; returns the offset now held.

        With ``increase_only`` (the default, as a consumer uses it) a lower offset than the
        held one is ignored, so a late, stale update cannot move the progress back. Pass
        False to move back on purpose (an offset reset).
        """
        mq = _check_queue(mq)
        if not is_valid_offset(offset):
            raise InvalidArgumentError(
                f"offset {offset!r} for {mq} must be a whole number >= 0 (the next offset to "
                "consume)"
            )
        with self._lock:
            held = self._table.get(mq)
            if held is None or not increase_only or offset > held:
                self._table[mq] = offset
                held = offset
            return held

    def read_offset(
        self, mq: MessageQueue, read_type: ReadOffsetType = ReadOffsetType.MEMORY_FIRST_THEN_STORE
    ) -> int:
        """``mq``'s next offset to consume, or ``-1`` (:data:`UNKNOWN_OFFSET`) when unknown.

        A value read from the store replaces the one in memory (as in RocketMQ: the store is
        the truth when asked for explicitly).
        """
        mq = _check_queue(mq)
        if not isinstance(read_type, ReadOffsetType):
            raise InvalidArgumentError(f"read_type {read_type!r} must be a ReadOffsetType")
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            with self._lock:
                held = self._table.get(mq)
            if held is not None or read_type is ReadOffsetType.READ_FROM_MEMORY:
                return UNKNOWN_OFFSET if held is None else held
        stored = self._read_from_store(mq)
        if stored is None:
            return UNKNOWN_OFFSET
        return self.update_offset(mq, stored, increase_only=False)

    def reset_offset(self, mq: MessageQueue, offset: int) -> None:
        """Move ``mq``'s offset to ``offset`` in memory and in the store now, also backwards
        (an offset reset, or the correction after OFFSET_ILLEGAL)."""
        self.update_offset(mq, offset, increase_only=False)
        self._persist_reset(mq, offset)

    def _persist_reset(self, mq: MessageQueue, offset: int) -> None:
        """Write a reset to the store; stores that only move forward override this."""
        self.persist(mq)

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget ``mq`` in memory (the queue went to another consumer). The store keeps it."""
        with self._lock:
            self._table.pop(_check_queue(mq), None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the memory table, optionally only ``topic``'s queues, sorted by queue."""
        with self._lock:
            items = [(mq, o) for mq, o in self._table.items() if topic in (None, mq.topic)]
        return dict(sorted(items))

    def _snapshot(self, mqs: Iterable[MessageQueue] | None) -> dict[MessageQueue, int]:
        """The memory offsets of ``mqs`` (all when None) that exist, sorted by queue."""
        if mqs is None:
            return self.clone_offset_table()
        wanted = {_check_queue(mq) for mq in mqs}
        with self._lock:
            return dict(sorted((mq, self._table[mq]) for mq in wanted if mq in self._table))


def _check_queue(mq: object) -> MessageQueue:
    if not isinstance(mq, MessageQueue):
        raise InvalidArgumentError(f"{mq!r} is not a MessageQueue(topic, broker_name, queue_id)")
    return mq
