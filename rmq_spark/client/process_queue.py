"""The pulled-but-not-yet-consumed messages of one queue (RocketMQ's ProcessQueue).

A consumer pulls a batch into the queue's :class:`ProcessQueue`
(:meth:`~ProcessQueue.put_messages`), hands the messages to its consume threads, and removes
each one when done (:meth:`~ProcessQueue.remove_messages`). What it may commit is the
smallest offset still in flight, or, when nothing is in flight, one past the largest offset
ever put: every message below the committable offset is done.

**A slow first message holds back every later commit.** Put 0..9, finish 1..9: the
committable offset stays 0, because message 0 is not done. A crash now re-delivers all ten
(at-least-once), so consumers must be idempotent. This is the price of committing a single
number per queue.

The committable offset never decreases: it is the largest value ever handed out, and an
offset put below it is ignored (it was already committed past).

Offsets are kept as numpy arrays, one *run* per put (sorted offsets, body sizes, which are
still in flight), runs sorted and not overlapping; a put that overlaps earlier runs merges
them. A pull's put and a listener batch's removal are a few array operations each, not
work per message; the committable offset is the first live offset of the first run
(a cursor that only moves forward). Thread-safe: one lock, taken once per call.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable

import numpy as np

from rmq_spark.clock import now_ms
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import is_valid_offset

__all__ = ["NOTHING_PUT", "ProcessQueue"]

log = logging.getLogger("rmq_spark.client")

#: :meth:`ProcessQueue.committable_offset` before any message was put (RocketMQ's -1).
NOTHING_PUT = -1


class _Run:
    """The offsets of one put: sorted, with their body sizes and which are in flight.

    ``live[:cursor]`` are all False (done); ``count`` is how many are True.
    """

    __slots__ = ("count", "cursor", "first", "last", "live", "offsets", "sizes")

    def __init__(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        self.offsets = offsets
        self.sizes = sizes
        self.live = np.ones(len(offsets), dtype=bool)
        self.count = len(offsets)
        self.cursor = 0
        self.first = int(offsets[0])
        self.last = int(offsets[-1])


def _first(run: _Run) -> int:
    return run.first


class ProcessQueue:
    """In-flight offsets of one queue, with the committable offset they allow."""

    def __init__(self, clock_ms: Callable[[], int] = now_ms) -> None:
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._runs: list[_Run] = []  # sorted by first offset; each has offsets in flight
        self._count = 0
        self._max_put = NOTHING_PUT
        self._committable = NOTHING_PUT  # the largest committable offset handed out
        self._msg_size = 0
        self._dropped = False
        self.last_pull_timestamp_ms = clock_ms()
        self.last_consume_timestamp_ms = clock_ms()

    # --- pulled / consumed ---------------------------------------------------------------

    def put_messages(
        self,
        offsets: Iterable[int] | np.ndarray,
        body_sizes: Iterable[int] | np.ndarray | None = None,
    ) -> int:
        """Add pulled messages; returns how many were new.

        Offsets already in flight, and offsets below the committable offset (already
        committed past), are ignored. ``body_sizes`` (same length as ``offsets``) feed
        :attr:`msg_size`. Integer numpy arrays are taken as they are (no copy, not to be
        changed afterwards): the fast way.
        """
        offsets = _whole_numbers(offsets, "offset")
        if body_sizes is None:
            sizes = np.zeros(len(offsets), dtype=np.int64)
        else:
            sizes = _whole_numbers(body_sizes, "body size")
        if len(sizes) != len(offsets):
            raise InvalidArgumentError(
                f"{len(offsets)} offsets but {len(sizes)} body sizes; give one size per offset"
            )
        with self._lock:
            self.last_pull_timestamp_ms = self._clock_ms()
            if not len(offsets):
                return 0
            if offsets[0] > self._max_put and (
                len(offsets) == 1 or bool((offsets[1:] > offsets[:-1]).all())
            ):
                # the usual case: a pull past everything put so far, offsets increasing
                self._runs.append(_Run(offsets, sizes))
                added, added_size = len(offsets), int(sizes.sum())
            else:
                added, added_size = self._put_merging(offsets, sizes)
            if added:
                self._count += added
                self._msg_size += added_size
                self._max_put = max(self._max_put, int(offsets.max()))
            return added

    def _put_merging(self, offsets: np.ndarray, sizes: np.ndarray) -> tuple[int, int]:
        """Put offsets that may repeat, go back, or fall among earlier runs (lock held);
        returns (messages added, their body bytes)."""
        unique, first_seen = np.unique(offsets, return_index=True)
        sizes = sizes[first_seen]  # a repeated offset counts once, with its first size
        keep = unique >= self._committable
        if not keep.all():
            log.debug(
                "offsets %s are below the committed %d; ignored",
                unique[~keep].tolist(),
                self._committable,
            )
            unique, sizes = unique[keep], sizes[keep]
        if not len(unique):
            return 0, 0
        lo, hi = int(unique[0]), int(unique[-1])
        touched = [run for run in self._runs if run.first <= hi and run.last >= lo]
        if touched:
            live_offsets = np.concatenate([run.offsets[run.live] for run in touched])
            live_sizes = np.concatenate([run.sizes[run.live] for run in touched])
            new = ~np.isin(unique, live_offsets)
            unique, sizes = unique[new], sizes[new]
            merged = np.concatenate([live_offsets, unique])
            order = np.argsort(merged, kind="stable")
            run = _Run(merged[order], np.concatenate([live_sizes, sizes])[order])
            for old in touched:
                self._runs.remove(old)
        else:
            run = _Run(unique, sizes)
        bisect.insort(self._runs, run, key=_first)
        return len(unique), int(sizes.sum())

    def remove_messages(self, offsets: Iterable[int] | np.ndarray) -> int:
        """Mark messages consumed; returns the committable offset (see :meth:`committable_offset`).

        Offsets not in flight are ignored.
        """
        offsets = _whole_numbers(offsets, "offset")
        with self._lock:
            self.last_consume_timestamp_ms = self._clock_ms()
            if len(offsets) and self._runs:
                self._remove_locked(offsets)
            return self._committable_locked()

    def _remove_locked(self, offsets: np.ndarray) -> None:
        lo, hi = int(offsets.min()), int(offsets.max())
        for run in [run for run in self._runs if run.first <= hi and run.last >= lo]:
            at = np.searchsorted(run.offsets, offsets)
            at[at == len(run.offsets)] = 0
            at = at[run.offsets[at] == offsets]  # the offsets that are in this run
            at = at[run.live[at]]  # ... and still in flight
            if not len(at):
                continue
            if len(at) > 1 and not bool((at[1:] > at[:-1]).all()):
                at = np.unique(at)  # an offset given twice is removed once
            run.live[at] = False
            run.count -= len(at)
            self._count -= len(at)
            self._msg_size -= int(run.sizes[at].sum())
            if not run.count:
                self._runs.remove(run)

    def committable_offset(self) -> int:
        """The offset to commit: every message below it is done.

        The smallest offset in flight, or (largest offset ever put) + 1 when none is; ``-1``
        when nothing was ever put. Never decreases.
        """
        with self._lock:
            return self._committable_locked()

    def _committable_locked(self) -> int:
        if self._runs:
            run = self._runs[0]  # the smallest offsets; it has some in flight
            cursor = run.cursor
            if not run.live[cursor]:
                cursor += int(np.argmax(run.live[cursor:]))
                run.cursor = cursor
            candidate = int(run.offsets[cursor])
        elif self._max_put == NOTHING_PUT:
            candidate = NOTHING_PUT
        else:
            candidate = self._max_put + 1
        self._committable = max(self._committable, candidate)
        return self._committable

    # --- state ---------------------------------------------------------------------------

    @property
    def msg_count(self) -> int:
        """Messages in flight."""
        with self._lock:
            return self._count

    @property
    def msg_size(self) -> int:
        """Sum of the body sizes of the messages in flight."""
        with self._lock:
            return self._msg_size

    @property
    def max_offset_put(self) -> int:
        """The largest offset ever put, or -1."""
        with self._lock:
            return self._max_put

    def in_flight_offsets(self) -> list[int]:
        """The offsets in flight, sorted."""
        with self._lock:
            if not self._runs:
                return []
            return np.concatenate([run.offsets[run.live] for run in self._runs]).tolist()

    @property
    def is_dropped(self) -> bool:
        """True once the queue went to another consumer: stop consuming, do not commit."""
        return self._dropped

    @is_dropped.setter
    def is_dropped(self, dropped: bool) -> None:
        self._dropped = bool(dropped)

    def drop(self) -> None:
        self.is_dropped = True


def _whole_numbers(values: Iterable[int] | np.ndarray, what: str) -> np.ndarray:
    """``values`` as a 1-d int64 array; an error names the first that is not a whole
    number >= 0 (and fits a Java long)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and values.ndim == 1:
        array = values.astype(np.int64, copy=False)  # a uint64 too large turns negative
        if len(array) and array.min() < 0:
            bad = values[array < 0][0].item()
            raise InvalidArgumentError(f"{what} {bad!r} must be a whole number >= 0")
        return array
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    for value in items:
        if not is_valid_offset(value):
            raise InvalidArgumentError(f"{what} {value!r} must be a whole number >= 0")
    return np.array(items, dtype=np.int64)
