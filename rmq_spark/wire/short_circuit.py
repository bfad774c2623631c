"""The short-circuit read protocol between a broker and a reader on the same host.

Modelled on HDFS's short-circuit local reads: the reader asks the broker, over a Unix domain
socket, for a range of one queue; the broker checks the caller's rights as it would for a
pull, then answers which files hold the range and passes them as open, read-only file
descriptors (``SCM_RIGHTS``). The reader maps them and reads the records itself, no byte
of them crossing a socket; it never opens a store file by its path, so it needs no rights on
the store directory.

A message is a 4-byte big-endian length and that many bytes of JSON; an answer's file
descriptors travel with its first bytes, in the order the answer lists the files.

Request::

    {"version": 1, "broker": "broker-a", "topic": "orders", "queueId": 0,
     "start": 100, "end": 5000, "group": "etl" | null, "auth": [[name, value], ...]}

Answer (``ok``)::

    {"ok": true, "broker": "broker-a", "minOffset": 0, "maxOffset": 7000,
     "start": 100, "end": 5000,                 # what the files hold of the range asked
     "queueFiles": [[byteStart, size], ...],    # consume-queue files: entry i at i * 20
     "segments": [[physicalStart, size], ...]}  # commit-log segments

or ``{"ok": false, "code": "...", "message": "..."}`` with a code of :data:`CODES`.

>>> decode_frame_length(encode_message({"ok": True})[:4])
12
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any, Protocol

VERSION = 1
#: refusals: PERMISSION_DENIED and UNAUTHENTICATED fail the read (a pull would fail too);
#: the others make the reader fall back to pulls
CODES = ("PERMISSION_DENIED", "UNAUTHENTICATED", "NOT_FOUND", "WRONG_BROKER", "INVALID", "ERROR")
#: most file descriptors one answer carries (the kernel's SCM_RIGHTS limit is 253)
MAX_FDS = 64
MAX_MESSAGE_BYTES = 1 << 20
_LENGTH = struct.Struct(">I")


class WireError(Exception):
    """The other side broke the protocol or went away."""


class Span(Protocol):
    """A file of a range: its path, the first byte it holds and its size."""

    @property
    def path(self) -> os.PathLike[str]: ...
    @property
    def start(self) -> int: ...
    @property
    def size(self) -> int: ...


class RangeFiles(Protocol):
    """The store's files of a queue range (``MessageStore.range_files``)."""

    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def queue_files(self) -> Sequence[Span]: ...
    @property
    def segments(self) -> Sequence[Span]: ...


def range_answer(broker: str, found: RangeFiles) -> tuple[dict[str, Any], list[int]]:
    """The ``ok`` answer for ``found``, and its files opened read-only in the order the
    answer lists them (the caller sends, then closes them). An OSError closes what was
    opened before it."""
    fds: list[int] = []
    try:
        for span in [*found.queue_files, *found.segments]:
            fds.append(os.open(span.path, os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    answer = {
        "ok": True,
        "broker": broker,
        "minOffset": found.min_offset,
        "maxOffset": found.max_offset,
        "start": found.start,
        "end": found.end,
        "queueFiles": [[s.start, s.size] for s in found.queue_files],
        "segments": [[s.start, s.size] for s in found.segments],
    }
    return answer, fds


def encode_message(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    return _LENGTH.pack(len(data)) + data


def decode_frame_length(head: bytes) -> int:
    (length,) = _LENGTH.unpack(head)
    if length > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {length} bytes announced; at most {MAX_MESSAGE_BYTES}")
    return length


def send_message(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send ``obj``, with ``fds`` attached to its first bytes."""
    frame = encode_message(obj)
    sent = socket.send_fds(sock, [frame], fds) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(frame[sent:])


def recv_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message and the file descriptors that came with it (the caller owns them)."""
    if max_fds:
        data, fds, _flags, _addr = socket.recv_fds(sock, 65536, max_fds)
    else:
        data, fds = sock.recv(65536), []
    try:
        if not data:
            raise WireError("the other side closed the connection")
        while len(data) < _LENGTH.size:
            data += _recv_some(sock)
        length = decode_frame_length(data[: _LENGTH.size])
        while len(data) < _LENGTH.size + length:
            data += _recv_some(sock)
        body = data[_LENGTH.size : _LENGTH.size + length]
        obj = json.loads(body)
        if not isinstance(obj, dict):
            raise WireError("a message must be a JSON object")
        return obj, list(fds)
    except BaseException:
        for fd in fds:
            _close_quietly(fd)
        raise


def _recv_some(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise WireError("the connection closed in the middle of a message")
    return chunk


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
