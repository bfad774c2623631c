"""A read-only view of a store directory, with no broker: a backup, the disk of a dead broker,
or (``allow_live``) the store of a running one.

Both kinds of directory are read, rocketlite's and Apache RocketMQ 4.9's (the same commit-log
and consume-queue formats). Nothing is ever written: commit-log segments are mapped with
``ACCESS_READ``, consume-queue files are read with ``pread``, no file is created, and the
only lock touched is a probe that acquires nothing a broker could wait for
(:func:`~rmq_spark.store.offline_meta.lock_holder`).

Descriptors do not grow with the store: a consume-queue file is open only for its ``pread``,
a segment holds one descriptor while it is open (its own, or its map's), and at most
:data:`MAX_OPEN_SEGMENTS` are (the least recently used one closes for the next; a buffer
:meth:`StoreView.read_records` returned keeps its map until the buffer is dropped).

The view is a snapshot taken by :meth:`StoreView.open`: each queue's last entry, then the
end of the commit log's chain of records (found by walking it from the furthest record a
consume queue or the checkpoint points at). A queue's range holds only entries whose
record lies within that end and at or above the commit log's first offset, as RocketMQ
serves them; what a live broker writes later is not seen (open the view again).

>>> with StoreView.open("/data/store") as view:                          # doctest: +SKIP
...     lo, hi = view.queue_range("orders", 0)
...     records = view.read_records("orders", 0, lo, hi, max_bytes=16 << 20)
...     batch = decode_records(records.buffer, sizes=records.sizes)     # arrow_decode
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.codec.consume_queue import ENTRY_SIZE, decode_entries
from rmq_spark.errors import CorruptDataError, InvalidArgumentError, NotFoundError
from rmq_spark.store import offline_meta
from rmq_spark.store.checkpoint import StoreCheckpoints, read_store_checkpoints
from rmq_spark.store.offline_meta import StoredTopic, StoreGeometry
from rmq_spark.store.recovery_scan import walk
from rmq_spark.store.topics import TopicConfig

#: the size RocketMQ gives the slots it fills before a queue's first entry (fillPreBlank)
BLANK_ENTRY_SIZE = 0x7FFFFFFF
_MIN_RECORD = rec.FIXED_WITHOUT_HOSTS + 2 * rec.IPV4_HOST
_HEAD = struct.Struct(">iI")
#: commit-log segments a view keeps open (one descriptor each) at most
MAX_OPEN_SEGMENTS = 32


@dataclass(frozen=True)
class Segment:
    """One commit-log file: ``written_bytes`` of its ``file_bytes`` hold records (a sealed
    segment counts whole, its end filler included)."""

    name: str
    start_offset: int
    file_bytes: int
    written_bytes: int


@dataclass(frozen=True)
class Records:
    """Records of consecutive queue offsets, back to back in ``buffer`` (a slice of a
    segment's map, or a copy): ``decode_records(buffer, sizes=sizes)`` decodes them."""

    buffer: memoryview
    sizes: np.ndarray  # int64, one per record

    @property
    def count(self) -> int:
        return len(self.sizes)


class StoreView:
    """A read-only snapshot of a store directory; create it with :meth:`open`."""

    def __init__(self, root: Path, holder: str | None) -> None:
        self.root = root
        #: who holds the directory's lock (a running broker), or None
        self.lock_holder = holder
        self._open_segments = _OpenSegments(MAX_OPEN_SEGMENTS)
        self._segments: list[_Segment] = []
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._log_end = 0

    @classmethod
    def open(cls, store_dir: str | os.PathLike[str], *, allow_live: bool = False) -> StoreView:
        """Open the store at ``store_dir``. A directory a running broker holds is refused
        (StoreLockedError) unless ``allow_live``; NotFoundError when it does not exist,
        InvalidArgumentError when it is not a store (no ``commitlog/``)."""
        root = Path(store_dir)
        view = cls(root, offline_meta.check_store_dir(root, allow_live=allow_live))
        try:
            view._load()
        except BaseException:
            view.close()
            raise
        return view

    def _load(self) -> None:
        self._segments = _list_segments(self.root / "commitlog", self._open_segments)
        for topic_dir in _subdirs(self.root / "consumequeue"):
            for queue_dir in _subdirs(topic_dir):
                if queue_dir.name.isdigit():
                    self._queues[(topic_dir.name, int(queue_dir.name))] = _Queue(queue_dir)
        # Queues first: each entry they hold points at a record written before it, so the
        # end found next covers all of them, even while a live broker appends.
        self._log_end = self._find_log_end()

    def close(self) -> None:
        """Unmap and close the segments; buffers read_records returned stay valid (a map
        still in use is released when the last of them is dropped)."""
        for seg in self._segments:
            seg.close()

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the directory ---------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """A running broker holds the directory (the view was opened with allow_live)."""
        return self.lock_holder is not None

    @property
    def clean_shutdown(self) -> bool:
        """No ``abort`` file: the last broker closed the store (or it is new)."""
        return not (self.root / "abort").exists()

    @cached_property
    def geometry(self) -> StoreGeometry:
        return offline_meta.read_geometry(self.root)

    @cached_property
    def kind(self) -> tuple[offline_meta.StoreKind, list[str]]:
        """("rocketlite" | "apache-rocketmq" | "unknown", the files that tell)."""
        return offline_meta.store_kind(self.root, self.checkpoints())

    def checkpoints(self) -> StoreCheckpoints:
        """RocketMQ's ``checkpoint`` and rocketlite's own (None where absent)."""
        return read_store_checkpoints(self.root)

    def consumer_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """``{group: {(topic, queue id): next offset to consume}}``."""
        return offline_meta.offsets_by_group(self.root / "config")

    def delay_offsets(self) -> dict[int, int]:
        """``{delay level: next offset of its schedule queue (level - 1) to deliver}``."""
        return offline_meta.read_delay_offsets(self.root / "config")

    def subscription_groups(self) -> list[str]:
        """Groups of RocketMQ's ``config/subscriptionGroup.json`` (none when absent)."""
        return offline_meta.read_subscription_groups(self.root / "config")

    # -- topics and queues -----------------------------------------------------------------

    def topics(self) -> dict[str, StoredTopic]:
        """Every topic, by name: topics.json's, and those found only as directories."""
        found = {name: StoredTopic.of(c) for name, c in self._configured_topics.items()}
        for topic, _ in self._queues:
            found.setdefault(topic, StoredTopic(topic))
        return dict(sorted(found.items()))

    @cached_property
    def _configured_topics(self) -> dict[str, TopicConfig]:
        return offline_meta.read_topics(self.root / "config")

    def queues(self, topic: str) -> list[int]:
        """The topic's queue ids: its configured ones and any holding a consume queue."""
        config = self._configured_topics.get(topic)
        ids = {q for t, q in self._queues if t == topic}
        if config is None and not ids:
            raise NotFoundError(f"topic {topic!r} is not in the store {self.root}")
        if config is not None:
            ids.update(range(max(config.read_queue_nums, config.write_queue_nums)))
        return sorted(ids)

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets of the entries that can be read; max is exclusive."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            if topic not in self._configured_topics:
                raise NotFoundError(f"topic {topic!r} is not in the store {self.root}")
            return 0, 0
        if queue.range is None:
            queue.range = self._valid_range(queue)
        return queue.range

    def entries(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """Consume-queue entries of offsets [start, end) clipped to :meth:`queue_range`:
        a structured array of ``physical_offset`` (i8), ``size`` (i4), ``tag_code`` (i8)."""
        lo, hi = self.queue_range(topic, queue_id)
        first, last = max(start, lo), min(end, hi)
        if first >= last:
            return decode_entries(b"")
        return decode_entries(self._queues[(topic, queue_id)].read(first, last))

    def read_records(
        self, topic: str, queue_id: int, start: int, end: int, max_bytes: int
    ) -> Records:
        """The records of queue offsets ``start ..`` (before ``end``, clipped to the
        queue's max) back to back, as many as fit in ``max_bytes`` (at least one). A slice
        of the segment's map when they lie back to back in one segment, else one copy.
        NotFoundError when ``start`` is below the queue's min (deleted)."""
        lo, _ = self.queue_range(topic, queue_id)
        if start < lo:
            raise NotFoundError(
                f"queue {queue_id} of topic {topic!r} starts at offset {lo} (older records "
                f"were deleted); offset {start} cannot be read, start at {lo}"
            )
        if max_bytes < 1:
            raise InvalidArgumentError(f"max_bytes={max_bytes!r} must be at least 1")
        found = self._entries_for(topic, queue_id, start, end, max_bytes)
        sizes = found["size"].astype(np.int64)
        if len(sizes) and int(sizes.min()) < _MIN_RECORD:
            raise CorruptDataError(
                f"queue {queue_id} of topic {topic!r} has an entry of {int(sizes.min())} bytes "
                f"between offsets {start} and {start + len(sizes)}; its consume queue is damaged"
            )
        keep = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
        sizes = sizes[:keep]
        buffer = self._gather(found["physical_offset"][:keep], sizes)
        return Records(buffer, sizes)

    def _entries_for(
        self, topic: str, queue_id: int, start: int, end: int, max_bytes: int
    ) -> np.ndarray:
        """Entries from ``start`` until their records pass ``max_bytes``: read in growing
        steps, so a small budget reads few entries and a large one few times."""
        end = min(end, self.queue_range(topic, queue_id)[1])
        parts, total, step = [], 0, 256
        while start < end and total <= max_bytes:
            parts.append(self.entries(topic, queue_id, start, min(end, start + step)))
            total += int(parts[-1]["size"].sum(dtype=np.int64))
            start, step = start + len(parts[-1]), step * 4
        return np.concatenate(parts) if parts else decode_entries(b"")

    def _valid_range(self, queue: _Queue) -> tuple[int, int]:
        """Entries grow with the physical offset: the ones whose record was written end
        the range, those below the commit log's first offset (deleted) start it."""
        first_held = self.commitlog_range()[0]

        def fits(i: int) -> bool:
            phys, size = queue.position(i)
            return 0 < size != BLANK_ENTRY_SIZE and phys + size <= self._log_end

        def kept(i: int) -> bool:
            phys, size = queue.position(i)
            return 0 < size != BLANK_ENTRY_SIZE and phys >= first_held

        lo, hi = queue.first, queue.end
        if hi > lo and not fits(hi - 1):
            hi = _first_where(lo, hi - 1, lambda i: not fits(i))
        if hi > lo and not kept(lo):
            lo = _first_where(lo + 1, hi, kept)
        return lo, hi

    # -- the commit log --------------------------------------------------------------------

    def commitlog_range(self) -> tuple[int, int]:
        """(first physical offset held, end of the written records)."""
        return (self._segments[0].start if self._segments else 0), self._log_end

    def segments(self) -> list[Segment]:
        """The commit-log files in offset order."""
        return [
            Segment(s.path.name, s.start, s.size, max(0, min(s.size, self._log_end - s.start)))
            for s in self._segments
        ]

    def _find_log_end(self) -> int:
        """Where the chain of records ends, walked from the furthest known record in the
        last segment holding any (RocketMQ makes the next segment before it is needed)."""
        with_data = (s for s in reversed(self._segments) if any(s.pread(0, _HEAD.size)))
        seg = next(with_data, None)
        if seg is None:
            return self._segments[0].start if self._segments else 0
        starts = [seg.start]
        cp = self.checkpoints().rocketlite
        if cp is not None and seg.start <= cp.safe_offset < seg.end:
            starts.append(cp.safe_offset)
        for queue in self._queues.values():
            if queue.end > queue.first:
                phys, size = queue.position(queue.end - 1)
                if seg.start <= phys < seg.end and self._record_at(seg, phys, size):
                    starts.append(phys + size)
        with memoryview(seg.map()) as view:
            _, _, stop, reason = walk(view, max(starts) - seg.start, seg.size)
        return seg.end if reason == "blank" else seg.start + stop

    @staticmethod
    def _record_at(seg: _Segment, phys: int, size: int) -> bool:
        if phys + size > seg.end or size < _MIN_RECORD:
            return False
        total, magic = _HEAD.unpack(seg.pread(phys - seg.start, _HEAD.size))
        return total == size and magic in (rec.MAGIC_V1, rec.MAGIC_V2)

    def record_at(self, physical_offset: int) -> bytes | None:
        """The whole record starting at ``physical_offset``, or None when none starts
        there within the log's written part."""
        if not self.commitlog_range()[0] <= physical_offset < self._log_end:
            return None
        starts = [s.start for s in self._segments]
        seg = self._segments[bisect.bisect_right(starts, physical_offset) - 1]
        head = seg.pread(physical_offset - seg.start, _HEAD.size)
        if len(head) < _HEAD.size:
            return None
        size, _ = _HEAD.unpack(head)
        if not self._record_at(seg, physical_offset, size):
            return None
        return seg.pread(physical_offset - seg.start, size)

    def key_offsets(self, topic: str, key: str, max_count: int) -> list[int]:
        """Physical offsets of the records the store's message index names for ``key``
        in ``topic`` (newest first; hash collisions included: check the records), read
        only; empty when the store keeps no index."""
        from rmq_spark.store.index import MessageIndex

        sizes = offline_meta.index_sizes(self.root)
        if not (self.root / "index").is_dir():
            return []
        with MessageIndex.open(self.root / "index", *sizes, read_only=True) as index:
            return index.query(topic, key, max_count)

    def _gather(self, phys: np.ndarray, sizes: np.ndarray) -> memoryview:
        if not len(phys):
            return memoryview(b"")
        starts = np.asarray([s.start for s in self._segments], dtype=np.int64)
        which = np.searchsorted(starts, phys, side="right") - 1
        ends = phys + sizes
        limits = np.asarray([s.end for s in self._segments], dtype=np.int64)
        if which.min() < 0 or bool((ends > limits[which]).any()):
            bad = int(np.flatnonzero((which < 0) | (ends > limits[which]))[0])
            raise CorruptDataError(
                f"a consume-queue entry points at a record of {int(sizes[bad])} bytes at "
                f"physical offset {int(phys[bad])}, outside the commit log's segments"
            )
        # Runs of records back to back in one segment: one run is a slice of the segment's
        # map (no copy); more are joined into one buffer (one copy).
        cut = (phys[1:] != ends[:-1]) | (which[1:] != which[:-1])
        first = np.concatenate(([0], np.flatnonzero(cut) + 1))
        last = np.concatenate((first[1:], [len(phys)])) - 1
        run_seg = which[first]
        run_start = (phys[first] - starts[run_seg]).tolist()
        run_end = (ends[last] - starts[run_seg]).tolist()
        maps = {w: memoryview(self._segments[w].map()) for w in set(run_seg.tolist())}
        parts = [maps[w][a:b] for w, a, b in zip(run_seg.tolist(), run_start, run_end, strict=True)]
        return parts[0] if len(parts) == 1 else memoryview(b"".join(parts))


class _OpenSegments:
    """The segments of one view that hold a descriptor, least recently used first, at most
    ``limit`` of them: the least recently used closes when another opens."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[int, _Segment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def used(self, seg: _Segment) -> None:
        self._open[id(seg)] = seg
        self._open.move_to_end(id(seg))
        while len(self._open) > self.limit:
            _, oldest = self._open.popitem(last=False)
            oldest.close()

    def forget(self, seg: _Segment) -> None:
        self._open.pop(id(seg), None)


class _Segment:
    """One commit-log file, opened on first use: a descriptor for ``pread`` until it is
    mapped, then only the map's (the descriptor it was mapped from is closed)."""

    def __init__(self, path: Path, size: int, opened: _OpenSegments) -> None:
        self.path = path
        self.start = int(path.name)
        self.size = size
        self._opened = opened
        self._fd = -1
        self._map: mmap.mmap | None = None

    @property
    def end(self) -> int:
        return self.start + self.size

    def pread(self, pos: int, size: int) -> bytes:
        if self._map is not None:
            # read through a descriptor, not the map: safe on holes (as MappedFile.read_copy)
            fd = _open_read_only(self.path)
            try:
                return os.pread(fd, size, pos)
            finally:
                os.close(fd)
        if self._fd < 0:
            self._fd = _open_read_only(self.path)
        self._opened.used(self)
        return os.pread(self._fd, size, pos)

    def map(self) -> mmap.mmap:
        if self._map is None:
            fd, self._fd = (self._fd if self._fd >= 0 else _open_read_only(self.path)), -1
            try:
                self._map = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)  # the map keeps a descriptor of its own
        self._opened.used(self)
        return self._map

    def close(self) -> None:
        self._opened.forget(self)
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a Records buffer still points into it: unmapped when that is dropped
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Queue:
    """One consume queue's files, read with pread; ``first``/``end``: its entries at open
    (from the first file's start to the last written slot)."""

    def __init__(self, directory: Path) -> None:
        self.paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
        self.starts = [int(p.name) for p in self.paths]
        self.range: tuple[int, int] | None = None
        self.first = self.starts[0] // ENTRY_SIZE if self.paths else 0
        self.end = self._written_end()

    def _written_end(self) -> int:
        """One past the last written slot (written slots have a non-zero size, and are
        written in order), found by bisection over the last file holding any."""
        for path, start in zip(reversed(self.paths), reversed(self.starts), strict=True):
            slots = path.stat().st_size // ENTRY_SIZE

            def unwritten(i: int, p: Path = path) -> bool:
                return self._size_at(p, i) == 0

            used = _first_where(0, slots, unwritten)
            if used:
                return (start + used * ENTRY_SIZE) // ENTRY_SIZE
        return self.first

    @staticmethod
    def _size_at(path: Path, slot: int) -> int:
        data = _pread(path, 4, slot * ENTRY_SIZE + 8)
        return struct.unpack(">i", data)[0] if len(data) == 4 else 0

    def position(self, offset: int) -> tuple[int, int]:
        """(physical offset, size) of the entry at queue ``offset``."""
        phys, size = struct.unpack_from(">qi", self.read(offset, offset + 1))
        return phys, size

    def read(self, first: int, last: int) -> bytes:
        """The raw entries of queue offsets [first, last); a file cut short reads as zeros."""
        pos, stop = first * ENTRY_SIZE, last * ENTRY_SIZE
        parts = []
        while pos < stop:
            i = bisect.bisect_right(self.starts, pos) - 1
            upto = self.starts[i + 1] if i + 1 < len(self.starts) else stop
            want = min(stop, upto) - pos
            data = _pread(self.paths[i], want, pos - self.starts[i]) if i >= 0 else b""
            parts.append(data.ljust(want, b"\0"))
            pos += want
        return b"".join(parts)


def _open_read_only(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise NotFoundError(
            f"{path} was deleted after the view opened (retention of a live broker); open "
            "the view again"
        ) from None


def _pread(path: Path, size: int, pos: int) -> bytes:
    fd = _open_read_only(path)
    try:
        return os.pread(fd, size, pos)
    finally:
        os.close(fd)


def _first_where(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The first i in [lo, hi) where ``pred`` holds (it holds from there on), else hi."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _list_segments(directory: Path, opened: _OpenSegments) -> list[_Segment]:
    segments = [
        _Segment(p, p.stat().st_size, opened)
        for p in sorted(directory.iterdir(), key=lambda p: p.name)
        if p.name.isdigit()
    ]
    for before, after in itertools.pairwise(segments):
        if before.end != after.start:
            raise CorruptDataError(
                f"commit-log segments {before.path.name} ({before.size} bytes) and "
                f"{after.path.name} in {directory} are not contiguous: a segment is missing "
                "or cut short; copy the whole directory again"
            )
    return segments


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []
