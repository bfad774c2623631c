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
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmq_spark.clock import now_ms
from rmq_spark.codec import record as rec
from rmq_spark.codec.batch_encode import (
    EncodedBatch,
    finish_batch,
    prepare_batch,
    stamp,
    warm_up,
)
from rmq_spark.codec.properties import TAGS, decode_properties, encode_properties
from rmq_spark.codec.tag_column import hash_codes
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from rmq_spark.offsets.broker_table import ConsumerOffsetTable
from rmq_spark.store import geometry
from rmq_spark.store.checkpoint import (
    RocketMQCheckpoint,
    open_checkpoints,
    rocketmq_recovery_start,
)
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.dir_lock import DirectoryLock
from rmq_spark.store.failure import StoreHealth, is_no_space
from rmq_spark.store.file_ranges import RangeFiles, range_files
from rmq_spark.store.flush import FlushService
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.index_builder import IndexBuilder, matching_key, open_index
from rmq_spark.store.recovery import RecoveryReport, recover
from rmq_spark.store.sizes import MAX_SCANNED_ENTRIES, RangeSize, measure
from rmq_spark.store.topics import TopicTable
from rmq_spark.structs import PullStatus

log = logging.getLogger("rmq_spark.store")

#: how many consume-queue entries one filtered read may scan (RocketMQ's 16000)
MAX_FILTER_SCAN = 16_000
DEFAULT_MAX_BYTES = 4 << 20
#: at close, the index catches up with the log when it is at most this far behind (more
#: is left to the next open, which goes on from where it stopped)
CLOSE_INDEX_BYTES = 64 << 20


@dataclass
class AppendResult:
    topic: str
    queue_id: int
    first_queue_offset: int
    physical_offsets: np.ndarray  # int64, one per message
    store_timestamp: int

    @property
    def count(self) -> int:
        return len(self.physical_offsets)

    def msg_ids(self, store_host: str) -> list[str]:
        return [rec.offset_msg_id(store_host, int(p)) for p in self.physical_offsets]


@dataclass
class GetResult:
    """The answer to a read: status, offsets, and the raw records back to back."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    data: bytes = b""
    queue_offsets: np.ndarray | None = None  # int64 per returned message
    sizes: np.ndarray | None = None  # int64 record sizes, in order; starts = cumsum

    @property
    def count(self) -> int:
        return 0 if self.sizes is None else len(self.sizes)

    def record_starts(self) -> np.ndarray:
        sizes = self.sizes if self.sizes is not None else np.zeros(0, np.int64)
        return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


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
        cq_file_bytes = config.consumequeue_entries_per_file * 20
        self.health = StoreHealth(
            Path(config.store_dir),
            needed_bytes=config.commitlog_segment_bytes + cq_file_bytes,
            needed_what=(
                f"one commit-log segment of {config.commitlog_segment_bytes:,} bytes and one "
                f"consume-queue file of {cq_file_bytes:,} bytes"
            ),
            max_used_ratio=config.disk_max_used_ratio,
        )
        self._last_store_ts = 0
        self.recovery: RecoveryReport | None = None

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
        abort_file = root / "abort"
        abnormal = abort_file.exists()
        # Before any file is opened: a store opened with other file sizes reads garbage.
        try:
            geometry.load_or_record(
                cfg.config_dir,
                geometry.Geometry(cfg.commitlog_segment_bytes, cfg.consumequeue_entries_per_file),
                lambda: geometry.sizes_in_files(cfg.commitlog_dir, cfg.consumequeue_dir),
            )
        except OSError as exc:
            if not is_no_space(exc):
                raise
            log.warning("disk full: the store's file sizes are recorded at a later start")
        self.topics = TopicTable.open(cfg.config_dir)
        self.offsets = ConsumerOffsetTable.open(
            cfg.config_dir,
            force_empty=cfg.force_empty_offsets,
            persist_interval_ms=cfg.offsets_persist_interval_ms,
            sync_commits=cfg.flush_mode == "SYNC",
        )
        self.commitlog = CommitLog(cfg.commitlog_dir, cfg.commitlog_segment_bytes)
        self._load_queues()
        try:
            self._checkpoint, self._rocketmq_checkpoint = open_checkpoints(root)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            raise self.health.no_space_at_open(exc, "creating the checkpoint file") from exc
        last = self._checkpoint.last
        if abnormal:
            log.warning("store %s was not shut down cleanly; recovering from the commit log", root)
        safe_offset = last.safe_offset if last else self._rocketmq_recovery_start()
        try:
            self.recovery = recover(
                self.commitlog,
                self._queue,
                list(self._queues.values()),
                safe_offset,
                abnormal=abnormal or last is None,
                schedule_delays_ms=cfg.schedule_delays_ms,
            )
            for cq in self._queues.values():
                cq.drop_below_physical(self.commitlog.min_offset)
            self._last_store_ts = max(
                last.physic_msg_timestamp if last else 0,
                rmq.physic_msg_timestamp if (rmq := self._rocketmq_checkpoint.last) else 0,
            )
            doing = "opening the message index"
            self._open_index(abnormal)
            doing = "creating the abort marker"
            abort_file.touch()
            doing = "writing the checkpoint"
            self.checkpoint()
        except OSError as exc:
            if not is_no_space(exc):
                raise
            if self.recovery is None:
                doing = "recovery (it rebuilds consume queues from the commit log)"
            raise self.health.no_space_at_open(exc, doing) from exc
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
        self._stop_cleaner = threading.Event()
        self._cleaner = threading.Thread(target=self._run_cleaner, name="rmq-clean", daemon=True)
        self._cleaner.start()
        log.info(
            "store %s open: commit log [%d, %d), %d queues, flush %s",
            root,
            self.commitlog.min_offset,
            self.commitlog.max_offset,
            len(self._queues),
            cfg.flush_mode,
        )

    def _open_index(self, abnormal: bool) -> None:
        """The message index and its builder (None when the store keeps no index)."""
        self.index: MessageIndex | None = None
        self.index_builder: IndexBuilder | None = None
        cfg = self.config
        if cfg.message_index:
            rmq = self._rocketmq_checkpoint.last
            self.index_builder = open_index(
                cfg,
                self.commitlog,
                crash_index_ts=(rmq.index_msg_timestamp if rmq else 0) if abnormal else None,
                last_store_ts=self._last_store_ts,
            )
            self.index = self.index_builder.index

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
        found = []
        for physical in self.index.query(topic, key, max_count, begin_ms, end_ms):
            try:
                raw = self.read_record(physical)
            except NotFoundError:  # deleted by retention, or cut by recovery
                continue
            if matching_key(rec.decode_record(raw, check_crc=False), topic, key):
                found.append(raw)
        return found

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

    def _rocketmq_recovery_start(self) -> int | None:
        """Where to scan from in a store only Apache RocketMQ wrote (it has no
        ``rocketlite.checkpoint``): RocketMQ's own rule over its checkpoint, or None (scan
        the whole commit log) when that file is absent or empty."""
        cp = self._rocketmq_checkpoint.last
        if cp is None or cp.min_timestamp <= 0:
            return None
        firsts = [
            (seg.start_offset, self.commitlog.first_store_timestamp(seg))
            for seg in self.commitlog.segments
        ]
        start = rocketmq_recovery_start(firsts, cp)
        if start is not None:
            log.info("recovery starts at %d, from RocketMQ's checkpoint", start)
        return start

    def _load_queues(self) -> None:
        base = self.config.consumequeue_dir
        if not base.exists():
            return
        for topic_dir in sorted(base.iterdir()):
            for qdir in sorted(topic_dir.iterdir()):
                if qdir.name.isdigit():
                    self._queue(topic_dir.name, int(qdir.name))

    def close(self) -> None:
        """Flush everything, write the checkpoint, persist offsets and release the lock."""
        if self._closed:
            return
        with self._write_lock:  # waits for an append in progress; later ones see _closed
            self._closed = True
        self._stop_cleaner.set()
        self._cleaner.join()
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

    def __exit__(self, *exc) -> None:
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
                        directory, topic, queue_id, self.config.consumequeue_entries_per_file
                    )
                    self._queues[key] = cq
        return cq

    def _readable_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue to read, None if it has never been written; NotFound if unknown."""
        if not isinstance(queue_id, int) or queue_id < 0:
            raise InvalidArgumentError(f"queue id {queue_id!r} must be a whole number >= 0")
        cq = self._queues.get((topic, queue_id))
        if cq is not None:
            return cq
        config = self.topics.find(topic)
        if config is None:
            raise NotFoundError(
                f"topic {topic!r} does not exist; create it first (rocketlite topic create)"
            )
        if queue_id >= max(config.read_queue_nums, config.write_queue_nums):
            raise NotFoundError(
                f"topic {topic!r} has {config.read_queue_nums} read queues; "
                f"queue {queue_id} does not exist"
            )
        return None

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self._queues if t == topic)

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
        born_timestamps: Sequence[int] | int | None = None,
        flags: Sequence[int] | int | None = None,
        reconsume_times: Sequence[int] | int | None = None,
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
        if not config.is_writable:
            raise PermissionDeniedError(
                f"topic {topic!r} is not writable (perm {config.perm}); "
                "update it with perm 6 to allow writes"
            )
        if not isinstance(queue_id, int) or not 0 <= queue_id < config.write_queue_nums:
            raise InvalidArgumentError(
                f"queue id {queue_id!r} is out of range for topic {topic!r}: "
                f"it has {config.write_queue_nums} write queues (0..{config.write_queue_nums - 1})"
            )
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
        self._check_sizes(batch)
        if tag_codes is None:
            if tags is None:
                tags = [decode_properties(p).get(TAGS) for p in batch.properties]
            elif len(tags) != batch.count:
                raise InvalidArgumentError(f"{len(tags)} tags for {batch.count} messages")
            tag_codes = hash_codes(tags)
        delay = delivery_delay_ms

        def lay_out(first: int, positions: np.ndarray, store_ts: int):
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
        config = self.topics.get(topic)
        if not config.is_writable:
            raise PermissionDeniedError(
                f"topic {topic!r} is not writable (perm {config.perm}); "
                "update it with perm 6 to allow writes"
            )
        self.health.check_writable()

        def lay_out(first: int, positions: np.ndarray, store_ts: int):
            return stamp(batch, first, positions, store_ts), tag_codes

        return self._write(topic, queue_id, batch.sizes, lay_out)

    def _write(self, topic: str, queue_id: int, sizes: np.ndarray, lay_out) -> AppendResult:
        """Write one batch of records to the commit log and its consume queue, under the
        write lock. ``lay_out(first queue offset, physical offsets, store time)`` returns
        the records and their tag codes."""
        too_big = sizes > self.config.commitlog_segment_bytes - rec.BLANK_MARKER_SIZE
        if too_big.any():
            raise InvalidArgumentError(
                f"a record of {int(sizes[too_big][0])} bytes does not fit in a "
                f"commit-log segment of {self.config.commitlog_segment_bytes} bytes"
            )
        with self._write_lock:
            self._check_open()
            cq = self._queue(topic, queue_id)
            first = cq.max_offset
            plan = self.commitlog.plan(sizes)
            store_ts = max(now_ms(), self._last_store_ts)
            data, tag_codes = lay_out(first, plan.positions, store_ts)
            log_end = self.commitlog.max_offset
            try:
                self.commitlog.write(data, sizes, plan)
                cq.put(first, plan.positions, sizes, tag_codes)
            except OSError as exc:
                self._undo_append(cq, first, log_end)
                raise self.health.write_failed(exc) from exc
            self._last_store_ts = store_ts
            end = self.commitlog.max_offset
        if self.config.flush_mode == "SYNC":
            self.flush_service.wait_flushed(end, self.config.sync_flush_timeout_ms)
        return AppendResult(topic, queue_id, first, plan.positions, store_ts)

    def _undo_append(self, cq: ConsumeQueue, first: int, log_end: int) -> None:
        """Leave the store exactly as before a write that failed part-way: no byte of it
        past the commit log's end (recovery would take whole records there for stored
        ones) and no entry of it in the queue, whose offsets the next append reuses."""
        try:
            self.commitlog.set_max_offset(log_end)
            cq.truncate(first, erase_beyond=True)
        except OSError as exc:
            # Cannot even erase it: stop rather than risk serving half a batch later.
            self.health.fail(exc)
            raise

    def _check_sizes(self, batch) -> None:
        limit = self.config.max_message_bytes
        lens = batch.headers["body_len"]
        if lens.max() > limit:
            i = int(np.argmax(lens))
            raise InvalidArgumentError(
                f"message {i}: body of {int(lens[i])} bytes exceeds the limit of {limit} bytes"
            )

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
    ) -> GetResult:
        """Read up to ``max_count`` messages (and about ``max_bytes``) from ``offset``.

        ``tag_codes`` (hash codes of the wanted tags; None = all) filters on the consume
        queue; entries that do not match are skipped, and nextBeginOffset moves past them.
        At least one message is returned when any matches, however large.
        """
        self._check_open()
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidArgumentError(f"offset {offset!r} must be a whole number")
        if not isinstance(max_count, int) or max_count < 1:
            raise InvalidArgumentError(f"max_count {max_count!r} must be a whole number >= 1")
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise InvalidArgumentError(f"max_bytes {max_bytes!r} must be a whole number >= 1")
        cq = self._readable_queue(topic, queue_id)
        lo, hi = (cq.min_offset, cq.max_offset) if cq else (0, 0)
        if offset < lo or offset > hi:
            # Below the min: retention deleted it, go to the oldest. Past the end: RocketMQ's
            # rule, the min when nothing was ever deleted (the queue was recreated, or the
            # offset never existed: reading again beats skipping), else the end.
            nxt = lo if offset < lo or lo == 0 else hi
            return GetResult(PullStatus.OFFSET_ILLEGAL, nxt, lo, hi)
        if offset == hi:
            return GetResult(PullStatus.NO_NEW_MSG, offset, lo, hi)
        assert cq is not None
        scan = max_count if tag_codes is None else max(max_count, MAX_FILTER_SCAN)
        scan_end = min(hi, offset + scan)
        entries = cq.entries(offset, scan_end)
        if tag_codes is None:
            picked = np.arange(min(len(entries), max_count))
        else:
            wanted = np.asarray(list(tag_codes), dtype=np.int64)
            picked = np.flatnonzero(np.isin(entries["tag_code"], wanted))[:max_count]
        if len(picked) == 0:
            return GetResult(PullStatus.NO_MATCHED_MSG, scan_end, lo, hi)
        sizes = entries["size"][picked].astype(np.int64)
        keep = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
        limited = keep < len(picked) or len(picked) == max_count
        picked, sizes = picked[:keep], sizes[:keep]
        physical = entries["physical_offset"][picked]
        if physical[0] < self.commitlog.min_offset:
            # Retention removed these records since the queue's minimum was last moved.
            cq.drop_below_physical(self.commitlog.min_offset)
            return GetResult(PullStatus.OFFSET_ILLEGAL, cq.min_offset, cq.min_offset, hi)
        data = self.commitlog.gather(physical, sizes)
        next_offset = offset + int(picked[-1]) + 1 if limited else scan_end
        return GetResult(
            PullStatus.FOUND, next_offset, lo, hi, data, offset + picked.astype(np.int64), sizes
        )

    def read_record(self, physical_offset: int) -> bytes:
        """The raw record at ``physical_offset`` (ViewMessage by offset message id)."""
        head = self.commitlog.read(physical_offset, 8)
        if head is None:
            raise NotFoundError(f"no message at physical offset {physical_offset}")
        size, magic = struct.unpack(">iI", head)
        head.release()
        if magic not in (rec.MAGIC_V1, rec.MAGIC_V2) or size <= 0:
            raise NotFoundError(f"no message starts at physical offset {physical_offset}")
        view = self.commitlog.read(physical_offset, size)
        if view is None:
            raise NotFoundError(f"no message at physical offset {physical_offset}")
        try:
            return bytes(view)
        finally:
            view.release()

    def store_timestamp_at(self, physical_offset: int) -> int:
        head = self.commitlog.read(physical_offset, rec.STORE_TIMESTAMP_HEAD)
        if head is None:
            raise NotFoundError(f"no message at physical offset {physical_offset}")
        try:
            stamp = rec.store_timestamp_in(head)
        finally:
            head.release()
        if stamp is None:
            raise NotFoundError(f"no message at physical offset {physical_offset}")
        return stamp

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
        cq = self._readable_queue(topic, queue_id)
        if cq is None:
            return measure(np.zeros(0, np.int64), budget_bytes)
        first = max(start, cq.min_offset)
        last = cq.max_offset if end is None else min(end, cq.max_offset)
        count = max(0, last - first)
        entries = cq.entries(first, first + min(count, MAX_SCANNED_ENTRIES))
        return measure(entries["size"].astype(np.int64), budget_bytes, count)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store timestamp is >= ``timestamp_ms`` (max if none)."""
        cq = self._readable_queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            stored = self._store_timestamp_of(cq, mid)
            if stored is None or stored >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def queue_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The store timestamp of the message at ``offset`` of a queue, or None when the
        queue holds no message there (read from its record header, no record decoded)."""
        cq = self._readable_queue(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return None
        return self._store_timestamp_of(cq, offset)

    def _store_timestamp_of(self, cq: ConsumeQueue, offset: int) -> int | None:
        entry = cq.entry(offset)
        return None if entry is None else self.store_timestamp_at(entry[0])

    # -- flush, checkpoint, retention ------------------------------------------------------

    def _flush_commitlog(self) -> int:
        return self.commitlog.flush()

    def checkpoint(self) -> None:
        """Flush the commit log and every consume queue, then record the safe offset."""
        with self._write_lock:
            end = self.commitlog.max_offset
            ts = self._last_store_ts
        self.commitlog.flush()
        for cq in list(self._queues.values()):
            cq.flush()
        # the time of the last key indexed; with no key indexed, nothing to protect
        index_ts = (self.index_builder.flush() if self.index_builder is not None else 0) or ts
        self._checkpoint.write(end, ts, ts)
        self._rocketmq_checkpoint.write(RocketMQCheckpoint(ts, ts, index_ts))

    def _run_cleaner(self) -> None:
        interval = self.config.cleanup_interval_ms / 1000
        while not self._stop_cleaner.wait(interval):
            try:
                self.health.check_disk()
                self.delete_expired_files()
            except Exception:
                log.exception("housekeeping failed")

    def delete_expired_files(self, max_age_ms: int | None = None) -> int:
        """Delete commit-log segments not written for ``max_age_ms`` (default
        ``file_reserved_ms``) and the consume-queue entries pointing into them.
        The segment being written is never deleted. Returns how many were deleted."""
        age = self.config.file_reserved_ms if max_age_ms is None else max_age_ms
        cutoff = time.time() - age / 1000
        with self._write_lock:
            segments = self.commitlog.segments
            expired_end = None
            for seg in segments[:-1]:
                if os.path.getmtime(seg.path) >= cutoff:
                    break
                expired_end = seg.end_offset
            if expired_end is None:
                return 0
            deleted = self.commitlog.delete_segments_before(expired_end)
            new_min = self.commitlog.min_offset
            for cq in list(self._queues.values()):
                cq.drop_below_physical(new_min)
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
