"""The checkpoint file: up to where the commit log and consume queues are known durable.

Two fixed slots are written alternately, each with a sequence number and a CRC, so a write
torn by a crash leaves the previous slot intact. Recovery after a crash scans the commit
log from ``safe_offset``: everything before it was flushed and dispatched.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

_SLOT = struct.Struct(">IQqqq")  # magic, sequence, safe offset, physic ts, logics ts
_MAGIC = 0x524C4350  # "RLCP"
_SLOT_BYTES = 512
_FILE_BYTES = 2 * _SLOT_BYTES


@dataclass(frozen=True)
class Checkpoint:
    sequence: int = 0
    #: every record before this physical offset is flushed with its consume-queue entry
    safe_offset: int = 0
    #: store timestamp of the last flushed commit-log record (ms)
    physic_msg_timestamp: int = 0
    #: store timestamp of the last record whose consume-queue entry is flushed (ms)
    logics_msg_timestamp: int = 0


def encode_slot(cp: Checkpoint) -> bytes:
    body = _SLOT.pack(
        _MAGIC, cp.sequence, cp.safe_offset, cp.physic_msg_timestamp, cp.logics_msg_timestamp
    )
    return body + struct.pack(">I", zlib.crc32(body))


def decode_slot(data: bytes) -> Checkpoint | None:
    body, crc = data[: _SLOT.size], data[_SLOT.size : _SLOT.size + 4]
    if len(crc) < 4 or struct.unpack(">I", crc)[0] != zlib.crc32(body):
        return None
    magic, seq, safe, physic, logics = _SLOT.unpack(body)
    if magic != _MAGIC:
        return None
    return Checkpoint(seq, safe, physic, logics)


class CheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < _FILE_BYTES:
            # Allocated now, so writing a checkpoint never needs free space later.
            try:
                os.posix_fallocate(self._fd, 0, _FILE_BYTES)
            except OSError:
                os.close(self._fd)
                raise
        self.last = self.read()

    def read(self) -> Checkpoint | None:
        """The newest valid slot, or None when no checkpoint was ever written."""
        slots = [decode_slot(os.pread(self._fd, _SLOT_BYTES, i * _SLOT_BYTES)) for i in (0, 1)]
        valid = [s for s in slots if s is not None]
        return max(valid, key=lambda s: s.sequence) if valid else None

    def write(self, safe_offset: int, physic_ts: int, logics_ts: int) -> Checkpoint:
        seq = (self.last.sequence + 1) if self.last else 1
        cp = Checkpoint(seq, safe_offset, physic_ts, logics_ts)
        os.pwrite(self._fd, encode_slot(cp), (seq % 2) * _SLOT_BYTES)
        os.fdatasync(self._fd)
        self.last = cp
        return cp

    def close(self) -> None:
        os.close(self._fd)
