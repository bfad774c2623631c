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
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import TAGS, decode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue

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


def scan(commitlog: CommitLog, start: int) -> Iterator[tuple[ScannedRecord | None, int, str]]:
    """Yield (record, offset, "") for each valid record from ``start``, then one final
    (None, end offset, reason) where the valid log ends."""
    offset = start
    while True:
        seg = commitlog.segment_for(offset)
        if seg is None:
            yield None, offset, "end"
            return
        view = seg.view()
        try:
            pos = offset - seg.start_offset
            while True:
                found, reason = check_record(view, pos, seg.size)
                if found is None:
                    break
                if found.physical_offset != seg.start_offset + pos:
                    reason = f"PHYSICALOFFSET {found.physical_offset} != position"
                    break
                yield found, seg.start_offset + pos, ""
                pos += found.size
        finally:
            view.release()
        if reason == "blank":
            offset = seg.end_offset
            continue
        yield None, seg.start_offset + pos, reason
        return


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
    batches: dict[tuple[str, int], list[ScannedRecord]] = defaultdict(list)
    for found, offset, reason in scan(commitlog, start):
        if found is None:
            report.end_offset, report.stop_reason = offset, reason
            break
        report.records_scanned += 1
        if found.topic == SCHEDULE_TOPIC and found.queue_id < len(schedule_delays_ms):
            found.tag_code = found.store_timestamp + schedule_delays_ms[found.queue_id]
        batches[(found.topic, found.queue_id)].append(found)
    if report.stop_reason != "end":
        log.warning(
            "commit log is torn at physical offset %d (%s); erasing everything after it",
            report.end_offset,
            report.stop_reason,
        )
    commitlog.set_max_offset(report.end_offset)
    for (topic, qid), records in batches.items():
        cq = queue_for(topic, qid)
        if _consecutive(records):
            cq.put(
                records[0].queue_offset,
                [r.physical_offset for r in records],
                [r.size for r in records],
                [r.tag_code for r in records],
            )
        else:
            for r in records:
                cq.put(r.queue_offset, [r.physical_offset], [r.size], [r.tag_code])
        report.entries_redispatched += len(records)
    for cq in {id(q): q for q in [*existing_queues, *(queue_for(*k) for k in batches)]}.values():
        cut = _first_entry_at_or_after(cq, report.end_offset)
        if cut < cq.max_offset:
            report.queues_truncated[(cq.topic, cq.queue_id)] = cq.max_offset - cut
            cq.truncate(cut)
    return report


def _consecutive(records: list[ScannedRecord]) -> bool:
    first = records[0].queue_offset
    return all(r.queue_offset == first + i for i, r in enumerate(records))


def _first_entry_at_or_after(cq: ConsumeQueue, physical_end: int) -> int:
    """Smallest queue offset whose entry points at or past ``physical_end`` (entries of a
    queue grow with the physical offset), or max_offset when none does."""
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
