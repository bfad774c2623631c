"""Bring the commit log and consume queues back in agreement when a store opens.

Everything before the checkpoint's ``safe_offset`` was fsynced together with its consume-
queue entries. After a clean shutdown the scan starts there (the checkpoint was written at
close, so there is nothing to scan). After a crash (the ``abort`` file is still there) the
scan starts at the beginning of the segment holding ``safe_offset``. Each record is checked
(magic code, TOTALSIZE against the field lengths, body CRC); the first bad record ends the
log: it and everything after it are erased, consume-queue entries pointing past the cut are
dropped, and entries for the good records scanned are written again.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import TAGS, decode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import CorruptDataError
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.recovery_scan import ScannedRun, check_run, walk

log = logging.getLogger("rmq_spark.store")

_HEAD = struct.Struct(">iIiiiqqi")  # TOTALSIZE .. SYSFLAG


@dataclass
class ScannedRecord:
    physical_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tag_code: int
    store_timestamp: int


@dataclass
class RecoveryReport:
    abnormal: bool
    scanned_from: int
    end_offset: int
    records_scanned: int = 0
    stop_reason: str = ""
    entries_redispatched: int = 0
    queues_truncated: dict[tuple[str, int], int] = field(default_factory=dict)


def check_record(view: memoryview, pos: int, limit: int) -> tuple[ScannedRecord | None, str]:
    """Validate the record at ``pos`` of a segment view; (record, "") or (None, reason).

    A blank end-of-segment marker returns (None, "blank").
    """
    if limit - pos < 8:
        return None, "end"
    size, magic = struct.unpack_from(">iI", view, pos)
    if magic == rec.BLANK_MAGIC:
        return None, "blank"
    if magic not in (rec.MAGIC_V1, rec.MAGIC_V2):
        return None, "end" if size == 0 and magic == 0 else f"bad magic 0x{magic:08X}"
    if limit - pos < _HEAD.size or size < rec.FIXED_WITHOUT_HOSTS + 2 * rec.IPV4_HOST:
        return None, f"bad size {size}"
    if pos + size > limit:
        return None, f"record of {size} bytes overruns the segment"
    _, _, crc, qid, _, qoff, phys, sysflag = _HEAD.unpack_from(view, pos)
    p = pos + _HEAD.size + 8  # born timestamp
    p += rec.host_size(sysflag, rec.SYSFLAG_BORNHOST_V6)
    (store_ts,) = struct.unpack_from(">q", view, p)
    p += 8 + rec.host_size(sysflag, rec.SYSFLAG_STOREHOST_V6) + 12
    (body_len,) = struct.unpack_from(">i", view, p)
    p += 4
    if body_len < 0 or p + body_len > pos + size:
        return None, f"body length {body_len} overruns the record"
    body = view[p : p + body_len]
    p += body_len
    if magic == rec.MAGIC_V2:
        (topic_len,) = struct.unpack_from(">H", view, p)
        p += 2
    else:
        topic_len = view[p]
        p += 1
    topic = bytes(view[p : p + topic_len])
    p += topic_len
    if p + 2 > pos + size:
        return None, "topic overruns the record"
    (props_len,) = struct.unpack_from(">H", view, p)
    p += 2
    props = view[p : p + props_len]
    p += props_len
    if p - pos != size:
        return None, f"fields take {p - pos} bytes but TOTALSIZE says {size}"
    if zlib.crc32(body) & 0x7FFFFFFF != crc:
        return None, "body CRC mismatch"
    tags = decode_properties(props).get(TAGS) if props_len else None
    return (
        ScannedRecord(
            phys, size, topic.decode("utf-8", "replace"), qid, qoff, tag_hash_code(tags), store_ts
        ),
        "",
    )


def recover(
    commitlog: CommitLog,
    queue_for: Callable[[str, int], ConsumeQueue],
    existing_queues: list[ConsumeQueue],
    safe_offset: int | None,
    *,
    abnormal: bool,
    schedule_delays_ms: Sequence[int] = (),
) -> RecoveryReport:
    """Scan, truncate and re-dispatch as described in the module docstring."""
    start = commitlog.min_offset if safe_offset is None else max(safe_offset, commitlog.min_offset)
    if abnormal and commitlog.segments:
        seg = commitlog.segment_for(start) or commitlog.segments[-1]
        start = min(start, seg.start_offset)
    report = RecoveryReport(abnormal=abnormal, scanned_from=start, end_offset=start)
    runs: list[ScannedRun] = []
    for run, offset, reason in scan_runs(commitlog, start):
        if run is None:
            report.end_offset, report.stop_reason = offset, reason
            break
        runs.append(run)
    if report.stop_reason != "end":
        log.warning(
            "commit log is torn at physical offset %d (%s); erasing everything after it",
            report.end_offset,
            report.stop_reason,
        )
    commitlog.set_max_offset(report.end_offset)
    dispatched = _dispatch(runs, queue_for, schedule_delays_ms)
    report.records_scanned = report.entries_redispatched = sum(len(run) for run in runs)
    for cq in {id(q): q for q in [*existing_queues, *dispatched]}.values():
        cut = _first_entry_at_or_after(cq, report.end_offset)
        if cut < cq.max_offset:
            report.queues_truncated[(cq.topic, cq.queue_id)] = cq.max_offset - cut
            cq.truncate(cut)
    return report


def scan_runs(commitlog: CommitLog, start: int) -> Iterator[tuple[ScannedRun | None, int, str]]:
    """Yield (records of one segment, offset, "") for each segment from ``start``, then one
    final (None, end offset, reason) where the valid log ends. Records are checked over
    arrays (:mod:`rmq_spark.store.recovery_scan`); a segment holding a damaged record is
    checked again record by record, to end the log exactly before it."""
    offset = start
    while True:
        seg = commitlog.segment_for(offset)
        if seg is None:
            yield None, offset, "end"
            return
        view = seg.view()
        try:
            pos = offset - seg.start_offset
            starts, sizes, stop, reason = walk(view, pos, seg.size)
            try:
                run = check_run(view, seg.start_offset, starts, sizes) if starts else None
            except CorruptDataError:
                run, stop, reason = _one_by_one(view, seg.start_offset, pos, seg.size)
        finally:
            try:
                view.release()
            except BufferError:  # arrays still point into it; the mapping stays valid
                pass
        if run is not None and len(run):
            yield run, seg.start_offset + stop, ""
        if reason == "blank":
            offset = seg.end_offset
            continue
        yield None, seg.start_offset + stop, reason
        return


def _one_by_one(
    view: memoryview, seg_start: int, pos: int, limit: int
) -> tuple[ScannedRun, int, str]:
    """The slow path: records checked one at a time up to the first that fails."""
    found: list[ScannedRecord] = []
    while True:
        record, reason = check_record(view, pos, limit)
        if record is None:
            break
        if record.physical_offset != seg_start + pos:
            reason = f"PHYSICALOFFSET {record.physical_offset} != position"
            break
        found.append(record)
        pos += record.size
    run = ScannedRun(
        topics=[r.topic for r in found],
        queue_ids=np.array([r.queue_id for r in found], dtype=np.int64),
        queue_offsets=np.array([r.queue_offset for r in found], dtype=np.int64),
        physical_offsets=np.array([r.physical_offset for r in found], dtype=np.int64),
        sizes=np.array([r.size for r in found], dtype=np.int64),
        tag_codes=np.array([r.tag_code for r in found], dtype=np.int64),
        store_timestamps=np.array([r.store_timestamp for r in found], dtype=np.int64),
    )
    return run, pos, reason


def _dispatch(
    runs: list[ScannedRun],
    queue_for: Callable[[str, int], ConsumeQueue],
    schedule_delays_ms: Sequence[int],
) -> list[ConsumeQueue]:
    """Write the consume-queue entries of every scanned record; returns the queues."""
    if not runs:
        return []
    topics = [topic for run in runs for topic in run.topics]
    qids = np.concatenate([run.queue_ids for run in runs])
    qoffs = np.concatenate([run.queue_offsets for run in runs])
    phys = np.concatenate([run.physical_offsets for run in runs])
    sizes = np.concatenate([run.sizes for run in runs])
    codes = np.concatenate([run.tag_codes for run in runs])
    stamps = np.concatenate([run.store_timestamps for run in runs])
    names: dict[str, int] = {}
    topic_ids = np.fromiter(
        (names.setdefault(t, len(names)) for t in topics), dtype=np.int64, count=len(topics)
    )
    by_id = list(names)
    schedule = names.get(SCHEDULE_TOPIC)
    if schedule is not None and len(schedule_delays_ms):
        # Schedule-topic entries hold the delivery time, as the broker wrote them.
        delays = np.asarray(schedule_delays_ms, dtype=np.int64)
        mask = (topic_ids == schedule) & (qids < len(delays))
        codes[mask] = stamps[mask] + delays[qids[mask]]
    keys = topic_ids * (1 << 32) + qids
    order = np.argsort(keys, kind="stable")
    bounds = np.flatnonzero(np.diff(keys[order])) + 1
    queues = []
    for group in np.split(order, bounds):
        first = int(group[0])
        cq = queue_for(by_id[int(topic_ids[first])], int(qids[first]))
        offsets = qoffs[group]
        if len(offsets) == 1 or bool(np.all(np.diff(offsets) == 1)):
            cq.put(int(offsets[0]), phys[group], sizes[group], codes[group])
        else:
            for i in group.tolist():
                cq.put(int(qoffs[i]), phys[i : i + 1], sizes[i : i + 1], codes[i : i + 1])
        queues.append(cq)
    return queues


def _first_entry_at_or_after(cq: ConsumeQueue, physical_end: int) -> int:
    """Smallest queue offset whose entry points at or past ``physical_end`` (entries of a
    queue grow with the physical offset), or max_offset when none does."""
    last = cq.opened_last
    if last is not None and last[1] and last[0] + last[1] <= physical_end:
        return cq.max_offset  # its last entry, read when it was opened, is within the log
    lo, hi = cq.min_offset, cq.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        e = cq.entries(mid, mid + 1)
        if (
            len(e)
            and int(e["physical_offset"][0]) + int(e["size"][0]) <= physical_end
            and int(e["size"][0])
        ):
            lo = mid + 1
        else:
            hi = mid
    return lo
