"""The store facade: opens a directory, appends batches, serves reads, runs housekeeping.

Directory layout (RocketMQ's, plus a lock file)::

    commitlog/00000000000000000000         records, fixed-size segments
    consumequeue/{topic}/{queueId}/{start} 20-byte entries per message
    config/topics.json                     topic table
    config/consumerOffset.json (+ .bak)    consumer-group offsets
    index/{yyyyMMddHHmmssSSS}              RocketMQ's message index (by KEYS, UNIQ_KEY)
    checkpoint                             RocketMQ's: store times of what is flushed
    rocketlite.checkpoint                  where recovery may start
    abort                                  present while open: a crash leaves it behind
    lock                                   flock held by the owning process

The facade holds the parts and the public methods; its jobs live beside it:
:mod:`~rmq_spark.store.opening` (opening and recovery), :mod:`~rmq_spark.store.writer`
(the locked write), :mod:`~rmq_spark.store.reads`, :mod:`~rmq_spark.store.retention`
(retention and housekeeping) and :mod:`~rmq_spark.store.checks` (argument checks).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path

import numpy as np

from rmq_spark.codec.batch_encode import (
    EncodedBatch,
    PerMessage,
    finish_batch,
    prepare_batch,
    stamp,
    warm_up,
)
from rmq_spark.codec.properties import TAGS, decode_properties, encode_properties
from rmq_spark.codec.tag_column import hash_codes
from rmq_spark.errors import InvalidArgumentError, StoreError
from rmq_spark.filter import Selector
from rmq_spark.filter.stored import select_stored
from rmq_spark.store import checks, opening, reads
from rmq_spark.store.checkpoint import RocketMQCheckpoint
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.dir_lock import DirectoryLock
from rmq_spark.store.file_ranges import RangeFiles, range_files
from rmq_spark.store.flush import FlushService
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.index_builder import IndexBuilder
from rmq_spark.store.mapped_file import OpenFiles
from rmq_spark.store.reads import DEFAULT_MAX_BYTES, GetResult
from rmq_spark.store.recovery import RecoveryReport
from rmq_spark.store.retention import Housekeeping, delete_expired
from rmq_spark.store.sizes import RangeSize
from rmq_spark.store.writer import AppendResult, LayOut, Writer

__all__ = ["AppendResult", "GetResult", "MessageStore"]

log = logging.getLogger("rmq_spark.store")

#: at close, the index catches up with the log when it is at most this far behind (more
#: is left to the next open, which goes on from where it stopped)
CLOSE_INDEX_BYTES = 64 << 20


class MessageStore:
    """A RocketMQ-format store in one directory. Thread-safe: one writer lock, lock-free reads.

    >>> store = MessageStore.open(StoreConfig(tmp))                   # doctest: +SKIP
    >>> store.topics.create("orders", queues=4)                      # doctest: +SKIP
    >>> store.append("orders", 0, [b"hello"], tags=["TagA"])         # doctest: +SKIP
    >>> store.get_messages("orders", 0, offset=0, max_count=32)      # doctest: +SKIP
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._write_lock = threading.Lock()
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queues_lock = threading.Lock()
        self._closed = False
        #: recovery may have written any queue: the first checkpoint flushes them all
        self._recovered_unflushed = True
        #: the store's files that hold a descriptor now (at most its limit of them)
        self.open_files = OpenFiles(opening.open_files_budget(config))
        self.health = opening.store_health(config)
        self.recovery: RecoveryReport | None = None
        self.index: MessageIndex | None = None
        self.index_builder: IndexBuilder | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def open(cls, config: StoreConfig) -> MessageStore:
        """Open (creating if needed) and recover the store in ``config.store_dir``."""
        store = cls(config)
        store._open()
        return store

    def _open(self) -> None:
        cfg = self.config
        root = Path(cfg.store_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create store directory {root}: {exc}") from exc
        self._dir_lock = DirectoryLock(root)
        try:
            self._open_locked(root)
        except BaseException:
            self._dir_lock.release()
            raise

    def _open_locked(self, root: Path) -> None:
        cfg = self.config
        opened = opening.open_recovered(
            cfg, self.health, self._queue, lambda: list(self._queues.values()), self.open_files
        )
        self.topics, self.offsets, self.commitlog = opened.topics, opened.offsets, opened.commitlog
        self._checkpoint, self._rocketmq_checkpoint = opened.checkpoint, opened.rocketmq_checkpoint
        self.recovery = opened.recovery
        self._writer = Writer(
            self.commitlog,
            self.health,
            lock=self._write_lock,
            queue=self._queue,
            check_open=self._check_open,
            last_store_ts=opened.last_store_ts,
        )
        self.index_builder = opened.index_builder
        self.index = None if self.index_builder is None else self.index_builder.index
        with opening.no_space_at_open(self.health, "creating the abort marker"):
            (root / "abort").touch()
        with opening.no_space_at_open(self.health, "writing the checkpoint"):
            self.checkpoint()
        self.health.check_at_open()
        warm_up()
        self.flush_service = FlushService(
            sync=cfg.flush_mode == "SYNC",
            flush_interval_ms=cfg.flush_interval_ms,
            checkpoint_interval_ms=cfg.checkpoint_interval_ms,
            flush_commitlog=self._flush_commitlog,
            checkpoint=self.checkpoint,
            on_failure=self.health.fail,
        )
        self.flush_service.start(self.commitlog.max_offset)
        if self.index_builder is not None:
            self.index_builder.start()
        self._housekeeping = Housekeeping(cfg.cleanup_interval_ms / 1000, self._housekeep)
        self._housekeeping.start()
        log.info(
            "store %s open: commit log [%d, %d), %d queues, flush %s",
            root,
            self.commitlog.min_offset,
            self.commitlog.max_offset,
            len(self._queues),
            cfg.flush_mode,
        )

    def close(self) -> None:
        """Flush everything, write the checkpoint, persist offsets and release the lock."""
        if self._closed:
            return
        with self._write_lock:  # waits for an append in progress; later ones see _closed
            self._closed = True
        self._housekeeping.stop()
        if self.index_builder is not None:
            self.index_builder.stop()
            self.index_builder.catch_up(max_bytes=CLOSE_INDEX_BYTES)
        self.flush_service.stop()  # its last round covers SYNC appenders still waiting
        failed = self.health.failure is not None
        if not failed:
            self.checkpoint()
        with self._write_lock:
            self.offsets.close()
            self.commitlog.close()
            for cq in self._queues.values():
                cq.close()
            self._checkpoint.close()
            self._rocketmq_checkpoint.close()
            if self.index is not None:
                self.index.close()
            if not failed:  # after a failure the next open must run crash recovery
                (Path(self.config.store_dir) / "abort").unlink(missing_ok=True)
            self._dir_lock.release()
        log.info(
            "store %s closed %s", self.config.store_dir, "after a failure" if failed else "cleanly"
        )

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues ----------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._queues_lock:
                cq = self._queues.get(key)
                if cq is None:
                    directory = self.config.consumequeue_dir / topic / str(queue_id)
                    cq = ConsumeQueue(
                        directory,
                        topic,
                        queue_id,
                        self.config.consumequeue_entries_per_file,
                        self.open_files,
                    )
                    self._queues[key] = cq
        return cq

    def _readable_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue to read, None if it has never been written; NotFound if unknown."""
        checks.check_queue_id(queue_id)
        cq = self._queues.get((topic, queue_id))
        if cq is not None:
            return cq
        checks.check_read_queue(topic, queue_id, self.topics.find(topic))
        return None

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self._queues if t == topic)

    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]:
        """Every consume queue by (topic, queue id), as of now (a copy of the map)."""
        return dict(self._queues)

    def writes_paused(self) -> AbstractContextManager:
        """``with store.writes_paused():`` no append runs inside the block, so what the
        caller reads there is one consistent picture of the store (used by verify)."""
        return self._write_lock

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes] | None = None,
        *,
        tags: Sequence[str | None] | None = None,
        born_host: str = "127.0.0.1:0",
        born_timestamps: PerMessage = None,
        flags: PerMessage = None,
        reconsume_times: PerMessage = None,
        sysflag: int = 0,
        prepared_tx_offset: int = 0,
        delivery_delay_ms: int | None = None,
        body_crcs: np.ndarray | None = None,
        tag_codes: np.ndarray | None = None,
    ) -> AppendResult:
        """Append a batch of messages to one queue; returns their offsets.

        ``properties`` are encoded property blobs (see :mod:`rmq_spark.codec.properties`).
        ``tags`` are the TAGS values whose hash codes go into the consume queue: parsed from
        ``properties`` when not given; written into the records as the TAGS property when
        ``properties`` is not given; callers passing both must keep them in agreement.
        In SYNC flush mode this returns once the batch is fsynced (group commit).
        ``sysflag`` and ``prepared_tx_offset`` go into every record as they are (a
        committed transactional message points at its half message this way).
        With ``delivery_delay_ms`` (delayed messages, in the schedule topic) the entries'
        tag-code slot holds each message's delivery time instead: the store time plus it.
        ``body_crcs`` and ``tag_codes``, when the caller has them already, save computing
        them again (they must be the bodies' and tags').
        """
        self._check_open()
        if properties is None and tags is not None:
            properties = [encode_properties({TAGS: t}) if t else b"" for t in tags]
        config = self.topics.get(topic)
        checks.check_writable(topic, config)
        checks.check_write_queue(topic, queue_id, config)
        self.health.check_writable()
        batch = prepare_batch(
            topic,
            queue_id,
            bodies,
            properties,
            born_host=born_host,
            store_host=self.config.store_host,
            born_timestamps=born_timestamps,
            flags=flags,
            reconsume_times=reconsume_times,
            sysflag=sysflag,
            prepared_tx_offset=prepared_tx_offset,
            body_crcs=body_crcs,
        )
        checks.check_body_sizes(batch.headers["body_len"], self.config.max_message_bytes)
        if tag_codes is None:
            if tags is None:
                tags = [decode_properties(p).get(TAGS) for p in batch.properties]
            elif len(tags) != batch.count:
                raise InvalidArgumentError(f"{len(tags)} tags for {batch.count} messages")
            tag_codes = hash_codes(tags)
        delay = delivery_delay_ms

        def lay_out(
            first: int, positions: np.ndarray, store_ts: int
        ) -> tuple[memoryview, np.ndarray | list[int]]:
            data = finish_batch(batch, first, positions, store_ts)
            codes = tag_codes if delay is None else [store_ts + delay] * batch.count
            return data, codes

        return self._write(topic, queue_id, batch.sizes, lay_out)

    def append_encoded(
        self,
        topic: str,
        queue_id: int,
        batch: EncodedBatch,
        tag_codes: np.ndarray,
    ) -> AppendResult:
        """Append records laid out beforehand (:func:`~rmq_spark.codec.batch_encode.
        encode_unstamped`, for ``topic``/``queue_id``): only their offsets and store time
        are written into them now. A committed transaction's rows are written this way,
        their encoding paid when they were staged."""
        self._check_open()
        checks.check_writable(topic, self.topics.get(topic))
        self.health.check_writable()

        def lay_out(
            first: int, positions: np.ndarray, store_ts: int
        ) -> tuple[memoryview, np.ndarray]:
            return stamp(batch, first, positions, store_ts), tag_codes

        return self._write(topic, queue_id, batch.sizes, lay_out)

    def _write(self, topic: str, queue_id: int, sizes: np.ndarray, lay_out: LayOut) -> AppendResult:
        """Write one batch (see :class:`~rmq_spark.store.writer.Writer`); in SYNC flush mode,
        return once it is flushed."""
        result, end = self._writer.write(topic, queue_id, sizes, lay_out)
        if self.config.flush_mode == "SYNC":
            self.flush_service.wait_flushed(end, self.config.sync_flush_timeout_ms)
        return result

    # -- reading ---------------------------------------------------------------------------

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._readable_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (exclusive end)."""
        cq = self._readable_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tag_codes: Sequence[int] | None = None,
        selector: Selector | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` messages (and about ``max_bytes``) from ``offset``.

        ``tag_codes`` (hash codes of the wanted tags; None = all) filters on the consume
        queue; ``selector`` (a SQL92 selector) then on the records' properties. Messages
        that do not match are skipped, and nextBeginOffset moves past them. At least one
        message is returned when any matches, however large.
        """
        self._check_open()
        checks.check_read_args(offset, max_count, max_bytes)
        cq = self._readable_queue(topic, queue_id)
        select = None if selector is None else _by_properties(selector)
        return reads.get_messages(
            cq, self.commitlog, offset, max_count, max_bytes, tag_codes, select
        )

    def read_record(self, physical_offset: int) -> bytes:
        """The raw record at ``physical_offset`` (ViewMessage by offset message id)."""
        return reads.read_record(self.commitlog, physical_offset)

    def store_timestamp_at(self, physical_offset: int) -> int:
        """The store timestamp of the record at ``physical_offset`` (NotFound if none)."""
        return reads.store_timestamp_at(self.commitlog, physical_offset)

    def range_size(
        self,
        topic: str,
        queue_id: int,
        start: int,
        end: int | None = None,
        budget_bytes: int | None = None,
    ) -> RangeSize:
        """Bytes of the records at queue offsets [start, end) (clipped to what the queue
        holds; ``end`` None = its max), and how many from ``start`` fit in ``budget_bytes``
        (see :mod:`rmq_spark.store.sizes`)."""
        return reads.range_size(self._readable_queue(topic, queue_id), start, end, budget_bytes)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store timestamp is >= ``timestamp_ms`` (max if none)."""
        cq = self._readable_queue(topic, queue_id)
        if cq is None:
            return 0
        stored_at = partial(reads.store_timestamp_of, cq, self.commitlog)
        return reads.first_offset_at(cq.min_offset, cq.max_offset, stored_at, timestamp_ms)

    def queue_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The store timestamp of the message at ``offset`` of a queue, or None when the
        queue holds no message there (read from its record header, no record decoded)."""
        cq = self._readable_queue(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return None
        return reads.store_timestamp_of(cq, self.commitlog, offset)

    def query_messages(
        self,
        topic: str,
        key: str,
        max_count: int = 64,
        begin_ms: int = 0,
        end_ms: int = 2**63 - 1,
    ) -> list[bytes]:
        """Raw records of ``topic`` whose KEYS hold ``key`` or whose UNIQ_KEY is ``key``,
        stored in [begin_ms, end_ms], newest first, at most ``max_count`` (the message
        index; keys are findable a moment after their message is stored)."""
        self._check_open()
        if self.index is None:
            raise StoreError(
                f"store {self.config.store_dir} keeps no message index (message_index=False)"
            )
        return reads.query_by_key(
            self.index, self.commitlog, topic, key, max_count, begin_ms, end_ms
        )

    def range_files(
        self, topic: str, queue_id: int, start: int, end: int, max_files: int
    ) -> RangeFiles:
        """The consume-queue files and commit-log segments holding queue offsets
        ``[start, end)`` (or their first part), for a reader on this host (short-circuit
        reads, see :mod:`rmq_spark.store.file_ranges`). NotFound for an unknown topic."""
        self._check_open()
        cq = self._readable_queue(topic, queue_id)
        if cq is None:
            return RangeFiles(0, 0, 0, 0, [], [])
        return range_files(cq, self.commitlog, start, end, max_files)

    # -- flush, checkpoint, retention ------------------------------------------------------

    def _flush_commitlog(self) -> int:
        return self.commitlog.flush()

    def checkpoint(self) -> None:
        """Flush the commit log and every consume queue written since the last checkpoint,
        then record the safe offset. Queues it could not flush are flushed by the next."""
        with self._write_lock:
            end = self.commitlog.max_offset
            ts = self._writer.last_store_ts
            written = self._writer.take_written()
            if self._recovered_unflushed:  # what recovery wrote: flushed by the first one
                written.update(self._queues.values())
                self._recovered_unflushed = False
        pending = list(written)
        try:
            self.commitlog.flush()
            while pending:
                pending[-1].flush()
                pending.pop()
        except BaseException:
            with self._write_lock:  # not flushed: the next checkpoint flushes them
                self._writer.give_back(pending)
            raise
        # the time of the last key indexed; with no key indexed, nothing to protect
        index_ts = (self.index_builder.flush() if self.index_builder is not None else 0) or ts
        self._checkpoint.write(end, ts, ts)
        self._rocketmq_checkpoint.write(RocketMQCheckpoint(ts, ts, index_ts))

    def _housekeep(self) -> None:
        """One round of housekeeping: see whether the disk has room, then retention."""
        self.health.check_disk()
        self.delete_expired_files()

    def delete_expired_files(self, max_age_ms: int | None = None) -> int:
        """Delete commit-log segments not written for ``max_age_ms`` (default
        ``file_reserved_ms``) and the consume-queue entries pointing into them.
        The segment being written is never deleted. Returns how many were deleted."""
        age = self.config.file_reserved_ms if max_age_ms is None else max_age_ms
        cutoff = time.time() - age / 1000
        with self._write_lock:
            deleted = delete_expired(self.commitlog, list(self._queues.values()), cutoff)
            new_min = self.commitlog.min_offset
        if deleted is None:
            return 0
        if self.index_builder is not None:
            self.index_builder.delete_before(new_min)
        log.info("retention deleted %d commit-log segment(s); minimum is now %d", deleted, new_min)
        return deleted

    # -- topics ----------------------------------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        """Delete a topic, its consume queues and its consumer offsets (records stay in the
        commit log until retention removes them)."""
        with self._write_lock:
            self.topics.delete(topic)
            for key in [k for k in self._queues if k[0] == topic]:
                self._queues.pop(key).destroy()
            shutil.rmtree(self.config.consumequeue_dir / topic, ignore_errors=True)
            self.offsets.remove_topic(topic)

    # -- misc ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        self.health.check_not_failed()
        if self._closed:
            raise StoreError(f"store {self.config.store_dir} is closed")

    @property
    def failure(self) -> BaseException | None:
        """Why the store stopped (fail-stop), or None while it is healthy."""
        return self.health.failure

    def add_failure_listener(self, listener: Callable[[BaseException], None]) -> None:
        """Call ``listener(error)`` once if the store fails (e.g. to stop the broker)."""
        self.health.add_failure_listener(listener)

    def stats(self) -> dict:
        return {
            "commitlog_min_offset": self.commitlog.min_offset,
            "commitlog_max_offset": self.commitlog.max_offset,
            "commitlog_segments": len(self.commitlog.segments),
            "flushed_offset": self.flush_service.flushed_offset,
            "queues": len(self._queues),
            "topics": len(self.topics.list()),
            "flush_mode": self.config.flush_mode,
            "disk_full": self.health.disk_full,
        }


def _by_properties(selector: Selector) -> reads.RecordSelector:
    """The records ``selector`` picks, judged by their stored properties (only those
    holding the bytes a match must hold are read)."""
    return partial(select_stored, selector)
