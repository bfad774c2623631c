"""Which files hold a range of one queue: what a short-circuit reader is handed.

A reader on the broker's host reads a queue range from the files themselves: the consume-
queue files holding the range's entries and the commit-log segments holding its records.
:func:`range_files` names them for ``[start, end)`` of a queue, clipped to what the queue
holds now and to at most ``max_files`` files (the reader asks again for the rest).

Entries of a queue grow with their physical offset, so the records of a range lie between
the first entry's record and the last one's: the segments between are all it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmq_spark.codec.consume_queue import ENTRY_SIZE
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue


@dataclass(frozen=True)
class FileSpan:
    path: Path
    #: the first byte it holds: a byte offset of the queue (entry i at i * 20), or a
    #: physical offset of the commit log
    start: int
    size: int


@dataclass(frozen=True)
class RangeFiles:
    """The files holding queue offsets ``[start, end)``, and the queue's bounds now."""

    min_offset: int
    max_offset: int
    start: int
    end: int
    queue_files: list[FileSpan]
    segments: list[FileSpan]


def range_files(
    cq: ConsumeQueue, commitlog: CommitLog, start: int, end: int, max_files: int
) -> RangeFiles:
    """The files of ``[start, end)`` (see the module doc); an empty range when ``start`` is
    outside what the queue holds."""
    low, high = cq.min_offset, cq.max_offset
    first, last = max(start, low), min(end, high)
    if first >= last:
        return RangeFiles(low, high, first, first, [], [])
    queue_files = _queue_files(cq, first, last)[: max(1, max_files // 2)]
    covered = queue_files[-1].start + queue_files[-1].size
    last = min(last, covered // ENTRY_SIZE)
    head, tail = cq.entries(first, first + 1), cq.entries(last - 1, last)
    phys_first = int(head["physical_offset"][0])
    phys_end = int(tail["physical_offset"][0]) + int(tail["size"][0])
    segments = []
    for seg in commitlog.segments:
        if seg.end_offset > phys_first and seg.start_offset < phys_end:
            segments.append(FileSpan(seg.path, seg.start_offset, seg.size))
    room = max_files - len(queue_files)
    if len(segments) > room:
        segments = segments[:room]
        last = _entries_within(cq, first, last, segments[-1].start + segments[-1].size)
    return RangeFiles(low, high, first, last, queue_files, segments)


def _queue_files(cq: ConsumeQueue, first: int, last: int) -> list[FileSpan]:
    lo, hi = first * ENTRY_SIZE, last * ENTRY_SIZE
    return [
        FileSpan(f.path, f.start_offset, f.size)
        for f in cq.files
        if f.start_offset < hi and f.start_offset + f.size > lo
    ]


def _entries_within(cq: ConsumeQueue, first: int, last: int, physical_end: int) -> int:
    """The first offset in ``[first, last)`` whose record ends past ``physical_end`` (the
    range's new end), by bisection over the entries."""
    lo, hi = first, last
    while lo < hi:
        mid = (lo + hi) // 2
        entry = cq.entries(mid, mid + 1)
        if int(entry["physical_offset"][0]) + int(entry["size"][0]) <= physical_end:
            lo = mid + 1
        else:
            hi = mid
    return lo
