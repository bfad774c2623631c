"""The commit log: every message of every queue, appended to fixed-size segment files.

A batch (one append) never spans two segments. When it does not fit with room to spare for
the 8-byte end marker, the writer fills the rest of the segment with
``[remaining, BLANK_MAGIC]`` and rolls to a new segment named by its start offset, where the
whole batch goes, as RocketMQ writes a batch.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.store import faults
from rmq_spark.store.mapped_file import UNBOUNDED, MappedFile, OpenFiles, file_name, fsync_dir


@dataclass
class WritePlan:
    """Where each record of a batch lands, and where segments must be closed."""

    positions: np.ndarray  # int64 global physical offsets, one per record
    # (record index where a new segment starts, global offset of the blank marker before it)
    rolls: list[tuple[int, int]]


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, files: OpenFiles = UNBOUNDED) -> None:
        self.directory = directory
        self._files = files
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        segments = []
        paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
        for i, path in enumerate(paths):
            size = path.stat().st_size
            # The segment being written may have been left short by a crash while it was
            # created or cut by recovery: it gets its full size back.
            last = i == len(paths) - 1
            if last:
                size = max(size, segment_bytes)
            segments.append(
                MappedFile(
                    path,
                    int(path.name),
                    size,
                    create=False,
                    grow=last,
                    preallocate=True,
                    files=files,
                )
            )
        # Readers take no lock: they read this (starts, segments) pair, which writers
        # replace as a whole, never mutate.
        self._index: tuple[list[int], list[MappedFile]] = ([], [])
        self._publish(segments)
        self._check_continuity()

    def _publish(self, segments: list[MappedFile]) -> None:
        self._index = ([s.start_offset for s in segments], segments)

    @property
    def segments(self) -> list[MappedFile]:
        return self._index[1]

    def _check_continuity(self) -> None:
        for before, after in zip(self.segments, self.segments[1:], strict=False):
            if before.end_offset != after.start_offset:
                raise OSError(
                    f"commit log segments {before.path.name} ({before.size} bytes) and "
                    f"{after.path.name} are not contiguous; the store directory is damaged"
                )

    # -- positions -------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start_offset if self.segments else 0

    @property
    def max_offset(self) -> int:
        """The next physical offset to be written."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.start_offset + last.write_pos

    def set_max_offset(self, offset: int) -> None:
        """Recovery: declare ``offset`` the end of valid data and erase what follows."""
        while self.segments and self.segments[-1].start_offset > offset:
            doomed = self.segments[-1]
            self._publish(self.segments[:-1])
            doomed.destroy()
        if self.segments:
            last = self.segments[-1]
            relative = offset - last.start_offset
            last.zero_from(relative)
            last.write_pos = relative
            last.flushed_pos = min(last.flushed_pos, relative)
        for seg in self.segments[:-1]:
            seg.write_pos = seg.flushed_pos = seg.size

    def segment_for(self, offset: int) -> MappedFile | None:
        starts, segments = self._index
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        seg = segments[i]
        return seg if offset < seg.end_offset else None

    def first_store_timestamp(self, seg: MappedFile) -> int | None:
        """The store timestamp of a segment's first record, None when it starts with none."""
        view = seg.view()
        try:
            return rec.store_timestamp_in(view[: rec.STORE_TIMESTAMP_HEAD])
        finally:
            view.release()

    # -- writing ---------------------------------------------------------------------------

    def plan(self, sizes: np.ndarray) -> WritePlan:
        """Where the records of one batch land: back to back, all in one segment.

        As RocketMQ writes a batch: when it does not fit in the rest of the current segment
        (with room for the 8-byte end marker), the segment is closed with the blank marker
        and the whole batch starts the next one. A batch larger than a segment is refused.
        """
        total = int(sizes.sum())
        if total > self.segment_bytes - rec.BLANK_MARKER_SIZE:
            raise InvalidArgumentError(
                f"a batch of {total:,} bytes does not fit in one commit-log segment of "
                f"{self.segment_bytes:,} bytes (a batch is never split across segments); send "
                "smaller batches or raise --commitlog-segment-bytes"
            )
        rolls: list[tuple[int, int]] = []
        last = self.segments[-1] if self.segments else None
        if last is None or last.write_pos >= last.size:  # no segment yet, or the last is closed
            write = last.end_offset if last else 0
        else:
            write = self.max_offset
            if write + total > last.end_offset - rec.BLANK_MARKER_SIZE:
                rolls.append((0, write))
                write = last.end_offset
        positions = np.empty(len(sizes), dtype=np.int64)
        if len(sizes):
            positions[0] = write
            np.cumsum(sizes[:-1], out=positions[1:])
            positions[1:] += write
        return WritePlan(positions, rolls)

    def write(self, data: memoryview, sizes: np.ndarray, plan: WritePlan) -> None:
        """Write the encoded records of ``data`` as planned: two syscalls per segment.

        Each segment's part is written without its first 8 bytes (the first record's
        TOTALSIZE and MAGICCODE), which follow in a second write. A process killed during
        the first write (the kernel stops a write to the page cache between pages) leaves
        zeros where recovery looks for the next record, so no torn record survives. Checking
        BODYCRC alone would let a record cut inside its topic or properties through.
        """
        record_starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=record_starts[1:])
        first = 0
        for roll_index, blank_at in [*plan.rolls, (len(sizes), None)]:
            if roll_index > first or blank_at is not None:
                at = (
                    int(plan.positions[first])
                    if blank_at is None or roll_index > first
                    else blank_at
                )
                seg = self._writable_segment(at)
                chunk = data[int(record_starts[first]) : int(record_starts[roll_index])]
                if blank_at is not None:
                    remaining = seg.end_offset - blank_at
                    marker = struct.pack(">iI", remaining, rec.BLANK_MAGIC)
                    _append_head_last(seg, chunk, marker)
                    seg.write_pos = seg.size  # the marker closes the segment
                else:
                    _append_head_last(seg, chunk)
            first = roll_index

    def _writable_segment(self, global_pos: int) -> MappedFile:
        if self.segments and global_pos < self.segments[-1].end_offset:
            seg = self.segments[-1]
            assert seg.start_offset + seg.write_pos == global_pos, "commit log write out of order"
            return seg
        start = self.segments[-1].end_offset if self.segments else 0
        assert start == global_pos, "commit log roll out of order"
        seg = MappedFile(
            self.directory / file_name(start),
            start,
            self.segment_bytes,
            create=True,
            preallocate=True,
            files=self._files,
        )
        fsync_dir(self.directory, self._files)
        self._publish([*self.segments, seg])
        return seg

    # -- reading ---------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy view of ``size`` bytes at ``offset``, or None if not stored."""
        seg = self.segment_for(offset)
        if seg is None:
            return None
        rel = offset - seg.start_offset
        if rel + size > seg.write_pos:
            return None
        return seg.view(rel, rel + size)

    def gather(self, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
        """Concatenate the records at ``offsets`` with one copy per contiguous run."""
        if len(offsets) == 0:
            return b""
        ends = offsets + sizes
        breaks = np.flatnonzero(offsets[1:] != ends[:-1]) + 1
        run_starts = np.concatenate(([0], breaks))
        run_ends = np.concatenate((breaks, [len(offsets)]))
        parts = []
        for a, b in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
            start = int(offsets[a])
            view = self.read(start, int(ends[b - 1]) - start)
            if view is None:
                raise LookupError(f"commit log has no data at physical offset {start}")
            parts.append(view)
        try:
            return b"".join(parts)
        finally:
            for view in parts:
                view.release()

    # -- flush and retention ----------------------------------------------------------------

    def flush(self) -> int:
        """fdatasync every segment with unflushed bytes; returns the flushed global offset."""
        end = self.max_offset
        for seg in self.segments:
            if seg.write_pos > seg.flushed_pos:
                faults.before_commitlog_sync(seg.path)  # test-only; nothing unless armed
                seg.flush()
        return end

    def delete_segments_before(self, offset: int) -> int:
        """Delete whole segments that end at or before ``offset`` (never the last one)."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[0].end_offset <= offset:
            doomed = self.segments[0]
            self._publish(self.segments[1:])
            doomed.destroy()
            deleted += 1
        return deleted

    def close(self) -> None:
        for seg in self.segments:
            seg.close()


def _append_head_last(seg: MappedFile, chunk: memoryview, *more: bytes) -> None:
    """Append ``chunk`` (whole records) and ``more``, writing the first 8 bytes last."""
    head = rec.BLANK_MARKER_SIZE  # TOTALSIZE + MAGICCODE of the first record
    if len(chunk) < head:  # no record in this segment: only an end marker
        seg.append(chunk, *more)
        return
    pos = seg.write_pos
    seg.write_at(pos + head, chunk[head:], *more)
    seg.write_at(pos, chunk[:head])
