"""Retention: which commit-log segments have expired, deleting them with the consume-queue
entries pointing into them, and the housekeeping thread that runs it periodically.

A segment expires when its file was last modified before a cutoff (``file_reserved_ms``
ago). Segments go oldest first and only as a prefix of the log: deletion stops at the first
segment still young, and the segment being written is never deleted.

>>> expired_end([(100, 5.0), (200, 6.0), (300, 9.0)], cutoff_s=8.0)
200
>>> expired_end([(100, 9.0), (200, 6.0)], cutoff_s=8.0) is None
True
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable

from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.consume_queue import ConsumeQueue

log = logging.getLogger("rmq_spark.store")


def expired_end(segments: Iterable[tuple[int, float]], cutoff_s: float) -> int | None:
    """The end offset of the last expired segment of the leading run of expired ones, or
    None when the first is not expired. ``segments`` are (end offset, modification time
    in seconds) in log order, without the segment being written; they are read lazily
    and not past the first one modified at or after ``cutoff_s``."""
    end = None
    for end_offset, mtime in segments:
        if mtime >= cutoff_s:
            break
        end = end_offset
    return end


def delete_expired(
    commitlog: CommitLog, queues: Iterable[ConsumeQueue], cutoff_s: float
) -> int | None:
    """Delete the commit-log segments expired at ``cutoff_s`` (see :func:`expired_end`)
    and drop the entries of ``queues`` pointing below the log's new minimum. Returns how
    many segments were deleted, None when none had expired. The caller holds the store's
    write lock."""
    end = expired_end(
        ((seg.end_offset, os.path.getmtime(seg.path)) for seg in commitlog.segments[:-1]),
        cutoff_s,
    )
    if end is None:
        return None
    deleted = commitlog.delete_segments_before(end)
    new_min = commitlog.min_offset
    for cq in queues:
        cq.drop_below_physical(new_min)
    return deleted


class Housekeeping:
    """A daemon thread (``rmq-clean``) calling ``run_round()`` every ``interval_s`` seconds
    until :meth:`stop`; a round that raises is logged and the next one runs as planned."""

    def __init__(self, interval_s: float, run_round: Callable[[], object]) -> None:
        self._interval_s = interval_s
        self._run_round = run_round
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rmq-clean", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for a round in progress to finish."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._run_round()
            except Exception:
                log.exception("housekeeping failed")
