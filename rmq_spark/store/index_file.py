"""One file of a store's ``index/`` directory: messages by key, as RocketMQ 4.9 keeps them.

The layout is Apache RocketMQ 4.9.7's, byte for byte (big-endian)::

    header   40 bytes          beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64
                               | endPhyOffset i64 | hashSlotCount i32 | indexCount i32
    slots    hash_slots x 4    the newest entry whose key hashes to the slot (0: none)
    entries  max_entries x 20  keyHash i32 | phyOffset i64 | timeDiff i32 | prevIndex i32

Entries are numbered from 1 (``indexCount`` starts at 1; 0 means "none"), and each one
links to the entry its slot pointed at before, so a slot's entries form a chain, newest
first. ``timeDiff`` is the store time in whole seconds after ``beginTimestamp``. The hash
is of ``topic#key`` (:func:`index_key_hashes`); different keys may share it.

The codec (header, hashes, chain links, time differences) is pure functions over arrays;
:class:`IndexFile` is the mmap adapter. Entries are written with ``pwrite``, so a full disk
fails the call; the header and the slots go through the map, so their blocks are allocated
when the file is made or opened for writing (20 MB of the 420 MB default file; the entry
area stays sparse): a write through the map never meets a full disk (SIGBUS). A file holds
its map and descriptor only while in use, under the store's descriptor budget.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import astuple, dataclass, replace
from pathlib import Path

import numpy as np

from rmq_spark.codec.java_hash import java_string_hash, java_string_hashes
from rmq_spark.errors import CorruptDataError, InvalidArgumentError, StoreError
from rmq_spark.store.mapped_file import UNBOUNDED, OpenFiles, ResidentFile, retrying

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size
ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("phys_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE and HEADER_SIZE == 40
#: RocketMQ's maxHashSlotNum and maxIndexNum
DEFAULT_HASH_SLOTS = 5_000_000
DEFAULT_MAX_ENTRIES = 5_000_000 * 4
INT32_MAX = 2**31 - 1


# -- codec -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    #: the number of the next entry (entries are numbered from 1)
    index_count: int = 1


def encode_header(header: IndexHeader) -> bytes:
    """The 40 header bytes.

    >>> encode_header(IndexHeader(index_count=2)).hex()[-16:]
    '0000000000000002'
    """
    return HEADER.pack(*astuple(header))


def decode_header(data: bytes | memoryview | mmap.mmap) -> IndexHeader:
    """The header at the start of ``data``; a count of 0 (a file no key was added to yet,
    as RocketMQ leaves it) reads as 1, like RocketMQ does."""
    header = IndexHeader(*HEADER.unpack_from(data))
    return header if header.index_count > 0 else replace(header, index_count=1)


def file_size(hash_slots: int, max_entries: int) -> int:
    """Bytes of an index file with these sizes (RocketMQ needs it to fit a Java int)."""
    for name, value in (("hash_slots", hash_slots), ("max_entries", max_entries)):
        if not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    size = HEADER_SIZE + hash_slots * SLOT_SIZE + max_entries * ENTRY_SIZE
    if size > INT32_MAX:
        raise InvalidArgumentError(
            f"an index file of {hash_slots} slots and {max_entries} entries is {size} bytes; "
            f"RocketMQ cannot map more than {INT32_MAX}: choose smaller sizes"
        )
    return size


def index_key_hash(key: str) -> int:
    """The hash RocketMQ indexes ``key`` by: |String.hashCode()|, Integer.MIN_VALUE -> 0.

    >>> index_key_hash("polygenelubricants"), index_key_hash("FB")
    (0, 2236)
    """
    h = java_string_hash(key)
    return 0 if h == -(2**31) else abs(h)


def index_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """:func:`index_key_hash` of each key, as an int32 array (one vectorised pass)."""
    hashes = np.abs(java_string_hashes(keys))
    hashes[hashes < 0] = 0  # |Integer.MIN_VALUE| overflows to itself
    return hashes


def chain_links(
    slots: np.ndarray, heads: np.ndarray, first_index: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link entries ``first_index, first_index + 1, ..`` (hashing to ``slots``) into their
    slots' chains: returns each entry's prevIndex, then the slots touched and the entry
    each must point at afterwards (the last of the batch in that slot).

    ``heads`` is what each entry's slot held before the batch; RocketMQ takes it only when
    it names an entry written before this one (0 < head <= this entry's number). Entries
    of one slot inside the batch link to each other: a stable sort by slot puts them side
    by side, in order.

    >>> prev, touched, newest = chain_links(np.array([3, 5, 3]), np.array([2, 0, 2]), 4)
    >>> prev.tolist(), touched.tolist(), newest.tolist()
    ([2, 0, 4], [3, 5], [6, 5])
    """
    n = len(slots)
    numbers = first_index + np.arange(n, dtype=np.int64)
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_slots[1:] != sorted_slots[:-1]
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[1:] = numbers[order[:-1]]
    first = order[starts]
    head = heads[first].astype(np.int64)
    prev_sorted[starts] = np.where((head > 0) & (head <= numbers[first]), head, 0)
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted
    lasts = np.ones(n, dtype=bool)
    lasts[:-1] = starts[1:]
    return prev, sorted_slots[lasts], numbers[order[lasts]]


def time_diffs(timestamps: np.ndarray, begin_timestamp: int, first_in_file: bool) -> np.ndarray:
    """Each entry's timeDiff: whole seconds after the file's begin time, in [0, INT32_MAX],
    0 while the file has no begin time.

    The first entry of a file is measured from the begin time the file was made with (the
    previous file's end, or 0), and becomes the begin time of the entries after it.

    >>> time_diffs(np.array([5_000, 7_999, 9_000]), 4_000, True).tolist()
    [1, 2, 4]
    """
    begins = np.full(len(timestamps), begin_timestamp, dtype=np.int64)
    if first_in_file and len(timestamps):
        begins[1:] = timestamps[0]
    seconds = np.clip((timestamps - begins) // 1000, 0, INT32_MAX)
    return np.where(begins > 0, seconds, 0).astype(np.int32)


def time_matched(header: IndexHeader, begin_ms: int, end_ms: int) -> bool:
    """Whether a query for [begin_ms, end_ms] looks into a file (RocketMQ's overlap test)."""
    first, last = header.begin_timestamp, header.end_timestamp
    return (
        (begin_ms < first and end_ms > last) or first <= begin_ms <= last or first <= end_ms <= last
    )


# -- the file ----------------------------------------------------------------------------


class IndexFile(ResidentFile):
    """One index file. Make one with :meth:`create` or :meth:`open`.

    One writer at a time; lookups may run beside it (they read the header afresh).

    A :class:`~rmq_spark.store.mapped_file.ResidentFile`: opened on use, under the
    store's descriptor budget (``files``), and closed when it has gone cold: its map (the
    header and the slots, and lookups) and its descriptor (``pwrite`` of entries, ``fsync``)
    open apart, each when an operation needs it, and stay pinned while it runs. A file only
    queried holds one descriptor (its map's); the file keys are added to holds two while it
    is in use. Closing loses nothing: what was written through the map is in the page cache
    once it is unmapped, and a later ``fsync`` on a new descriptor writes it out."""

    def __init__(
        self,
        path: Path,
        hash_slots: int,
        max_entries: int,
        read_only: bool,
        files: OpenFiles = UNBOUNDED,
    ) -> None:
        super().__init__(path, file_size(hash_slots, max_entries), files)
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self.read_only = read_only
        self.open_flags = os.O_RDONLY if read_only else os.O_RDWR
        self.map_access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
        self._entries_at = HEADER_SIZE + hash_slots * SLOT_SIZE
        self._dirty = False
        #: takes no more keys: its head could not be given blocks (see _allocate_head)
        self._closed_for_keys = False

    @classmethod
    def create(
        cls,
        path: Path,
        hash_slots: int = DEFAULT_HASH_SLOTS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        files: OpenFiles = UNBOUNDED,
    ) -> IndexFile:
        """A new, empty (sparse) file continuing from a previous file's end offset and time."""
        size = file_size(hash_slots, max_entries)
        index = cls(path, hash_slots, max_entries, read_only=False, files=files)
        with files.lock:
            files.make_room(2)
            try:
                fd = retrying(
                    files,
                    f"create {path}",
                    lambda: os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644),
                )
            except FileExistsError:
                raise StoreError(f"index file {path} already exists; not overwriting it") from None
            try:
                os.ftruncate(fd, size)
                _allocate_head(fd, HEADER_SIZE + hash_slots * SLOT_SIZE)  # ENOSPC: no new file
            except BaseException:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
            index.adopt(fd)
        try:
            # Like RocketMQ: only the inherited positions are written, the counts stay 0.
            with index.using(descriptor=False, mapped=True) as mapped:
                for at, value in ((16, end_phy_offset), (0, end_timestamp)):
                    if value > 0:
                        struct.pack_into(">qq", mapped, at, value, value)
        except BaseException:
            index.destroy()
            raise
        index._dirty = True
        return index

    @classmethod
    def open(
        cls,
        path: Path,
        hash_slots: int = DEFAULT_HASH_SLOTS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        read_only: bool = False,
        files: OpenFiles = UNBOUNDED,
    ) -> IndexFile:
        """An existing file, checked now and opened at its first use. ``read_only`` maps
        it read-only and never writes it (for readers of a store another process owns).
        CorruptDataError names a file whose size does not fit the sizes given, or whose
        header is impossible."""
        size = file_size(hash_slots, max_entries)
        fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual == 0 and not read_only:
                os.ftruncate(fd, size)  # a crash between making the file and sizing it
                actual = size
            if actual != size:
                raise CorruptDataError(
                    f"index file {path} is {actual} bytes, but {hash_slots} hash slots and "
                    f"{max_entries} entries make {size}: open it with the sizes it was made "
                    "with (RocketMQ's maxHashSlotNum and maxIndexNum), or move it away"
                )
            allocated = read_only or _try_allocate_head(fd, HEADER_SIZE + hash_slots * SLOT_SIZE)
            count = decode_header(os.pread(fd, HEADER_SIZE, 0)).index_count
        finally:
            os.close(fd)
        if count > max_entries:
            raise CorruptDataError(
                f"index file {path} claims {count} entries, more than its {max_entries}: "
                "its header is damaged or the file was made with other sizes"
            )
        index = cls(path, hash_slots, max_entries, read_only, files)
        index._closed_for_keys = not allocated
        return index

    def closed_error(self) -> Exception:
        return StoreError(f"index file {self.path} was closed (deleted by retention?)")

    # -- reading and writing ------------------------------------------------------------------

    @property
    def header(self) -> IndexHeader:
        with self.using(descriptor=False, mapped=True) as mapped:
            return decode_header(mapped)

    @property
    def is_full(self) -> bool:
        """No more keys go here: it holds its most, or its head has no blocks."""
        return self._closed_for_keys or self.header.index_count >= self.max_entries

    def add_batch(
        self, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray
    ) -> int:
        """Add entries (index key hashes, non-negative; the records' physical offsets and
        store times in ms) in order, until the file is full; returns how many were added."""
        if self.read_only:
            raise StoreError(f"index file {self.path} was opened read-only; cannot add keys")
        key_hashes = np.asarray(key_hashes, dtype=np.int64)
        if not len(key_hashes) == len(phys_offsets) == len(store_timestamps):
            raise InvalidArgumentError(
                f"{len(key_hashes)} key hashes, {len(phys_offsets)} offsets and "
                f"{len(store_timestamps)} timestamps: give one of each per key"
            )
        if len(key_hashes) and key_hashes.min() < 0:
            raise InvalidArgumentError(
                f"key hash {key_hashes.min()} is negative: pass index_key_hashes(), not "
                "String.hashCode() values"
            )
        with self.using(descriptor=True, mapped=True) as mapped:
            return self._add(mapped, key_hashes, phys_offsets, store_timestamps)

    def _add(
        self,
        mapped: mmap.mmap,
        key_hashes: np.ndarray,
        phys_offsets: np.ndarray,
        store_timestamps: np.ndarray,
    ) -> int:
        header = decode_header(mapped)
        n = max(0, min(len(key_hashes), self.max_entries - header.index_count))
        if n == 0:
            return 0
        hashes = key_hashes[:n]
        phys = np.asarray(phys_offsets[:n], dtype=np.int64)
        stamps = np.asarray(store_timestamps[:n], dtype=np.int64)
        slots = hashes % self.hash_slots
        table = np.frombuffer(mapped, dtype=">i4", count=self.hash_slots, offset=HEADER_SIZE)
        try:
            first_in_file = header.index_count == 1
            prev, touched, newest = chain_links(slots, table[slots], header.index_count)
            entries = np.empty(n, dtype=ENTRY_DTYPE)
            entries["key_hash"] = hashes
            entries["phys_offset"] = phys
            entries["time_diff"] = time_diffs(stamps, header.begin_timestamp, first_in_file)
            entries["prev_index"] = prev
            self._pwrite(entries.tobytes(), self._entries_at + header.index_count * ENTRY_SIZE)
            table[touched] = newest
        finally:
            del table  # a live view would keep the map from closing
        if first_in_file:
            header = replace(header, begin_timestamp=int(stamps[0]), begin_phy_offset=int(phys[0]))
        mapped[:HEADER_SIZE] = encode_header(
            replace(
                header,
                end_timestamp=int(stamps[-1]),
                end_phy_offset=int(phys[-1]),
                hash_slot_count=header.hash_slot_count + int(np.count_nonzero(prev == 0)),
                index_count=header.index_count + n,
            )
        )
        self._dirty = True
        return n

    def lookup(self, key_hash: int, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        """Physical offsets of up to ``limit`` entries with this index key hash stored in
        [begin_ms, end_ms] (at RocketMQ's one-second resolution), newest first.

        The walk follows the slot's chain like RocketMQ and stops at its end, at an entry
        older than ``begin_ms``, or at a link that does not lead to an older entry (a
        damaged file cannot loop). The records may carry another key with the same hash.
        """
        found: list[int] = []
        with self._files.lock:
            if self.closed:  # deleted by retention while a query was on its way
                return found
            using = self.using(descriptor=False, mapped=True)
            mapped = using.__enter__()  # pinned: retention waits for the lock, not for this
        try:
            self._lookup(mapped, key_hash, begin_ms, end_ms, limit, found)
        finally:
            using.__exit__(None, None, None)
        return found

    def _lookup(
        self, mapped: mmap.mmap, key_hash: int, begin_ms: int, end_ms: int, limit: int,
        found: list[int],
    ) -> None:  # fmt: skip
        header = decode_header(mapped)
        count = header.index_count
        at = self._entries_at
        try:
            slot_at = HEADER_SIZE + (key_hash % self.hash_slots) * SLOT_SIZE
            (number,) = struct.unpack_from(">i", mapped, slot_at)
            if not 0 < number < count or count > self.max_entries:
                return
            while len(found) < limit:
                hash_read, phys, diff, prev = ENTRY.unpack_from(mapped, at + number * ENTRY_SIZE)
                if diff < 0:
                    break
                stored = header.begin_timestamp + diff * 1000
                if hash_read == key_hash and begin_ms <= stored <= end_ms:
                    found.append(phys)
                if not 0 < prev < number or stored < begin_ms:
                    break
                number = prev
        except (struct.error, ValueError) as exc:
            raise CorruptDataError(f"index file {self.path} cannot be read: {exc}") from None

    def flush(self) -> None:
        """Write the header in full (RocketMQ's flush does), then msync and fsync."""
        if not self._dirty or self.read_only or self.closed:
            return
        with self.using(descriptor=True, mapped=True) as mapped:
            mapped[:HEADER_SIZE] = encode_header(decode_header(mapped))
            mapped.flush()
            os.fsync(self.fd)
        self._dirty = False

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def _pwrite(self, data: bytes, pos: int) -> None:
        """Write at ``pos`` with the descriptor (the caller has it open and pinned)."""
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, pos)
            view, pos = view[written:], pos + written


def _allocate_head(fd: int, size: int) -> None:
    """Give the header and the slots their blocks before any is written through the map:
    a write through a map to a page without a block on a full disk kills the process
    (SIGBUS), where a failed allocation here is an error the caller handles (the index
    waits for space). Entries are written with ``pwrite``, so they stay sparse."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _try_allocate_head(fd: int, size: int) -> bool:
    """:func:`_allocate_head` for a file made earlier (RocketMQ makes them sparse): False
    when the disk has no room for it, so no key is written into it."""
    try:
        _allocate_head(fd, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return False
        raise
    return True
