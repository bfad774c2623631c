"""The store's write path: one batch of records into the commit log and its consume queue.

:class:`Writer` holds the store's write lock while it takes the queue's next offset, plans
where the batch lands in the commit log, has the records stamped with their offsets and
store time, and writes them and their queue entries. A write that fails part-way is undone,
so the next one starts where it did. Store times never go back: a batch is stamped with the
later of the clock and the previous batch's time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from rmq_spark.clock import now_ms
from rmq_spark.codec import record as rec
from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.store.checks import check_record_sizes
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.failure import StoreHealth

#: ``lay_out(first queue offset, physical offsets, store time)``: the batch's records with
#: those written into them, and their consume-queue tag codes
LayOut = Callable[[int, np.ndarray, int], tuple[memoryview, np.ndarray | list[int]]]


@dataclass
class AppendResult:
    topic: str
    queue_id: int
    first_queue_offset: int
    physical_offsets: np.ndarray  # int64, one per message
    store_timestamp: int
    #: the records' bytes in all (RocketMQ counts a put's size so)
    wrote_bytes: int = 0

    @property
    def count(self) -> int:
        return len(self.physical_offsets)

    def msg_ids(self, store_host: str) -> list[str]:
        return [rec.offset_msg_id(store_host, int(p)) for p in self.physical_offsets]


class Writer:
    """Writes batches to ``commitlog`` and the queues ``queue(topic, queue_id)`` gets or
    creates, one at a time under ``lock``. ``check_open()`` raises when the store may no
    longer be written (it runs under the lock, so a close waits for the write in progress
    and later ones see it). ``last_store_ts`` is the newest store time written."""

    def __init__(
        self,
        commitlog: CommitLog,
        health: StoreHealth,
        *,
        lock: threading.Lock,
        queue: Callable[[str, int], ConsumeQueue],
        check_open: Callable[[], None],
        last_store_ts: int,
    ) -> None:
        self.commitlog = commitlog
        self.health = health
        self.lock = lock
        self._queue = queue
        self._check_open = check_open
        self.last_store_ts = last_store_ts
        #: queues written since the last take_written() (the next checkpoint flushes them)
        self._written: set[ConsumeQueue] = set()

    def take_written(self) -> set[ConsumeQueue]:
        """The queues written since the last call (call with the lock held): a checkpoint
        flushes those, not every queue of the store."""
        written, self._written = self._written, set()
        return written

    def give_back(self, queues: Iterable[ConsumeQueue]) -> None:
        """Queues a checkpoint took but could not flush (lock held): the next takes them."""
        self._written.update(queues)

    def write(
        self, topic: str, queue_id: int, sizes: np.ndarray, lay_out: LayOut
    ) -> tuple[AppendResult, int]:
        """Write one batch of records of ``sizes`` bytes to a queue. Returns where they
        went, and the commit log's end after them (what a SYNC append waits to see flushed).
        A write the disk refuses is undone and raised as the store's write failure."""
        check_record_sizes(sizes, self.commitlog.segment_bytes)
        with self.lock:
            self._check_open()
            cq = self._queue(topic, queue_id)
            first = cq.max_offset
            plan = self.commitlog.plan(sizes)
            store_ts = max(now_ms(), self.last_store_ts)
            data, tag_codes = lay_out(first, plan.positions, store_ts)
            log_end = self.commitlog.max_offset
            try:
                # the queue's file is open before a byte is written: out of descriptors,
                # the batch is refused with nothing to undo
                cq.open_for_write(first)
                self.commitlog.write(data, sizes, plan)
                cq.put(first, plan.positions, sizes, tag_codes)
                self._written.add(cq)
            except ResourceExhaustedError:  # no descriptor left part-way: not the disk's fault
                self._undo(cq, first, log_end)
                raise
            except OSError as exc:
                self._undo(cq, first, log_end)
                raise self.health.write_failed(exc) from exc
            self.last_store_ts = store_ts
            end = self.commitlog.max_offset
        wrote = int(sizes.sum())
        return AppendResult(topic, queue_id, first, plan.positions, store_ts, wrote), end

    def _undo(self, cq: ConsumeQueue, first: int, log_end: int) -> None:
        """Leave the store exactly as before a write that failed part-way: no byte of it
        past the commit log's end (recovery would take whole records there for stored
        ones) and no entry of it in the queue, whose offsets the next append reuses."""
        if self.commitlog.max_offset == log_end and cq.max_offset == first:
            return  # nothing of it was written (refused before the first write)
        try:
            self.commitlog.set_max_offset(log_end)
            cq.truncate(first, erase_beyond=True)
        except (OSError, ResourceExhaustedError) as exc:
            # Cannot even erase it: stop rather than risk serving half a batch later.
            self.health.fail(exc)
            raise
