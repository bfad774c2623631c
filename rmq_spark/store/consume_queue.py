"""One consume queue: the index of one (topic, queue id) into the commit log.

Files live at ``consumequeue/{topic}/{queueId}/{20-digit start byte}``; entry N of the queue
is at byte N * 20. The queue is derived data: recovery rebuilds it from the commit log.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rmq_spark.codec.consume_queue import ENTRY_SIZE, decode_entries, encode_entries
from rmq_spark.store.mapped_file import UNBOUNDED, MappedFile, OpenFiles, file_name, fsync_dir

#: how much of a file's written tail is read at a time when looking for its last entry
_TAIL_CHUNK = 64 * 1024


def last_written(sizes: np.ndarray) -> int:
    """The index of the last written slot among entries whose size fields are ``sizes``
    (a written slot always has a non-zero size), or -1 when none is.

    >>> last_written(np.array([5, 5, 0, 0])), last_written(np.array([0, 0]))
    (1, -1)
    """
    written = np.flatnonzero(sizes)
    return int(written[-1]) if len(written) else -1


class ConsumeQueue:
    def __init__(
        self,
        directory: Path,
        topic: str,
        queue_id: int,
        entries_per_file: int,
        files: OpenFiles = UNBOUNDED,
    ):
        self.directory = directory
        self._files = files
        self.topic = topic
        self.queue_id = queue_id
        self.file_bytes = entries_per_file * ENTRY_SIZE
        # Readers take no lock: writers replace this (starts, files) pair as a whole.
        self._index: tuple[list[int], list[MappedFile]] = ([], [])
        #: next queue offset to write == number of entries (RocketMQ's max offset)
        self.max_offset = 0
        #: first readable queue offset (moves up when retention deletes the commit log)
        self.min_offset = 0
        #: (physical offset, size) of the last entry, as found when the queue was opened
        #: (None when it is empty, or changed since): recovery checks it without a read
        self.opened_last: tuple[int, int] | None = None
        if directory.exists():
            paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
            # A file shorter than the others was left by a crash while it was created or
            # truncated; its missing tail is unwritten slots (such a file is opened now to
            # extend it, the others at their first use).
            self._publish([self._existing(p, files) for p in paths])
        self._load_positions()

    def _existing(self, path: Path, files: OpenFiles) -> MappedFile:
        size = path.stat().st_size
        return MappedFile(
            path,
            int(path.name),
            max(size, self.file_bytes),
            create=False,
            grow=size < self.file_bytes,
            files=files,
        )

    def _publish(self, files: list[MappedFile]) -> None:
        self._index = ([f.start_offset for f in files], files)

    @property
    def files(self) -> list[MappedFile]:
        return self._index[1]

    def _load_positions(self) -> None:
        """Find the last written entry; written slots always have a non-zero size."""
        self.max_offset = self.min_offset = 0
        if not self.files:
            return
        self.min_offset = self.files[0].start_offset // ENTRY_SIZE
        for seg in reversed(self.files):
            end, last = self._written_end(seg)
            if end:
                seg.write_pos = seg.flushed_pos = end
                self.max_offset = (seg.start_offset + seg.write_pos) // ENTRY_SIZE
                self.opened_last = last
                break
        for seg in self.files:
            if seg.start_offset + seg.size <= self.max_offset * ENTRY_SIZE:
                seg.write_pos = seg.flushed_pos = seg.size

    @staticmethod
    def _written_end(seg: MappedFile) -> tuple[int, tuple[int, int] | None]:
        """Where the written entries of ``seg`` end (relative bytes), 0 when none is, and
        the last one's (physical offset, size). The file system tells where the last
        written block ends (the unwritten tail is a hole): only the tail before it is read,
        backwards in chunks, with ``pread`` (not the map: see MappedFile.read_copy)."""
        stop = seg.data_end()
        stop -= stop % ENTRY_SIZE
        while stop > 0:
            start = max(0, stop - _TAIL_CHUNK + _TAIL_CHUNK % ENTRY_SIZE)
            data = seg.read_copy(start, stop)
            sizes = np.frombuffer(data, dtype=">i4").reshape(-1, 5)[:, 2]
            last = last_written(sizes)
            if last >= 0:
                entry = decode_entries(data[last * ENTRY_SIZE : (last + 1) * ENTRY_SIZE])[0]
                return start + (last + 1) * ENTRY_SIZE, (
                    int(entry["physical_offset"]),
                    int(entry["size"]),
                )
            stop = start
        return 0, None

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        first_offset: int,
        physical_offsets: npt.ArrayLike,
        sizes: npt.ArrayLike,
        tag_codes: npt.ArrayLike,
    ) -> None:
        """Write entries for queue offsets ``first_offset ..`` (overwriting is allowed)."""
        data = encode_entries(physical_offsets, sizes, tag_codes)
        pos = first_offset * ENTRY_SIZE
        end = pos + len(data)
        while pos < end:
            seg = self._file_for_write(pos)
            rel = pos - seg.start_offset
            take = min(end - pos, seg.size - rel)
            chunk_start = pos - first_offset * ENTRY_SIZE
            seg.write_at(rel, memoryview(data)[chunk_start : chunk_start + take])
            pos += take
        self.max_offset = max(self.max_offset, end // ENTRY_SIZE)
        self.opened_last = None

    def open_for_write(self, first_offset: int) -> None:
        """Make sure the file that entry ``first_offset`` goes to exists and is open now
        (ResourceExhaustedError when the process has no descriptor left for it)."""
        self._file_for_write(first_offset * ENTRY_SIZE).open()

    def _file_for_write(self, pos: int) -> MappedFile:
        start = pos - pos % self.file_bytes
        starts, files = self._index
        i = bisect.bisect_left(starts, start)
        if i < len(files) and starts[i] == start:
            return files[i]
        self.directory.mkdir(parents=True, exist_ok=True)
        seg = MappedFile(
            self.directory / file_name(start),
            start,
            self.file_bytes,
            create=True,
            files=self._files,
        )
        fsync_dir(self.directory, self._files)
        self._publish([*files[:i], seg, *files[i:]])
        if len(self.files) == 1:
            self.min_offset = start // ENTRY_SIZE
        return seg

    def truncate(self, max_offset: int, *, erase_beyond: bool = False) -> None:
        """Drop entries at and after ``max_offset`` (recovery of a torn commit log).

        ``erase_beyond`` also erases what lies past the current end: entries a failed write
        left there would otherwise be taken for written ones when the queue is reopened.
        """
        if max_offset >= self.max_offset and not erase_beyond:
            return
        self.opened_last = None
        cut = max_offset * ENTRY_SIZE
        while self.files and self.files[-1].start_offset >= cut:
            doomed = self.files[-1]
            self._publish(self.files[:-1])
            doomed.destroy()
        if self.files:
            last = self.files[-1]
            last.zero_from(cut - last.start_offset)
            last.write_pos = cut - last.start_offset
        self.max_offset = max_offset
        self.min_offset = min(self.min_offset, max_offset)

    # -- reading ---------------------------------------------------------------------------

    def entries(self, start: int, end: int) -> np.ndarray:
        """Entries for queue offsets [start, end) clipped to what exists (native dtype)."""
        start = max(start, self.min_offset)
        end = min(end, self.max_offset)
        if start >= end:
            return decode_entries(b"")
        parts = []
        pos, stop = start * ENTRY_SIZE, end * ENTRY_SIZE
        starts, files = self._index
        while pos < stop:
            i = bisect.bisect_right(starts, pos) - 1
            seg = files[i]
            rel = pos - seg.start_offset
            take = min(stop - pos, seg.size - rel)
            # pread, not the map: the entries are copied as they are decoded anyway, and a
            # file read this way holds one descriptor even while it is written
            parts.append(decode_entries(seg.read_copy(rel, rel + take)))
            pos += take
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        found = self.entries(offset, offset + 1)
        if len(found) == 0:
            return None
        e = found[0]
        return int(e["physical_offset"]), int(e["size"]), int(e["tag_code"])

    # -- flush and retention ----------------------------------------------------------------

    def flush(self) -> None:
        for seg in self.files:
            if seg.write_pos > seg.flushed_pos:
                seg.flush()

    def drop_below_physical(self, commitlog_min: int) -> None:
        """Forget entries pointing below the commit log's new minimum (after retention)."""
        if self.max_offset <= self.min_offset or commitlog_min <= 0:
            return  # nothing was ever deleted from the commit log: no read needed
        head = self.entry(self.min_offset)
        if head is not None and head[0] >= commitlog_min:
            return
        # Whole files whose last entry points below the minimum can go.
        while len(self.files) > 1:
            first = self.files[0]
            last_entry = (first.start_offset + first.size) // ENTRY_SIZE - 1
            e = self.entry(last_entry)
            if e is None or e[0] >= commitlog_min:
                break
            self._publish(self.files[1:])
            self.min_offset = self.files[0].start_offset // ENTRY_SIZE
            first.destroy()
        # Within the first file, binary search the first entry still in the commit log.
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= commitlog_min:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo

    def close(self) -> None:
        for seg in self.files:
            seg.close()

    def destroy(self) -> None:
        files = self.files
        self._publish([])
        for seg in files:
            seg.destroy()
