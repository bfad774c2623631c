"""Short-circuit reads, the reader's side (:mod:`rmq_spark.wire.short_circuit`): a queue
range read from the broker's files on this host, through file descriptors the broker
passed after checking the caller's rights.

:class:`ShortCircuit` is one connection to a broker's socket; :meth:`ShortCircuit.open_range`
asks for a range and maps the files it gets (read-only); :class:`LocalRange` then reads the
records of consecutive offsets, as a pull would answer them, never past the end the broker
named. :class:`ShortCircuitUnavailable` means "read through the broker instead": no
socket, another broker behind it, a file gone, a broker that does not know the protocol.
A refusal of the caller's rights raises what a pull would raise.

>>> with ShortCircuit("/tmp/rocketlite-10911.sock", "broker-a") as sc:   # doctest: +SKIP
...     with sc.open_range(mq, 0, 1000) as local:
...         buffer, sizes = local.read(0, 16 << 20)
"""

from __future__ import annotations

import mmap
import os
import socket
from collections.abc import Iterable

import numpy as np

from rmq_spark.auth.signature import signed_metadata
from rmq_spark.codec.consume_queue import ENTRY_SIZE, decode_entries
from rmq_spark.errors import PermissionDeniedError, RocketliteError, UnauthenticatedError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.short_circuit import MAX_FDS, VERSION, WireError, recv_message, send_message

__all__ = ["LocalRange", "ShortCircuit", "ShortCircuitUnavailable"]


class ShortCircuitUnavailable(RocketliteError):
    """Short-circuit reading is not possible here; read through the broker instead."""


class ShortCircuit:
    """One connection to the short-circuit socket of broker ``broker_name``."""

    def __init__(
        self,
        path: str,
        broker_name: str,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.path = path
        self.broker_name = broker_name
        self._credentials = (access_key, secret_key or "") if access_key else None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(path)
        except OSError as exc:
            self._sock.close()
            raise ShortCircuitUnavailable(f"no short-circuit socket at {path}: {exc}") from None

    def open_range(
        self, mq: MessageQueue, start: int, end: int, group: str | None = None
    ) -> LocalRange:
        """The files of ``[start, end)`` of ``mq`` (or of its first part: the answer's
        ``end`` says how far they go), mapped."""
        request = {
            "version": VERSION,
            "broker": self.broker_name,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "start": start,
            "end": end,
            "group": group,
            "auth": signed_metadata(*self._credentials) if self._credentials else [],
        }
        try:
            send_message(self._sock, request)
            answer, fds = recv_message(self._sock, MAX_FDS)
        except (OSError, WireError) as exc:
            raise ShortCircuitUnavailable(f"short-circuit socket {self.path}: {exc}") from None
        try:
            if not answer.get("ok"):
                _raise_refusal(answer, self.path)
            return LocalRange(answer, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ShortCircuit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_refusal(answer: dict, path: str) -> None:
    code, message = answer.get("code"), str(answer.get("message", ""))
    if code == "PERMISSION_DENIED":
        raise PermissionDeniedError(message)
    if code == "UNAUTHENTICATED":
        raise UnauthenticatedError(message)
    raise ShortCircuitUnavailable(f"short-circuit socket {path} refused ({code}): {message}")


class LocalRange:
    """Queue offsets ``[start, end)`` of one queue, read from mapped files."""

    def __init__(self, answer: dict, fds: list[int]) -> None:
        self.min_offset = int(answer["minOffset"])
        self.max_offset = int(answer["maxOffset"])
        self.start = int(answer["start"])
        self.end = int(answer["end"])
        queue_spans = [(int(a), int(b)) for a, b in answer["queueFiles"]]
        segment_spans = [(int(a), int(b)) for a, b in answer["segments"]]
        if len(fds) != len(queue_spans) + len(segment_spans):
            raise ShortCircuitUnavailable(
                f"the broker named {len(queue_spans) + len(segment_spans)} files and passed "
                f"{len(fds)}"
            )
        self._maps: list[mmap.mmap] = []
        try:
            self._queue = self._map_all(queue_spans, fds[: len(queue_spans)])
            self._segments = self._map_all(segment_spans, fds[len(queue_spans) :])
        except (OSError, ValueError) as exc:
            self.close()
            raise ShortCircuitUnavailable(f"cannot map the files passed: {exc}") from None
        self._segment_starts = np.array([s for s, _ in segment_spans], dtype=np.int64)

    def _map_all(
        self, spans: list[tuple[int, int]], fds: Iterable[int]
    ) -> list[tuple[int, int, mmap.mmap]]:
        mapped = []
        for (start, size), fd in zip(spans, fds, strict=True):
            if os.fstat(fd).st_size < size:  # truncated since: not what the broker saw
                raise ShortCircuitUnavailable("a file passed is shorter than the broker said")
            m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            self._maps.append(m)
            mapped.append((start, size, m))
        return mapped

    def entries(self, first: int, last: int) -> np.ndarray:
        """Consume-queue entries of offsets ``[first, last)`` (within the range)."""
        parts = []
        lo, hi = first * ENTRY_SIZE, last * ENTRY_SIZE
        for start, size, m in self._queue:
            a, b = max(lo, start), min(hi, start + size)
            if a < b:
                parts.append(m[a - start : b - start])
        return decode_entries(b"".join(parts))

    def read(
        self, offset: int, max_bytes: int, tag_codes: np.ndarray | None = None
    ) -> tuple[bytes | memoryview, np.ndarray, int]:
        """Records from ``offset`` (at least one, up to ``max_bytes``), back to back, their
        sizes, and the offset after the last entry looked at. With ``tag_codes`` only
        entries whose tag hash code is among them are read (like a broker's tag filter)."""
        if not self.start <= offset < self.end:
            raise ValueError(f"offset {offset} is outside [{self.start}, {self.end})")
        found = self.entries(offset, min(self.end, offset + 8192))
        sizes = found["size"].astype(np.int64)
        keep = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
        found, following = found[:keep], offset + keep
        if tag_codes is not None:
            found = found[np.isin(found["tag_code"], tag_codes)]
        sizes = found["size"].astype(np.int64)
        return self._gather(found["physical_offset"], sizes), sizes, following

    def _gather(self, phys: np.ndarray, sizes: np.ndarray) -> bytes | memoryview:
        """The records at ``phys``, back to back: runs of records that already lie back to
        back in one segment are sliced whole (one run, the usual case: no copy at all)."""
        if not len(phys):
            return b""
        phys = phys.astype(np.int64)
        which = np.searchsorted(self._segment_starts, phys, side="right") - 1
        if which.min() < 0:
            raise ShortCircuitUnavailable("an entry points before the segments passed")
        ends = phys + sizes
        breaks = np.flatnonzero((phys[1:] != ends[:-1]) | (which[1:] != which[:-1])) + 1
        firsts, lasts = np.r_[0, breaks], np.r_[breaks, len(phys)] - 1
        parts = []
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            start, size, m = self._segments[int(which[a])]
            lo, hi = int(phys[a]) - start, int(ends[b]) - start
            if hi > size:
                raise ShortCircuitUnavailable("an entry points past the segments passed")
            parts.append(memoryview(m)[lo:hi])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        for m in self._maps:
            try:
                m.close()
            except BufferError:
                pass
        self._maps = []

    def __enter__(self) -> LocalRange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
