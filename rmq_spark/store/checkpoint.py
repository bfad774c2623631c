"""The store's two checkpoint files: RocketMQ's ``checkpoint`` and rocketlite's own.

``rocketlite.checkpoint`` says up to where the commit log and consume queues are known
durable. Two fixed slots are written alternately, each with a sequence number and a CRC, so
a write torn by a crash leaves the previous slot intact. Recovery after a crash scans the
commit log from the segment holding ``safe_offset``: everything before it was flushed and
dispatched.

``checkpoint`` is Apache RocketMQ's file, kept so RocketMQ recovers a store rocketlite
wrote: a 4096-byte file holding three big-endian longs, the store timestamps of the last
flushed commit-log record (offset 0), consume-queue entry (8) and index entry (16). After a
crash RocketMQ starts its scan at the newest commit-log segment whose first record is older
than the smaller of the first two, less 3 s; rocketlite does the same on a store that has
only RocketMQ's file (:func:`rocketmq_recovery_start`).

Stores written by rocketlite before the split hold the slots in ``checkpoint`` itself; they
are moved to ``rocketlite.checkpoint`` when the store opens (:func:`open_checkpoints`).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.store.mapped_file import fsync_dir

ROCKETMQ_FILE = "checkpoint"
ROCKETLITE_FILE = "rocketlite.checkpoint"

_SLOT = struct.Struct(">IQqqq")  # magic, sequence, safe offset, physic ts, logics ts
_MAGIC = 0x524C4350  # "RLCP"
_SLOT_BYTES = 512
_FILE_BYTES = 2 * _SLOT_BYTES

_ROCKETMQ = struct.Struct(">qqq")  # physic, logics, index timestamps
ROCKETMQ_FILE_BYTES = 4096  # one OS page, as RocketMQ maps it
#: RocketMQ starts a crash recovery at a segment this much older than its checkpoint
ROCKETMQ_RECOVERY_MARGIN_MS = 3_000


@dataclass(frozen=True)
class Checkpoint:
    sequence: int = 0
    #: every record before this physical offset is flushed with its consume-queue entry
    safe_offset: int = 0
    #: store timestamp of the last flushed commit-log record (ms)
    physic_msg_timestamp: int = 0
    #: store timestamp of the last record whose consume-queue entry is flushed (ms)
    logics_msg_timestamp: int = 0


@dataclass(frozen=True)
class RocketMQCheckpoint:
    """RocketMQ's ``checkpoint``: store timestamps (ms) of what is known flushed."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0

    @property
    def min_timestamp(self) -> int:
        """Where RocketMQ's crash recovery may start: records stored before this are safe."""
        low = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(low - ROCKETMQ_RECOVERY_MARGIN_MS, 0)


@dataclass(frozen=True)
class StoreCheckpoints:
    """Both checkpoints of a store directory, None where the file is absent or unreadable."""

    rocketmq: RocketMQCheckpoint | None
    rocketlite: Checkpoint | None


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


def newest_slot(data: bytes) -> Checkpoint | None:
    """The newest valid slot of a slot file's bytes, or None when it holds none."""
    slots = [decode_slot(data[i * _SLOT_BYTES : (i + 1) * _SLOT_BYTES]) for i in (0, 1)]
    valid = [s for s in slots if s is not None]
    return max(valid, key=lambda s: s.sequence) if valid else None


def encode_rocketmq(cp: RocketMQCheckpoint) -> bytes:
    return _ROCKETMQ.pack(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp)


def decode_rocketmq(data: bytes) -> RocketMQCheckpoint | None:
    """RocketMQ's fields, or None for a file too short or holding rocketlite's old slots."""
    if len(data) < _ROCKETMQ.size or newest_slot(data) is not None:
        return None
    return RocketMQCheckpoint(*_ROCKETMQ.unpack_from(data))


def rocketmq_recovery_start(
    segment_first_timestamps: Sequence[tuple[int, int | None]], cp: RocketMQCheckpoint
) -> int | None:
    """Where a crash recovery guided by RocketMQ's checkpoint starts scanning.

    ``segment_first_timestamps`` lists (start offset, store timestamp of the segment's first
    record, or None when it holds none) in log order. The answer is the start of the newest
    segment whose first record was stored at or before ``cp.min_timestamp``; None (scan
    everything) when none was.

    >>> cp = RocketMQCheckpoint(10_000, 9_000, 0)
    >>> rocketmq_recovery_start([(0, 1_000), (100, 5_000), (200, 7_000)], cp)
    100
    >>> rocketmq_recovery_start([(0, 8_000)], cp) is None
    True
    """
    limit = cp.min_timestamp
    for start, first in reversed(segment_first_timestamps):
        if first is not None and 0 < first <= limit:
            return start
    return None


def read_store_checkpoints(root: Path) -> StoreCheckpoints:
    """Both checkpoints of the store at ``root``, read without writing anything."""
    rocketmq_bytes = _read_whole(root / ROCKETMQ_FILE)
    ours_bytes = _read_whole(root / ROCKETLITE_FILE)
    ours = newest_slot(ours_bytes) if ours_bytes is not None else None
    if ours is None and rocketmq_bytes is not None:
        ours = newest_slot(rocketmq_bytes)  # a store from before the split
    rocketmq = decode_rocketmq(rocketmq_bytes) if rocketmq_bytes is not None else None
    return StoreCheckpoints(rocketmq=rocketmq, rocketlite=ours)


def _read_whole(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _allocate(fd: int, size: int) -> None:
    """Reserve the file's blocks now, so a checkpoint write never needs free space later."""
    if os.fstat(fd).st_size < size:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            raise


class CheckpointFile:
    """``rocketlite.checkpoint``: the safe offset, in two alternating slots."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _allocate(self._fd, _FILE_BYTES)
        self.last = self.read()

    def read(self) -> Checkpoint | None:
        """The newest valid slot, or None when no checkpoint was ever written."""
        return newest_slot(os.pread(self._fd, _FILE_BYTES, 0))

    def write(self, safe_offset: int, physic_ts: int, logics_ts: int) -> Checkpoint:
        seq = (self.last.sequence + 1) if self.last else 1
        cp = Checkpoint(seq, safe_offset, physic_ts, logics_ts)
        os.pwrite(self._fd, encode_slot(cp), (seq % 2) * _SLOT_BYTES)
        os.fdatasync(self._fd)
        self.last = cp
        return cp

    def close(self) -> None:
        os.close(self._fd)


class RocketMQCheckpointFile:
    """RocketMQ's ``checkpoint``. Old rocketlite slots found in it are replaced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._fd, ROCKETMQ_FILE_BYTES, 0)
        self.last = decode_rocketmq(data)
        if self.last is None and any(data):  # rocketlite's old slots: not RocketMQ's fields
            os.pwrite(self._fd, bytes(ROCKETMQ_FILE_BYTES), 0)
            os.fdatasync(self._fd)
        _allocate(self._fd, ROCKETMQ_FILE_BYTES)

    def write(self, cp: RocketMQCheckpoint) -> None:
        os.pwrite(self._fd, encode_rocketmq(cp), 0)
        os.fdatasync(self._fd)
        self.last = cp

    def close(self) -> None:
        os.close(self._fd)


def open_checkpoints(root: Path) -> tuple[CheckpointFile, RocketMQCheckpointFile]:
    """Open (creating) both files. A store from before the split keeps its safe offset:
    the slots in ``checkpoint`` are copied to ``rocketlite.checkpoint`` (made durable)
    before ``checkpoint`` is overwritten in RocketMQ's layout."""
    old = _read_whole(root / ROCKETMQ_FILE)
    legacy = newest_slot(old) if old is not None else None
    ours = CheckpointFile(root / ROCKETLITE_FILE)
    try:
        if legacy is not None and ours.last is None:
            ours.last = Checkpoint(legacy.sequence - 1)
            ours.write(legacy.safe_offset, legacy.physic_msg_timestamp, legacy.logics_msg_timestamp)
            fsync_dir(root)
        return ours, RocketMQCheckpointFile(root / ROCKETMQ_FILE)
    except BaseException:
        ours.close()
        raise
