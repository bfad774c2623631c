"""The timer's progress: which offsets of the timer topic's queue were delivered.

Timer messages fall due in the order of their delivery times, not of their offsets, so the
progress is not one offset but a low-water mark plus the set above it: every offset below
``low`` is done, and ``done`` holds the done offsets at or above it (kept small, since
``low`` moves up over every done offset right after it). A journal record is a list of
offsets done since; replaying records in any order, or twice, gives the same progress.

This module holds the rule and the encodings; :mod:`rmq_spark.broker.delivery.timer` does the I/O.

>>> p = TimerProgress(0)
>>> p.mark([1, 3])
>>> (p.low, sorted(p.done))
(0, [1, 3])
>>> p.mark([0])
>>> (p.low, sorted(p.done), p.is_done(1), p.is_done(2))
(2, [3], True, False)
>>> progress_from_json(p.to_json()).to_json()
{'low': 2, 'done': [3]}
>>> parse_done(encode_done([5, 7]))
[5, 7]
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeGuard

from rmq_spark.errors import CorruptDataError


class TimerProgress:
    """Delivered offsets of the timer queue: all below ``low``, and ``done`` above it."""

    def __init__(self, low: int = 0, done: Iterable[int] = ()) -> None:
        self.low = low
        self.done: set[int] = set()
        self.mark(done)

    def is_done(self, offset: int) -> bool:
        return offset < self.low or offset in self.done

    def mark(self, offsets: Iterable[int]) -> None:
        """Record ``offsets`` as done (idempotent)."""
        self.done.update(o for o in offsets if o >= self.low)
        while self.low in self.done:
            self.done.remove(self.low)
            self.low += 1

    def skip_below(self, offset: int) -> None:
        """Count everything below ``offset`` as done (the queue no longer holds it)."""
        if offset > self.low:
            self.low = offset
            self.done = {o for o in self.done if o >= offset}
            self.mark(())

    def cut_at(self, end: int) -> None:
        """Forget progress at or past ``end`` (the queue ends there now, so those offsets
        will be written again by new messages)."""
        self.low = min(self.low, end)
        self.done = {o for o in self.done if o < end}

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "done": sorted(self.done)}


def progress_from_json(obj: Any) -> TimerProgress:
    """Parse :meth:`TimerProgress.to_json`; raises CorruptDataError naming the bad part."""
    if not isinstance(obj, dict):
        raise CorruptDataError('expected a JSON object with "low" and "done"')
    low, done = obj.get("low"), obj.get("done")
    if not _is_offset(low):
        raise CorruptDataError(f'"low" {low!r} is not an offset >= 0')
    if not isinstance(done, list) or not all(_is_offset(o) for o in done):
        raise CorruptDataError('"done" must be a list of offsets >= 0')
    return TimerProgress(low, done)


def encode_done(offsets: Iterable[int]) -> bytes:
    """A journal payload: these timer-queue offsets are done."""
    return json.dumps({"done": list(offsets)}, separators=(",", ":")).encode()


def parse_done(payload: bytes) -> list[int] | None:
    """The offsets of an :func:`encode_done` payload; None if it is not one."""
    try:
        done = json.loads(payload)["done"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(done, list) or not all(_is_offset(o) for o in done):
        return None
    return done


def _is_offset(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
