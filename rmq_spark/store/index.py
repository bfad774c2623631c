"""A store's message index: the ``index/`` directory of :class:`IndexFile`\\ s, kept as
Apache RocketMQ 4.9's IndexService keeps it, so either can query the other's store by key.

Each record contributes ``topic#UNIQ_KEY`` (the message id producers return) and
``topic#k`` for each space-separated entry ``k`` of its KEYS; a rolled-back transactional
record contributes nothing. Keys are added to the newest file until it is full, then a new
file is made, named by the local time it is made (``yyyyMMddHHmmssSSS``); names sort in
creation order. Queries walk the files newest first.

The decisions (which keys a batch adds, which files a crash or retention removes, a new
file's name) are pure functions; :class:`MessageIndex` applies them to the directory.

>>> index = MessageIndex.open(store / "index")                      # doctest: +SKIP
>>> index.add(["orders"], ["7F00..."], ["o-1 o-2"], [0], [1700000000000])  # doctest: +SKIP
3
>>> index.query("orders", "o-2")                                      # doctest: +SKIP
[0]
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.clock import now_ms
from rmq_spark.codec.record import SYSFLAG_TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from rmq_spark.errors import InvalidArgumentError, StoreError
from rmq_spark.store.index_file import (
    DEFAULT_HASH_SLOTS,
    DEFAULT_MAX_ENTRIES,
    IndexFile,
    index_key_hash,
    index_key_hashes,
    time_matched,
)
from rmq_spark.store.mapped_file import UNBOUNDED, OpenFiles, fsync_dir

log = logging.getLogger("rmq_spark.store")

#: RocketMQ's maxMsgsNumBatch: its broker never answers more offsets for one query
MAX_MSGS_NUM_BATCH = 64
JAVA_LONG_MAX = 2**63 - 1
_NAME = re.compile(r"\d{17}")
_NAME_FORMAT = "%Y%m%d%H%M%S"


# -- decisions -----------------------------------------------------------------------------


def file_name_for(now_ms: int, previous: str | None = None, tz: tzinfo | None = None) -> str:
    """The name of a new index file: ``now_ms`` as ``yyyyMMddHHmmssSSS`` in ``tz`` (None:
    local time, as RocketMQ's JVM uses), moved one millisecond past ``previous`` (the newest
    file's name) when not later, so names keep sorting in creation order.

    >>> from datetime import timezone
    >>> file_name_for(1_700_000_000_123, tz=timezone.utc)
    '20231114221320123'
    >>> file_name_for(1_700_000_000_123, "20231114221320123", tz=timezone.utc)
    '20231114221320124'
    """
    moment = datetime.fromtimestamp(now_ms // 1000, tz) + timedelta(milliseconds=now_ms % 1000)
    name = _format(moment)
    if previous is not None and _NAME.fullmatch(previous) and name <= previous:
        name = _format(_parse(previous) + timedelta(milliseconds=1))
    return name


def _format(moment: datetime) -> str:
    return moment.strftime(_NAME_FORMAT) + f"{moment.microsecond // 1000:03d}"


def _parse(name: str) -> datetime:
    return datetime.strptime(name[:14], _NAME_FORMAT) + timedelta(milliseconds=int(name[14:]))


def index_keys(
    topics: Sequence[str],
    uniq_keys: Sequence[str | None],
    keys: Sequence[str | None],
    sys_flags: Sequence[int] | np.ndarray | None = None,
) -> tuple[list[str], np.ndarray]:
    """The index keys of a batch of records, in the order RocketMQ adds them: per record
    ``topic#UNIQ_KEY`` (when the record has that property, even empty), then ``topic#k`` for
    each non-empty space-separated entry of KEYS. Rolled-back transactional records have
    none. Returns the keys and, for each, the position of its record in the batch.

    >>> index_keys(["t", "t"], ["U1", None], ["a  b", ""])
    (['t#U1', 't#a', 't#b'], array([0, 0, 0]))
    """
    wanted = np.ones(len(topics), dtype=bool)
    if sys_flags is not None:
        flags = np.asarray(sys_flags, dtype=np.int64)
        wanted = (flags & SYSFLAG_TRANSACTION_MASK) != TRANSACTION_ROLLBACK_TYPE
    if isinstance(topics, pa.Array):
        return _index_keys_columns(topics, uniq_keys, keys, wanted)  # type: ignore[arg-type]
    found: list[str] = []
    owners: list[int] = []
    for i in np.flatnonzero(wanted).tolist():
        prefix = topics[i] + "#"
        uniq = uniq_keys[i]
        if uniq is not None:
            found.append(prefix + uniq)
            owners.append(i)
        listed = keys[i]
        if listed:
            for key in listed.split(" "):
                if key:
                    found.append(prefix + key)
                    owners.append(i)
    return found, np.array(owners, dtype=np.int64)


def _index_keys_columns(
    topics: pa.Array, uniq_keys: pa.Array, keys: pa.Array, wanted: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """:func:`index_keys` over Arrow string columns, with pyarrow kernels instead of a
    loop per record (the same keys, in the same order)."""
    has_uniq = np.asarray(uniq_keys.is_valid(), dtype=bool) & wanted
    u_owners = np.flatnonzero(has_uniq)
    u_names = pc.binary_join_element_wise(topics.take(u_owners), uniq_keys.take(u_owners), "#")
    listed = np.flatnonzero(np.asarray(keys.is_valid(), dtype=bool) & wanted)
    split = pc.split_pattern(keys.take(listed), " ")
    flat = pc.list_flatten(split)
    k_owners = listed[np.asarray(pc.list_parent_indices(split), dtype=np.int64)]
    nonempty = np.asarray(pc.greater(pc.binary_length(flat), 0), dtype=bool)
    flat, k_owners = flat.filter(pa.array(nonempty)), k_owners[nonempty]
    k_names = pc.binary_join_element_wise(topics.take(k_owners), flat, "#")
    owners = np.concatenate([u_owners, k_owners])
    # per record: its UNIQ_KEY first, then its KEYS in order (flattening keeps their order)
    kinds = np.concatenate([np.zeros(len(u_owners), np.int8), np.ones(len(k_owners), np.int8)])
    order = np.lexsort((np.arange(len(owners)), kinds, owners))
    names = pa.concat_arrays([u_names, k_names]).take(pa.array(order))
    return names.to_pylist(), owners[order]


def doomed_after_crash(end_timestamps: Sequence[int], index_msg_timestamp: int) -> list[bool]:
    """Which files to delete when the store did not shut down cleanly: those holding keys
    stored after the checkpoint's indexMsgTimestamp (they may not have reached the disk).

    >>> doomed_after_crash([1000, 2000, 3000], 2000)
    [False, False, True]
    """
    return [end > index_msg_timestamp for end in end_timestamps]


def expired_count(end_phy_offsets: Sequence[int], commitlog_min_offset: int) -> int:
    """How many of the oldest files retention deletes once the commit log starts at
    ``commitlog_min_offset``: those whose last key points below it, never the newest file.

    >>> expired_count([100, 200, 300], 250), expired_count([100, 200], 999)
    (2, 1)
    """
    if not end_phy_offsets or end_phy_offsets[0] >= commitlog_min_offset:
        return 0
    count = 0
    for end in end_phy_offsets[:-1]:
        if end >= commitlog_min_offset:
            break
        count += 1
    return count


# -- the directory ---------------------------------------------------------------------------


class MessageIndex:
    """The index files of one store directory, oldest first. Open it with :meth:`open`.

    One thread adds; others may query meanwhile. A query answers the physical offsets of
    the records indexed under ``topic#key``, but different keys can share a hash (and a
    record stored twice is indexed twice): callers must read the records at those offsets
    and keep those that really are of that topic and carry that key.
    """

    def __init__(
        self,
        directory: Path,
        files: list[IndexFile],
        hash_slots: int,
        max_entries: int,
        read_only: bool,
        clock: Callable[[], int],
        open_files: OpenFiles = UNBOUNDED,
    ) -> None:
        self.directory = directory
        self._open_files = open_files
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self.read_only = read_only
        self._clock = clock
        # Readers take no lock: writers replace the tuple as a whole.
        self._files: tuple[IndexFile, ...] = tuple(files)

    @classmethod
    def open(
        cls,
        directory: str | Path,
        hash_slots: int = DEFAULT_HASH_SLOTS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        read_only: bool = False,
        clock: Callable[[], int] = now_ms,
        open_files: OpenFiles = UNBOUNDED,
    ) -> MessageIndex:
        """The index in ``directory`` (made with the first key when absent). ``read_only``
        maps the files read-only and never writes, creates or deletes anything: for readers
        of a store another process owns (files it makes later are not seen). ``clock``
        gives the time in ms that new files are named by. The files are checked now and
        opened on use, holding descriptors under ``open_files``' budget (a store's)."""
        directory = Path(directory)
        paths = (
            sorted(p for p in directory.iterdir() if _NAME.fullmatch(p.name) and p.is_file())
            if directory.is_dir()
            else []
        )
        files: list[IndexFile] = []
        try:
            for path in paths:
                if read_only and path.stat().st_size == 0:
                    log.warning("%s is empty (a crash as it was made): skipping it", path)
                    continue
                files.append(
                    IndexFile.open(
                        path, hash_slots, max_entries, read_only=read_only, files=open_files
                    )
                )
        except BaseException:
            for f in files:
                f.close()
            raise
        return cls(directory, files, hash_slots, max_entries, read_only, clock, open_files)

    @property
    def files(self) -> tuple[IndexFile, ...]:
        return self._files

    @property
    def end_phy_offset(self) -> int:
        """Physical offset of the last record indexed (0: none); records before it are
        skipped by :meth:`add`, as RocketMQ skips them when it dispatches again."""
        return self._files[-1].header.end_phy_offset if self._files else 0

    @property
    def last_timestamp(self) -> int:
        """Store time of the last record indexed: the checkpoint's indexMsgTimestamp once
        :meth:`flush` has returned."""
        return self._files[-1].header.end_timestamp if self._files else 0

    def add(
        self,
        topics: Sequence[str] | pa.Array,
        uniq_keys: Sequence[str | None] | pa.Array,
        keys: Sequence[str | None] | pa.Array,
        phys_offsets: Sequence[int] | np.ndarray,
        store_timestamps: Sequence[int] | np.ndarray,
        sys_flags: Sequence[int] | np.ndarray | None = None,
    ) -> int:
        """Index a batch of records appended to the commit log, in log order: per record
        its topic, UNIQ_KEY and KEYS properties (None when absent), physical offset, store
        time (ms) and sysflag. Returns how many keys were added.

        >>> index.add(["t"], ["U1"], ["a b"], [0], [1_700_000_000_000])   # doctest: +SKIP
        3
        """
        self._check_writable("add keys")
        phys = np.asarray(phys_offsets, dtype=np.int64)
        stamps = np.asarray(store_timestamps, dtype=np.int64)
        if not len(topics) == len(uniq_keys) == len(keys) == len(phys) == len(stamps):
            raise InvalidArgumentError(
                f"{len(topics)} topics, {len(uniq_keys)} UNIQ_KEYs, {len(keys)} KEYS, "
                f"{len(phys)} offsets and {len(stamps)} timestamps: give one of each per record"
            )
        if len(phys) == 0:
            return 0
        target = self._writable()  # RocketMQ makes the file for any record dispatched
        fresh = phys >= target.header.end_phy_offset
        chosen = np.flatnonzero(fresh)
        if len(chosen) < len(phys):
            topics, uniq_keys, keys = (_take(c, chosen) for c in (topics, uniq_keys, keys))
            sys_flags = None if sys_flags is None else np.asarray(sys_flags)[chosen]
            phys, stamps = phys[chosen], stamps[chosen]
        names, owners = index_keys(topics, uniq_keys, keys, sys_flags)
        hashes = index_key_hashes(names)
        phys, stamps = phys[owners], stamps[owners]
        done = 0
        while done < len(hashes):
            done += target.add_batch(hashes[done:], phys[done:], stamps[done:])
            if done < len(hashes):
                target = self._writable()
        return len(hashes)

    def query(
        self,
        topic: str,
        key: str,
        max_num: int = MAX_MSGS_NUM_BATCH,
        begin_ms: int = 0,
        end_ms: int = JAVA_LONG_MAX,
    ) -> list[int]:
        """Physical offsets of up to ``max_num`` records indexed under ``topic#key`` stored
        in [begin_ms, end_ms] (at one-second resolution), newest first, like RocketMQ's
        queryOffset (whose broker caps ``max_num`` at :data:`MAX_MSGS_NUM_BATCH`).

        May hold records of other keys with the same hash: read each record and check its
        topic and keys before answering it.
        """
        key_hash = index_key_hash(f"{topic}#{key}")
        found: list[int] = []
        for f in reversed(self._files):
            if f.closed:  # deleted by retention while the query was on its way
                continue
            header = f.header
            if time_matched(header, begin_ms, end_ms):
                found += f.lookup(key_hash, begin_ms, end_ms, max_num - len(found))
            if header.begin_timestamp < begin_ms or len(found) >= max_num:
                break
        return found

    def truncate_after_crash(self, index_msg_timestamp: int) -> int | None:
        """After an unclean shutdown, delete the files holding keys stored after the
        checkpoint's ``index_msg_timestamp`` (see :func:`doomed_after_crash`). Returns the
        physical offset from which the commit log must be indexed again to fill the gap
        (the first record of the deleted files), or None when nothing was deleted."""
        self._check_writable("delete index files")
        files = self._files
        doomed = doomed_after_crash([f.header.end_timestamp for f in files], index_msg_timestamp)
        if not any(doomed):
            return None
        gone = [f for f, d in zip(files, doomed, strict=True) if d]
        rebuild_from = min(f.header.begin_phy_offset for f in gone)
        self._files = tuple(f for f in files if f not in gone)
        for f in gone:
            log.warning("%s holds keys stored after the checkpoint: deleting it", f.path)
            f.destroy()
        fsync_dir(self.directory, self._open_files)
        return rebuild_from

    def delete_before(self, commitlog_min_offset: int) -> int:
        """Retention: delete the oldest files whose keys all point below the commit log's
        new minimum offset (see :func:`expired_count`); returns how many were deleted."""
        self._check_writable("delete index files")
        files = self._files
        count = expired_count([f.header.end_phy_offset for f in files], commitlog_min_offset)
        if count:
            self._files = files[count:]
            for f in files[:count]:
                f.destroy()
            fsync_dir(self.directory, self._open_files)
        return count

    def flush(self) -> None:
        """Make every key added so far durable (msync and fsync of the files written)."""
        for f in self._files:
            f.flush()

    def close(self) -> None:
        files, self._files = self._files, ()
        for f in files:
            f.close()

    def __enter__(self) -> MessageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"the index in {self.directory} was opened read-only; cannot {what}")

    def _writable(self) -> IndexFile:
        """The newest file, or a new one when there is none or it is full."""
        files = self._files
        if files and not files[-1].is_full:
            return files[-1]
        previous = files[-1] if files else None
        end_phy_offset = end_timestamp = 0
        if previous is not None:
            previous.flush()  # RocketMQ flushes a file as soon as it is full
            end_phy_offset = previous.header.end_phy_offset
            end_timestamp = previous.header.end_timestamp
        name = file_name_for(self._clock(), previous.path.name if previous else None)
        self.directory.mkdir(parents=True, exist_ok=True)
        created = IndexFile.create(
            self.directory / name,
            self.hash_slots,
            self.max_entries,
            end_phy_offset=end_phy_offset,
            end_timestamp=end_timestamp,
            files=self._open_files,
        )
        try:
            fsync_dir(self.directory, self._open_files)
        except BaseException:  # e.g. no descriptor left: the new file is not left behind
            created.destroy()
            raise
        self._files = (*files, created)
        return created


def _take(values: Sequence[str | None] | pa.Array, chosen: np.ndarray) -> list | pa.Array:
    """The entries of a column (an Arrow array or a list) at the positions ``chosen``."""
    if isinstance(values, pa.Array):
        return values.take(pa.array(chosen))
    return [values[i] for i in chosen.tolist()]
