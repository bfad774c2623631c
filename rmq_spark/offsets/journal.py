"""The consumer-offset journal: every change of the offset table, appended before it is
acknowledged, so an acknowledged commit survives a crash of the broker.

A record is ``[length u32 BE][crc32 of payload u32 BE][payload]``; the payload is compact
JSON, one of::

    {"set": [topic, group, {"queueId": offset, ...}]}   offsets as stored after the commit
    {"drop": [topic, group]}                            a (topic, group) entry removed

Values are the stored result, never the request, so replaying a record twice changes
nothing. A torn or corrupt tail (a crash in the middle of a write) ends the journal: the
records before it are kept and the tail is cut off when the journal is opened.

Durability: :meth:`OffsetJournal.append` returns once the record is in the file (the page
cache), which a killed broker process cannot lose; with ``sync``,
:meth:`OffsetJournal.make_durable` then waits for an fdatasync, shared by every append
that arrived meanwhile (group commit), which a power loss cannot lose either.

>>> payload = encode_set("TopicA", "GroupA", {0: 42})
>>> decode_records(frame(payload))[0]
(('set', 'TopicA', 'GroupA', {0: 42}), 44)
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("rmq_spark.store")

_HEAD = struct.Struct(">II")
#: a record longer than this is taken for garbage (a table entry has at most 2**31 queues,
#: but one commit call carries at most the broker's max_request_items)
MAX_RECORD_BYTES = 64 << 20

Change = tuple  # ("set", topic, group, {queue_id: offset}) | ("drop", topic, group)


def encode_set(topic: str, group: str, offsets: dict[int, int]) -> bytes:
    body = {str(queue_id): offset for queue_id, offset in offsets.items()}
    return json.dumps({"set": [topic, group, body]}, separators=(",", ":")).encode()


def encode_drop(topic: str, group: str) -> bytes:
    return json.dumps({"drop": [topic, group]}, separators=(",", ":")).encode()


def frame(payload: bytes) -> bytes:
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(data: bytes) -> list[tuple[Change, int]]:
    """Every whole, intact record of ``data`` with the offset just past it, in order; stops
    at the first torn or corrupt one."""
    return decode_frames(data, _parse)


def decode_frames(data: bytes, parse: Callable[[bytes], Any]) -> list[tuple[Any, int]]:
    """The framed records of ``data``, each parsed by ``parse`` (None = not a record), with
    the offset just past it; stops at the first torn, corrupt or unparsable one."""
    records = []
    pos = 0
    while pos + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            break
        payload = data[pos + _HEAD.size : end]
        if zlib.crc32(payload) != crc:
            break
        parsed = parse(payload)
        if parsed is None:
            break
        records.append((parsed, end))
        pos = end
    return records


def _parse(payload: bytes) -> Change | None:
    try:
        document = json.loads(payload)
        if "set" in document:
            topic, group, body = document["set"]
            return ("set", topic, group, {int(q): int(o) for q, o in body.items()})
        topic, group = document["drop"]
        return ("drop", topic, group)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read_journal(path: Path, parse: Callable[[bytes], Any] | None = None) -> tuple[list[Any], int]:
    """The changes of the journal at ``path`` (none if absent) and the length of its intact
    part; ``parse`` reads a payload (default: offset-table changes)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    records = decode_frames(data, parse or _parse)
    good = records[-1][1] if records else 0
    if good < len(data):
        log.warning(
            "journal %s: %d bytes after offset %d are torn or corrupt (a crash "
            "while writing); the %d records before them are kept",
            path,
            len(data) - good,
            good,
            len(records),
        )
    return [change for change, _ in records], good


class OffsetJournal:
    """An open journal file, appended to by many threads."""

    def __init__(self, path: Path, *, sync: bool, keep_bytes: int | None = None) -> None:
        """Open (create) ``path`` for appending; ``keep_bytes`` cuts a torn tail first."""
        self.path = path
        self._sync = sync
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if keep_bytes is not None and os.fstat(self._fd).st_size > keep_bytes:
            os.ftruncate(self._fd, keep_bytes)
        self._written = self._synced = os.fstat(self._fd).st_size
        #: a failed write may have left part of a record after ``_written``
        self._torn = False
        self._write_lock = threading.Lock()
        self._sync_lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._written

    def append(self, payload: bytes) -> int:
        """Write one record (into the page cache); returns the journal's end after it.

        A write that fails part-way (a full disk) raises OSError, and the part written is
        cut off again: records appended later must not sit behind a torn one, where
        replay, which stops at the first torn record, would never reach them. When even
        the cut fails, every later append retries it first and fails while it cannot.
        """
        record = frame(payload)
        with self._write_lock:
            self._cut_torn_tail()
            self._torn = True  # until the whole record is known to be in the file
            written = os.write(self._fd, record)
            if written != len(record):
                self._cut_torn_tail()
                raise OSError(
                    errno.ENOSPC,
                    f"short write ({written} of {len(record)} bytes; the disk is full?)",
                    str(self.path),
                )
            self._torn = False
            self._written += written
            return self._written

    def _cut_torn_tail(self) -> None:
        """Truncate the file back to its last whole record if a failed write left a tail."""
        if self._torn:
            os.ftruncate(self._fd, self._written)
            self._torn = False

    def make_durable(self, end: int) -> None:
        """With ``sync``: fdatasync unless another caller's sync already covered ``end``
        (group commit). Without: nothing (the page cache survives a killed process)."""
        if not self._sync:
            return
        with self._sync_lock:
            if self._synced >= end:
                return
            target = self._written
            os.fdatasync(self._fd)
            self._synced = target

    def truncate(self) -> None:
        """Empty the journal (its records are saved elsewhere); appends start over."""
        with self._write_lock, self._sync_lock:
            os.ftruncate(self._fd, 0)
            self._written = self._synced = 0
            self._torn = False

    def close(self) -> None:
        os.close(self._fd)
