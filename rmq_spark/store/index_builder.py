"""Keeps the message index (:mod:`rmq_spark.store.index`) up with the commit log.

Like RocketMQ's dispatcher, the index is built behind the writes, not inside them: a thread
reads what was appended since its last round (a segment at a time, records found by their
TOTALSIZE chain, keys read column-wise by :func:`~rmq_spark.codec.arrow_decode.key_fields`)
and adds their keys. A send never waits for it; a key is findable a few hundred
milliseconds after its message is stored. The same code indexes a store whose index is
missing or was cut by a crash, from where the index ends, while the store already serves.

Its position is the physical offset after the last record indexed. At open it is the end of
the record the index names last (RocketMQ's ``endPhyOffset`` is that record's start).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmq_spark.codec import record as rec
from rmq_spark.codec.arrow_decode import key_fields
from rmq_spark.codec.properties import KEYS, UNIQ_KEY, decode_properties
from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.store import geometry
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.index_file import DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES
from rmq_spark.store.mapped_file import UNBOUNDED, OpenFiles
from rmq_spark.store.recovery_scan import walk

log = logging.getLogger("rmq_spark.store")

#: errors a round of indexing waits out (keys are added again from where it stopped):
#: a full disk, or a process out of file descriptors
_WAITS_FOR = {
    errno.ENOSPC: "disk space",
    errno.EDQUOT: "disk space",
    errno.EMFILE: "a file descriptor",
    errno.ENFILE: "a file descriptor",
}

#: records read per round and segment, at most (bounds the memory of one round)
CHUNK_BYTES = 16 << 20
ROUND_INTERVAL_S = 0.2


def open_index(
    cfg: StoreConfig,
    commitlog: CommitLog,
    *,
    crash_index_ts: int | None,
    last_store_ts: int,
    files: OpenFiles = UNBOUNDED,
) -> IndexBuilder:
    """Open the store's ``index/`` (its file sizes: recorded, else given, else RocketMQ's)
    and a builder set where the index ends. After a crash (``crash_index_ts``: the
    checkpoint's index time) the files holding keys newer than it are deleted and built
    again, as RocketMQ does, and so are keys pointing past the recovered end of the log.
    The index files hold descriptors under ``files``' budget, the store's."""
    slots, entries = geometry.resolve_index_sizes(
        cfg.config_dir,
        (cfg.index_hash_slots, cfg.index_max_entries),
        (DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES),
    )
    index = MessageIndex.open(Path(cfg.store_dir) / "index", slots, entries, open_files=files)
    try:
        if crash_index_ts is not None:
            index.truncate_after_crash(crash_index_ts)
        if index.files and index.end_phy_offset >= commitlog.max_offset:
            log.warning("the message index names records past the log's end; rebuilding")
            index.truncate_after_crash(min(last_store_ts, index.last_timestamp - 1))
        position = position_after_last(index, commitlog)
    except BaseException:
        index.close()
        raise
    return IndexBuilder(index, commitlog, lambda: commitlog.max_offset, position, files)


def position_after_last(index: MessageIndex, commitlog: CommitLog) -> int:
    """Where indexing resumes: after the record at the index's ``end_phy_offset`` (its start,
    as RocketMQ records it), or the commit log's start when the index is empty."""
    last = index.end_phy_offset
    if not index.files or last < commitlog.min_offset:
        return commitlog.min_offset
    head = commitlog.read(last, 8)
    if head is None:
        return min(last, commitlog.max_offset)
    try:
        size = int.from_bytes(head[:4], "big")
    finally:
        head.release()
    return last + size if size > 0 else last


class IndexBuilder:
    """Adds the keys of new records to ``index`` every :data:`ROUND_INTERVAL_S`; ``end()``
    says up to where the commit log may be read. ``files``: the store's open files, which
    its rounds never close to get a descriptor (out of descriptors, a round waits)."""

    def __init__(
        self,
        index: MessageIndex,
        commitlog: CommitLog,
        end: Callable[[], int],
        position: int,
        files: OpenFiles = UNBOUNDED,
    ) -> None:
        self.index = index
        self._files = files
        self._commitlog = commitlog
        self._end = end
        self.position = position
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one round at a time (the thread, or catch_up)
        self._thread = threading.Thread(target=self._run, name="rmq-index", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def catch_up(self, max_bytes: int | None = None) -> int:
        """Index every record up to ``end()`` now (skipped when that is more than
        ``max_bytes`` away); returns how many keys were added."""
        end = self._end()
        if max_bytes is not None and end - self.position > max_bytes:
            log.info("the message index is %d bytes behind; it goes on at the next open",
                     end - self.position)  # fmt: skip
            return 0
        added = 0
        # the thread's rounds end early at stop(); the last one, at close, runs to the end
        interruptible = threading.current_thread() is self._thread
        while not (interruptible and self._stop.is_set()):
            with self._lock:  # a chunk at a time: flush() and delete_before() get turns
                step = self._step(end)
            if step is None:
                break
            added += step
        return added

    def flush(self) -> int:
        """Make the keys added so far durable; returns the store time of the last record
        indexed (the checkpoint's indexMsgTimestamp)."""
        with self._lock:
            stamp = self.index.last_timestamp
            self.index.flush()
            return stamp

    def delete_before(self, commitlog_min_offset: int) -> int:
        """Retention: drop the index files pointing only below the log's minimum."""
        with self._lock:
            return self.index.delete_before(commitlog_min_offset)

    def _run(self) -> None:
        waiting_for: str | None = None  # what a round waits for, said once per episode
        while not self._stop.wait(ROUND_INTERVAL_S):
            try:
                # Out of descriptors, a round waits for the next instead of closing the
                # store's files for its own: whatever it closed, the connections waiting to
                # be accepted would take, and the reads of queues served before (their
                # files open until then) would find no descriptor to open them again.
                with self._files.waiting_for_descriptors():
                    self.catch_up()
                waiting_for = None
            except OSError as exc:
                wanted = _WAITS_FOR.get(exc.errno or 0)
                if wanted is None:
                    log.exception(
                        "indexing from physical offset %d failed; retrying", self.position
                    )
                elif waiting_for != wanted:  # once per full disk (or so), not every round
                    log.warning("the message index waits for %s (%s)", wanted, exc)
                    waiting_for = wanted
            except ResourceExhaustedError as exc:  # no descriptor, even after closing files
                if waiting_for != "a file descriptor":
                    log.warning("the message index waits for a file descriptor (%s)", exc)
                    waiting_for = "a file descriptor"
            except Exception:
                log.exception("indexing from physical offset %d failed; retrying", self.position)

    def _step(self, end: int) -> int | None:
        """Index the next chunk of records before ``end``; None when there is none yet."""
        if self.position >= end:
            return None
        if self.position < self._commitlog.min_offset:  # retention removed them
            self.position = self._commitlog.min_offset
            return 0
        seg = self._commitlog.segment_for(self.position)
        if seg is None:
            return None
        pos = self.position - seg.start_offset
        whole = min(seg.size, end - seg.start_offset)
        added = 0
        view = seg.view()
        try:
            starts, sizes, stop, reason = walk(view, pos, min(whole, pos + CHUNK_BYTES))
            if not starts and whole > pos + CHUNK_BYTES:  # one record over CHUNK_BYTES
                starts, sizes, stop, reason = walk(view, pos, whole)
            if starts:
                added = self._add(view, starts, sizes)
        finally:
            try:
                view.release()
            except BufferError:  # arrays still point into it; the mapping stays valid
                pass
        if reason == "blank":
            self.position = seg.end_offset
        elif stop > pos:
            self.position = seg.start_offset + stop
        else:
            return None  # a record not complete yet (or damaged): try again next round
        return added

    def _add(self, view: memoryview, starts: list[int], sizes: list[int]) -> int:
        fields = key_fields(view, np.asarray(starts, np.int64), np.asarray(sizes, np.int64))
        return self.index.add(
            _plain_strings(fields.topic),
            _plain_strings(fields.uniq_key),
            _plain_strings(fields.keys),
            fields.physical_offset,
            fields.store_timestamp,
            fields.sysflag,
        )


def _plain_strings(column: pa.Array) -> pa.Array:
    """A column as a plain string array (the decoder may hand out dictionary or view
    layouts), as the index's kernels take it."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column if column.type == pa.string() else column.cast(pa.string())


def matching_key(record: rec.Record, topic: str, key: str) -> bool:
    """Whether ``record`` is of ``topic`` and carries ``key`` (a KEYS entry or UNIQ_KEY):
    what a caller checks of each record an index query names."""
    if record.topic != topic:
        return False
    props = decode_properties(record.properties) if record.properties else {}
    return props.get(UNIQ_KEY) == key or key in props.get(KEYS, "").split(" ")
