"""Reads over one consume queue and the commit log: the pull rule, records by physical offset,
store times, the bytes of a queue range, and records by key.

:class:`~rmq_spark.store.message_store.MessageStore` finds the queue (or None for a queue
never written) and hands it here with its commit log. Nothing here takes a lock: reads
are lock-free, as the store's are. The choices a read makes are pure functions
(:func:`illegal_offset_next`, :func:`pick_entries`, :func:`first_offset_at`).

>>> illegal_offset_next(offset=3, lo=10, hi=20)  # deleted by retention: go to the oldest
10
>>> illegal_offset_next(offset=25, lo=10, hi=20)  # past the end: the end
20
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.errors import NotFoundError
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.index_builder import matching_key
from rmq_spark.store.sizes import MAX_SCANNED_ENTRIES, RangeSize, measure
from rmq_spark.structs import PullStatus

#: how many consume-queue entries one filtered read may scan (RocketMQ's 16000)
MAX_FILTER_SCAN = 16_000
DEFAULT_MAX_BYTES = 4 << 20
#: how many consume-queue entries a read by selector scans at least (RocketMQ's 16,000
#: bytes of consume queue), more when it asks for more messages
SELECT_SCAN = 800
#: records a selected read copies out of the commit log at a time to look at them
SELECT_CHUNK_BYTES = 4 << 20
#: the most record bytes one read by selector looks at (the rest waits for the next read)
SELECT_MAX_BYTES = 32 << 20

#: picks records by their content: (records back to back, starts, sizes) -> mask
RecordSelector = Callable[[bytes, np.ndarray, np.ndarray], np.ndarray]


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


# -- the pull rule -------------------------------------------------------------------------


def illegal_offset_next(offset: int, lo: int, hi: int) -> int:
    """Where a reader of ``offset``, outside a queue's ``[lo, hi]``, goes next. Below the
    min (retention deleted it): the oldest. Past the end: RocketMQ's rule, the min when
    nothing was ever deleted (the queue was recreated, or the offset never existed: reading
    again beats skipping), else the end."""
    return lo if offset < lo or lo == 0 else hi


def pick_entries(
    entry_tag_codes: np.ndarray,
    entry_sizes: np.ndarray,
    max_count: int,
    max_bytes: int,
    tag_codes: Sequence[int] | None,
) -> tuple[np.ndarray, bool]:
    """Which of the scanned entries a read returns, and whether it stopped at a limit.

    Entries whose tag code is in ``tag_codes`` (all when None), at most ``max_count``, and
    as many as fit in ``max_bytes`` but at least one. The read is limited when it returns
    fewer than matched or exactly ``max_count``: the next read starts after its last entry
    (otherwise after everything scanned).

    >>> pick_entries(np.array([1, 2, 1]), np.array([10, 10, 10]), 32, 100, [1])
    (array([0, 2]), False)
    >>> pick_entries(np.array([1, 2, 1]), np.array([60, 60, 60]), 32, 100, None)
    (array([0]), True)
    """
    if tag_codes is None:
        picked = np.arange(min(len(entry_tag_codes), max_count))
    else:
        wanted = np.asarray(list(tag_codes), dtype=np.int64)
        picked = np.flatnonzero(np.isin(entry_tag_codes, wanted))[:max_count]
    if len(picked) == 0:
        return picked, False
    sizes = entry_sizes[picked].astype(np.int64)
    keep = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
    limited = keep < len(picked) or len(picked) == max_count
    return picked[:keep], limited


def get_messages(
    cq: ConsumeQueue | None,
    commitlog: CommitLog,
    offset: int,
    max_count: int,
    max_bytes: int,
    tag_codes: Sequence[int] | None,
    select: RecordSelector | None = None,
) -> GetResult:
    """Read up to ``max_count`` messages (and about ``max_bytes``) of ``cq`` (None: a
    queue never written) from ``offset``; see
    :meth:`~rmq_spark.store.message_store.MessageStore.get_messages`."""
    lo, hi = (cq.min_offset, cq.max_offset) if cq else (0, 0)
    if offset < lo or offset > hi:
        return GetResult(PullStatus.OFFSET_ILLEGAL, illegal_offset_next(offset, lo, hi), lo, hi)
    if offset == hi:
        return GetResult(PullStatus.NO_NEW_MSG, offset, lo, hi)
    assert cq is not None
    if select is not None:
        return get_selected(cq, commitlog, offset, max_count, max_bytes, tag_codes, select)
    scan = max_count if tag_codes is None else max(max_count, MAX_FILTER_SCAN)
    scan_end = min(hi, offset + scan)
    entries = cq.entries(offset, scan_end)
    picked, limited = pick_entries(
        entries["tag_code"], entries["size"], max_count, max_bytes, tag_codes
    )
    if len(picked) == 0:
        return GetResult(PullStatus.NO_MATCHED_MSG, scan_end, lo, hi)
    sizes = entries["size"][picked].astype(np.int64)
    physical = entries["physical_offset"][picked]
    if physical[0] < commitlog.min_offset:
        # Retention removed these records since the queue's minimum was last moved.
        cq.drop_below_physical(commitlog.min_offset)
        return GetResult(PullStatus.OFFSET_ILLEGAL, cq.min_offset, cq.min_offset, hi)
    data = commitlog.gather(physical, sizes)
    next_offset = offset + int(picked[-1]) + 1 if limited else scan_end
    return GetResult(
        PullStatus.FOUND, next_offset, lo, hi, data, offset + picked.astype(np.int64), sizes
    )


def get_selected(
    cq: ConsumeQueue,
    commitlog: CommitLog,
    offset: int,
    max_count: int,
    max_bytes: int,
    tag_codes: Sequence[int] | None,
    select: RecordSelector,
) -> GetResult:
    """:func:`get_messages` of the records ``select`` picks by their content, among those
    whose tag passes. It scans ``max(max_count, SELECT_SCAN)`` entries and looks at their
    records a few at a time (a first chunk sized by ``max_count``, then doubling, each at
    most :data:`SELECT_CHUNK_BYTES`), stopping at ``max_count`` or ``max_bytes`` returned
    or :data:`SELECT_MAX_BYTES` looked at. The next read starts after the last record
    returned when a limit cut the read short, else after everything looked at."""
    lo, hi = cq.min_offset, cq.max_offset
    scan_end = min(hi, offset + max(max_count, SELECT_SCAN))
    entries = cq.entries(offset, scan_end)
    candidates, _ = pick_entries(
        entries["tag_code"], entries["size"], len(entries), 2**62, tag_codes
    )
    sizes = entries["size"].astype(np.int64)
    physical = entries["physical_offset"]
    if len(candidates) and physical[candidates[0]] < commitlog.min_offset:
        cq.drop_below_physical(commitlog.min_offset)  # retention removed them
        return GetResult(PullStatus.OFFSET_ILLEGAL, cq.min_offset, cq.min_offset, hi)
    kept: list[np.ndarray] = []
    parts: list[bytes] = []
    count = total = looked_at = 0
    limited = False
    looked_to = scan_end  # where the next read starts when no limit cut this one
    for chunk in _chunks(candidates, sizes, SELECT_CHUNK_BYTES, max(64, 2 * max_count)):
        if looked_at >= SELECT_MAX_BYTES:
            looked_to = offset + int(chunk[0])
            break
        data = commitlog.gather(physical[chunk], sizes[chunk])
        looked_at += len(data)
        starts = np.concatenate(([0], np.cumsum(sizes[chunk])[:-1])).astype(np.int64)
        hits = np.flatnonzero(select(data, starts, sizes[chunk]))
        room = max_count - count
        within = total + np.cumsum(sizes[chunk][hits[:room]])
        keep = int(np.searchsorted(within, max_bytes, side="right"))
        keep = max(keep, 1) if count == 0 and len(hits) else keep
        limited = keep < len(hits) or count + keep == max_count
        hits = hits[:keep]
        if len(hits):
            kept.append(chunk[hits])
            parts.append(_take(data, starts, sizes[chunk], hits))
            count += len(hits)
            total += int(sizes[chunk][hits].sum())
        if limited:
            break
    if not count:
        return GetResult(PullStatus.NO_MATCHED_MSG, looked_to, lo, hi)
    picked = np.concatenate(kept)
    next_offset = offset + int(picked[-1]) + 1 if limited else looked_to
    return GetResult(
        PullStatus.FOUND, next_offset, lo, hi, b"".join(parts),
        offset + picked.astype(np.int64), sizes[picked],
    )  # fmt: skip


def _chunks(
    indices: np.ndarray, sizes: np.ndarray, budget: int, first: int
) -> Iterator[np.ndarray]:
    """``indices`` in runs: the first of at most ``first`` records, each next one twice as
    many, every run at most ``budget`` bytes (but at least one record)."""
    at, count = 0, first
    while at < len(indices):
        ends = np.cumsum(sizes[indices[at : at + count]])
        take = max(1, int(np.searchsorted(ends, budget, side="right")))
        yield indices[at : at + take]
        at += take
        count *= 2


def _take(data: bytes, starts: np.ndarray, sizes: np.ndarray, picked: np.ndarray) -> bytes:
    """The records ``picked`` of ``data``, back to back: one slice per run of neighbours."""
    if len(picked) == len(starts):
        return data
    breaks = np.flatnonzero(np.diff(picked) != 1) + 1
    view = memoryview(data)
    return b"".join(
        view[int(starts[run[0]]) : int(starts[run[-1]] + sizes[run[-1]])]
        for run in np.split(picked, breaks)
    )


# -- records by physical offset ------------------------------------------------------------


def read_record(commitlog: CommitLog, physical_offset: int) -> bytes:
    """The raw record starting at ``physical_offset``; NotFound when none starts there."""
    head = commitlog.read(physical_offset, 8)
    if head is None:
        raise NotFoundError(f"no message at physical offset {physical_offset}")
    size, magic = struct.unpack(">iI", head)
    head.release()
    if magic not in (rec.MAGIC_V1, rec.MAGIC_V2) or size <= 0:
        raise NotFoundError(f"no message starts at physical offset {physical_offset}")
    view = commitlog.read(physical_offset, size)
    if view is None:
        raise NotFoundError(f"no message at physical offset {physical_offset}")
    try:
        return bytes(view)
    finally:
        view.release()


def store_timestamp_at(commitlog: CommitLog, physical_offset: int) -> int:
    """The store timestamp in the header of the record at ``physical_offset``."""
    head = commitlog.read(physical_offset, rec.STORE_TIMESTAMP_HEAD)
    if head is None:
        raise NotFoundError(f"no message at physical offset {physical_offset}")
    try:
        stamp = rec.store_timestamp_in(head)
    finally:
        head.release()
    if stamp is None:
        raise NotFoundError(f"no message at physical offset {physical_offset}")
    return stamp


# -- times and sizes of a queue ------------------------------------------------------------


def store_timestamp_of(cq: ConsumeQueue, commitlog: CommitLog, offset: int) -> int | None:
    """The store timestamp of the message at queue ``offset``, None when it has no entry."""
    entry = cq.entry(offset)
    return None if entry is None else store_timestamp_at(commitlog, entry[0])


def first_offset_at(
    lo: int, hi: int, timestamp_of: Callable[[int], int | None], timestamp_ms: int
) -> int:
    """The first offset in ``[lo, hi)`` stored at or after ``timestamp_ms`` (``hi`` if
    none), by binary search: store times grow along a queue. ``timestamp_of(offset)`` is
    an offset's store time, None when it holds no message (taken as late enough).

    >>> first_offset_at(0, 4, [100, 200, 300, 400].__getitem__, 250)
    2
    """
    while lo < hi:
        mid = (lo + hi) // 2
        stored = timestamp_of(mid)
        if stored is None or stored >= timestamp_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def range_size(
    cq: ConsumeQueue | None, start: int, end: int | None, budget_bytes: int | None
) -> RangeSize:
    """Bytes of the records at queue offsets [start, end) of ``cq`` (None: a queue never
    written), clipped to what it holds; see :func:`rmq_spark.store.sizes.measure`."""
    if cq is None:
        return measure(np.zeros(0, np.int64), budget_bytes)
    first = max(start, cq.min_offset)
    last = cq.max_offset if end is None else min(end, cq.max_offset)
    count = max(0, last - first)
    entries = cq.entries(first, first + min(count, MAX_SCANNED_ENTRIES))
    return measure(entries["size"].astype(np.int64), budget_bytes, count)


# -- records by key ------------------------------------------------------------------------


def query_by_key(
    index: MessageIndex,
    commitlog: CommitLog,
    topic: str,
    key: str,
    max_count: int,
    begin_ms: int,
    end_ms: int,
) -> list[bytes]:
    """Raw records the index names for ``topic`` and ``key`` in [begin_ms, end_ms], newest
    first, keeping those that still exist and truly carry the key (the index holds hashes)."""
    found = []
    for physical in index.query(topic, key, max_count, begin_ms, end_ms):
        try:
            raw = read_record(commitlog, physical)
        except NotFoundError:  # deleted by retention, or cut by recovery
            continue
        if matching_key(rec.decode_record(raw, check_crc=False), topic, key):
            found.append(raw)
    return found
