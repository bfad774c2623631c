"""A full consistency check of a store: the commit log record by record, and every consume
queue against it.

:func:`verify_store` takes either a store directory or an open :class:`MessageStore`:

* a directory is opened with :meth:`MessageStore.open`, so crash recovery runs first (the
  check then says whether recovery left a consistent store), and closed again afterwards.
  Segment and consume-queue file sizes are taken from the files there
  (:func:`config_from_files`); pass a :class:`StoreConfig` to choose them;
* an open store is checked as it is; appends wait while the check runs.

Checks, each failure one human-readable line in :attr:`VerifyReport.problems`:

* commit-log segments are contiguous; every record up to the commit log's end has a known
  magic code, a TOTALSIZE that matches its fields, a matching body CRC and the
  PHYSICALOFFSET of where it really is; every segment but the last ends with an end marker
  that covers exactly the rest of the segment; the bytes right after the end are zero (else
  a later crash recovery could take them for records);
* every record of a topic that has consume queues has exactly one entry, at its QUEUEOFFSET
  in its (topic, QUEUEID) queue, with its physical offset, size and the tag hash code of its
  TAGS property;
* every queue's entries are contiguous from its min to its max offset (no unwritten slot),
  in commit-log order, and none points outside the commit log or at something that is not
  the record of that queue and offset.

It is meant for operators (a ``verify`` CLI command) as much as for tests. The record
reader here is written apart from :mod:`rmq_spark.store.recovery`, so a mistake in
recovery's record check does not hide here.
"""

from __future__ import annotations

import itertools
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.codec.consume_queue import ENTRY_SIZE
from rmq_spark.codec.properties import TAGS, decode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.message_store import MessageStore

#: problems listed one by one; more are only counted (a torn store can have millions)
MAX_PROBLEMS = 200

_HEAD = struct.Struct(">iIiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_SIZE_MAGIC = struct.Struct(">iI")
_MIN_RECORD = rec.FIXED_WITHOUT_HOSTS + 2 * rec.IPV4_HOST


@dataclass
class VerifyReport:
    """What :func:`verify_store` found; ``problems`` is empty when the store is consistent."""

    store_dir: str
    commitlog_min_offset: int = 0
    commitlog_max_offset: int = 0
    segments: int = 0
    records: int = 0
    queues: int = 0
    queue_entries: int = 0
    #: records of topics that no longer exist and have no consume queue (deleted topics
    #: whose records wait for retention); not a problem
    unindexed_records: int = 0
    problems: list[str] = field(default_factory=list)
    #: problems found beyond the first MAX_PROBLEMS, counted but not listed
    problems_omitted: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.problems_omitted += 1

    def summary(self) -> str:
        head = (
            f"store {self.store_dir}: commit log [{self.commitlog_min_offset}, "
            f"{self.commitlog_max_offset}) in {self.segments} segment(s), "
            f"{self.records} record(s); {self.queues} consume queue(s) with "
            f"{self.queue_entries} entr{'y' if self.queue_entries == 1 else 'ies'}"
        )
        if self.unindexed_records:
            head += f"; {self.unindexed_records} record(s) of deleted topics"
        if self.ok:
            return head + "; consistent"
        total = len(self.problems) + self.problems_omitted
        lines = [f"{head}; {total} problem(s):", *(f"  - {p}" for p in self.problems)]
        if self.problems_omitted:
            lines.append(f"  ... and {self.problems_omitted} more")
        return "\n".join(lines)


@dataclass
class _Records:
    """Valid records of one (topic, queue id), in commit-log order."""

    queue_offsets: list[int] = field(default_factory=list)
    physical_offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tag_codes: list[int] = field(default_factory=list)


def verify_store(target: MessageStore | StoreConfig | str | os.PathLike[str]) -> VerifyReport:
    """Check ``target`` (an open store, a StoreConfig or a store directory); see the module
    docstring. A directory or config is opened (running recovery) and closed again; an open
    store is left open."""
    if isinstance(target, MessageStore):
        return _verify_open(target)
    config = target if isinstance(target, StoreConfig) else config_from_files(target)
    with MessageStore.open(config) as store:
        return _verify_open(store)


def config_from_files(store_dir: str | os.PathLike[str]) -> StoreConfig:
    """A StoreConfig for ``store_dir`` whose file sizes are those of the files already there
    (the store does not record them), so opening it changes no file's size. Defaults are
    kept where there are no files to go by."""
    root = Path(store_dir)
    defaults = StoreConfig(root)
    segment_bytes = defaults.commitlog_segment_bytes
    segment_sizes = [p.stat().st_size for p in _digit_files(defaults.commitlog_dir)]
    if segment_sizes and max(segment_sizes) >= 4096:
        segment_bytes = max(segment_sizes)
    queue_root = defaults.consumequeue_dir
    queue_dirs = [q for t in _subdirs(queue_root) for q in _subdirs(t)]
    first_files = [files[0].stat().st_size for q in queue_dirs if (files := _digit_files(q))]
    largest = max(first_files, default=0)
    entries_per_file = defaults.consumequeue_entries_per_file
    if largest >= 16 * ENTRY_SIZE and largest % ENTRY_SIZE == 0:
        entries_per_file = largest // ENTRY_SIZE
    return StoreConfig(
        root, commitlog_segment_bytes=segment_bytes, consumequeue_entries_per_file=entries_per_file
    )


def _subdirs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []


def _digit_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.isdigit() and p.is_file())


def _verify_open(store: MessageStore) -> VerifyReport:
    with store.writes_paused():  # a consistent snapshot: no append runs while we look
        report = VerifyReport(str(store.config.store_dir))
        by_queue = _scan_commitlog(store, report)
        _check_queues(store, by_queue, report)
    return report


# -- commit log ----------------------------------------------------------------------------


def _scan_commitlog(store: MessageStore, report: VerifyReport) -> dict[tuple[str, int], _Records]:
    commitlog = store.commitlog
    segments = commitlog.segments
    report.commitlog_min_offset = commitlog.min_offset
    report.commitlog_max_offset = end = commitlog.max_offset
    report.segments = len(segments)
    by_queue: dict[tuple[str, int], _Records] = {}
    for before, after in itertools.pairwise(segments):
        if before.end_offset != after.start_offset:
            report.add(
                f"commit-log segments {before.path.name} ({before.size} bytes) and "
                f"{after.path.name} are not contiguous: bytes [{before.end_offset}, "
                f"{after.start_offset}) are missing"
            )
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        limit = min(seg.size, end - seg.start_offset) if last else seg.size
        view = seg.view()
        try:
            _scan_segment(view, seg.start_offset, seg.size, limit, last, report, by_queue)
            if last and limit + 8 <= seg.size and any(view[limit : limit + 8]):
                report.add(
                    f"the bytes after the end of the commit log (physical offset {end}) are "
                    "not zero: a crash recovery could take them for records"
                )
        finally:
            view.release()
    return by_queue


def _scan_segment(
    view: memoryview,
    start: int,
    seg_size: int,
    limit: int,
    last: bool,
    report: VerifyReport,
    by_queue: dict[tuple[str, int], _Records],
) -> None:
    """Check the records of one segment up to relative position ``limit``."""
    pos = 0
    while pos < limit:
        where = start + pos
        if limit - pos < 8:
            report.add(f"commit log: {limit - pos} stray byte(s) at physical offset {where}")
            return
        size, magic = _SIZE_MAGIC.unpack_from(view, pos)
        if magic == rec.BLANK_MAGIC:
            if size != seg_size - pos:
                report.add(
                    f"commit log: end marker at physical offset {where} says {size} bytes "
                    f"remain in the segment, but {seg_size - pos} do"
                )
            return
        found, reason = _check_record(view, pos, limit, start)
        if found is None:
            report.add(
                f"commit log: bad record at physical offset {where} ({reason}); the "
                f"{limit - pos} byte(s) after it in this segment cannot be checked"
            )
            return
        topic, qid, qoff, size, tag_code = found
        records = by_queue.get((topic, qid))
        if records is None:
            records = by_queue[(topic, qid)] = _Records()
        records.queue_offsets.append(qoff)
        records.physical_offsets.append(where)
        records.sizes.append(size)
        records.tag_codes.append(tag_code)
        report.records += 1
        pos += size
    if not last:
        report.add(
            f"commit log: segment {start:020d} has no end marker; its records stop at physical "
            f"offset {start + pos} but the log goes on in the next segment"
        )


def _check_record(
    view: memoryview, pos: int, limit: int, seg_start: int
) -> tuple[tuple[str, int, int, int, int] | None, str]:
    """((topic, queue id, queue offset, size, tag code), "") or (None, what is wrong)."""
    size, magic = _SIZE_MAGIC.unpack_from(view, pos)
    if magic not in (rec.MAGIC_V1, rec.MAGIC_V2):
        if size == 0 and magic == 0:
            return None, "the log is empty here although it should go on"
        return None, f"bad magic code 0x{magic:08X}"
    if size < _MIN_RECORD:
        return None, f"TOTALSIZE {size} is below the minimum of {_MIN_RECORD}"
    if pos + size > limit:
        return None, f"TOTALSIZE {size} runs past the end of the log at {seg_start + limit}"
    _, _, crc, qid, _, qoff, phys, sysflag, _ = _HEAD.unpack_from(view, pos)
    end = pos + size
    p = pos + _HEAD.size + rec.host_size(sysflag, rec.SYSFLAG_BORNHOST_V6) + 8
    p += rec.host_size(sysflag, rec.SYSFLAG_STOREHOST_V6) + 12
    if p + 4 > end:
        return None, f"TOTALSIZE {size} is too small for the hosts its SYSFLAG announces"
    (body_len,) = struct.unpack_from(">i", view, p)
    p += 4
    if body_len < 0 or p + body_len > end:
        return None, f"BODYLEN {body_len} does not fit in TOTALSIZE {size}"
    body = view[p : p + body_len]
    p += body_len
    topic_field = 2 if magic == rec.MAGIC_V2 else 1
    if p + topic_field > end:
        return None, "the topic length does not fit in TOTALSIZE"
    topic_len = int.from_bytes(view[p : p + topic_field], "big")
    p += topic_field
    if p + topic_len + 2 > end:
        return None, f"topic length {topic_len} does not fit in TOTALSIZE {size}"
    topic_raw = bytes(view[p : p + topic_len])
    p += topic_len
    (props_len,) = struct.unpack_from(">H", view, p)
    p += 2
    props = bytes(view[p : p + props_len])
    p += props_len
    if p != end:
        return None, f"its fields take {p - pos} bytes but TOTALSIZE says {size}"
    if zlib.crc32(body) & 0x7FFFFFFF != crc:
        return None, f"body CRC mismatch (stored {crc})"
    if phys != seg_start + pos:
        return None, f"PHYSICALOFFSET says {phys}"
    if qid < 0 or qoff < 0:
        return None, f"negative QUEUEID {qid} or QUEUEOFFSET {qoff}"
    try:
        topic = topic_raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, f"topic {topic_raw!r} is not UTF-8"
    tags = decode_properties(props).get(TAGS) if props_len else None
    return (topic, qid, qoff, size, tag_hash_code(tags)), ""


# -- consume queues ------------------------------------------------------------------------


def _check_queues(
    store: MessageStore, by_queue: dict[tuple[str, int], _Records], report: VerifyReport
) -> None:
    queues = store.consume_queues()
    report.queues = len(queues)
    owners: dict[int, tuple[str, int, int]] = {}

    def owner(physical_offset: int) -> tuple[str, int, int] | None:
        """The record starting at ``physical_offset``, to name what a wrong entry points
        at (the map is built on the first question: a consistent store never asks)."""
        if not owners:
            for (topic, qid), records in by_queue.items():
                for phys, qoff in zip(records.physical_offsets, records.queue_offsets, strict=True):
                    owners[phys] = (topic, qid, qoff)
        return owners.get(physical_offset)

    for key, records in by_queue.items():
        if key not in queues:
            topic, qid = key
            if store.topics.find(topic) is None:
                report.unindexed_records += len(records.queue_offsets)
            else:
                report.add(
                    f"queue {topic}/{qid}: {len(records.queue_offsets)} record(s) in the "
                    "commit log but no consume queue"
                )
    for key in sorted(queues):
        _check_queue(store, queues[key], by_queue.get(key, _Records()), owner, report)


def _check_queue(
    store: MessageStore,
    cq: ConsumeQueue,
    records: _Records,
    owner: Callable[[int], tuple[str, int, int] | None],
    report: VerifyReport,
) -> None:
    name = f"queue {cq.topic}/{cq.queue_id}"
    lo, hi = cq.min_offset, cq.max_offset
    cl_min, cl_max = store.commitlog.min_offset, store.commitlog.max_offset
    if lo > 0 and cl_min == 0:
        report.add(f"{name} starts at offset {lo} although the commit log was never trimmed")
    entries = cq.entries(lo, hi)
    if len(entries) != hi - lo:
        report.add(f"{name}: offsets [{lo}, {hi}) should have entries but {len(entries)} exist")
        return
    phys = entries["physical_offset"].astype(np.int64)
    sizes = entries["size"].astype(np.int64)
    codes = entries["tag_code"].astype(np.int64)

    holes = np.flatnonzero(sizes == 0)
    if len(holes):
        report.add(f"{name}: no entry at {_describe_offsets(holes + lo)} (holes in the queue)")
    written = sizes != 0
    report.queue_entries += int(written.sum())
    outside = np.flatnonzero(written & ((phys < cl_min) | (phys + sizes > cl_max) | (sizes < 0)))
    for i in outside[:5].tolist():
        report.add(
            f"{name}: entry {lo + i} points at [{int(phys[i])}, {int(phys[i] + sizes[i])}), "
            f"outside the commit log [{cl_min}, {cl_max})"
        )
    if len(outside) > 5:
        report.add(f"{name}: {len(outside) - 5} more entries point outside the commit log")
    order = phys[written]
    if len(order) > 1 and not bool(np.all(np.diff(order) > 0)):
        report.add(f"{name}: entries are not in commit-log order")

    rq = np.asarray(records.queue_offsets, dtype=np.int64)
    rphys = np.asarray(records.physical_offsets, dtype=np.int64)
    rsize = np.asarray(records.sizes, dtype=np.int64)
    rcode = np.asarray(records.tag_codes, dtype=np.int64)
    in_range = (rq >= lo) & (rq < hi)
    for i in np.flatnonzero(~in_range)[:5].tolist():
        report.add(
            f"{name}: the record at physical offset {int(rphys[i])} is queue offset "
            f"{int(rq[i])}, which has no entry (the queue holds [{lo}, {hi}))"
        )
    if (~in_range).sum() > 5:
        report.add(f"{name}: {int((~in_range).sum()) - 5} more records have no entry")
    idx = rq[in_range] - lo
    claims = np.bincount(idx, minlength=hi - lo) if hi > lo else np.zeros(0, np.int64)
    for i in np.flatnonzero(claims > 1)[:5].tolist():
        at = rphys[in_range][idx == i].tolist()
        report.add(f"{name}: queue offset {lo + i} is claimed by {claims[i]} records at {at}")
    # Entries no record claims (and that are not holes or outside the log, reported above).
    stray = np.flatnonzero((claims == 0) & written)
    stray = stray[np.isin(stray, outside, invert=True)]
    for i in stray[:5].tolist():
        p = int(phys[i])
        found = owner(p)
        what = (
            f"the record of {found[0]}/{found[1]} offset {found[2]}"
            if found
            else "a position where no valid record starts"
        )
        report.add(f"{name}: entry {lo + i} points at physical offset {p}, {what}")
    if len(stray) > 5:
        report.add(f"{name}: {len(stray) - 5} more entries point at no record of this queue")
    # Entries claimed by exactly one record must describe it exactly.
    single = (claims[idx] == 1) & written[idx] & ~np.isin(idx, outside)
    i_rec = np.flatnonzero(in_range)[single]
    i_ent = idx[single]
    # Schedule-topic entries hold delivery times, not tag hashes.
    check_codes = cq.topic != SCHEDULE_TOPIC
    bad = np.flatnonzero(
        (phys[i_ent] != rphys[i_rec])
        | (sizes[i_ent] != rsize[i_rec])
        | ((codes[i_ent] != rcode[i_rec]) & check_codes)
    )
    for b in bad[:5].tolist():
        e, r = int(i_ent[b]), int(i_rec[b])
        report.add(
            f"{name}: entry {lo + e} is (physical offset {int(phys[e])}, size {int(sizes[e])}, "
            f"tag code {int(codes[e])}) but its record is ({int(rphys[r])}, {int(rsize[r])}, "
            f"{int(rcode[r])})"
        )
    if len(bad) > 5:
        report.add(f"{name}: {len(bad) - 5} more entries disagree with their records")


def _describe_offsets(offsets: np.ndarray) -> str:
    """``offsets 3, 7-9`` for sorted queue offsets, shortened when there are many."""
    runs: list[str] = []
    start = prev = int(offsets[0])
    for value in [*offsets[1:].tolist(), None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    shown = ", ".join(runs[:10]) + (f" and {len(runs) - 10} more ranges" if len(runs) > 10 else "")
    return f"offset{'s' if len(offsets) > 1 else ''} {shown}"
