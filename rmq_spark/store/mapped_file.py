"""A fixed-size file: written with ``pwrite``, read through ``mmap``.

Commit-log segments and consume-queue files are both MappedFiles. A file is named by the
global byte offset of its first byte (20 digits), so its name says where it belongs.

A ``preallocate``d file (commit-log segments) has all its blocks allocated when it is made
(``posix_fallocate``): a full disk then fails the creation, not a later write, and the file
has no holes, whose reading through the map kills the process with SIGBUS on a full tmpfs.
Other files are sparse: blocks are allocated as they are written.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path

log = logging.getLogger("rmq_spark.store")


def file_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One segment. ``write_pos`` and ``flushed_pos`` are relative to the file start."""

    def __init__(
        self,
        path: Path,
        start_offset: int,
        size: int,
        *,
        create: bool,
        grow: bool = False,
        preallocate: bool = False,
    ) -> None:
        """Open (``create``: create and size) the file. With ``grow``, an existing file
        shorter than ``size`` is extended with zeros: that is what a crash leaves between
        creating a file and sizing it, or inside :meth:`zero_from`. With ``preallocate`` a
        created file gets its blocks now (ENOSPC: the file is removed again), and an
        existing one with ``grow`` (the one written next) gets its missing blocks if the
        disk has room (older versions made sparse files)."""
        self.path = path
        self.start_offset = start_offset
        self.size = size
        self.preallocate = preallocate
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(path, flags, 0o644)
        if create:
            try:
                self._size_new(size)
            except OSError:
                os.close(self._fd)
                path.unlink(missing_ok=True)
                raise
        actual = os.fstat(self._fd).st_size
        if grow and actual < size:
            log.warning("%s is %d bytes, expected %d: extending it with zeros", path, actual, size)
            os.ftruncate(self._fd, size)
            actual = size
        if grow and preallocate and not create and actual == size:
            try:
                os.posix_fallocate(self._fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP):
                    os.close(self._fd)
                    raise
        if actual != size:
            os.close(self._fd)
            raise OSError(f"{path} is {actual} bytes, expected {size}")
        self._mmap = mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)
        self.write_pos = 0
        self.flushed_pos = 0
        self.closed = False

    def _size_new(self, size: int) -> None:
        if self.preallocate:
            try:
                os.posix_fallocate(self._fd, 0, size)
                return
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise OSError(
                        exc.errno, f"no room for a {size:,}-byte file ({exc.strerror})", self.path
                    ) from None
                if exc.errno != errno.EOPNOTSUPP:
                    raise
        os.ftruncate(self._fd, size)  # sparse: blocks are allocated as they are written

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.write_pos

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of bytes [start, end) of this file (relative positions)."""
        return memoryview(self._mmap)[start : self.size if end is None else end]

    def read_copy(self, start: int, end: int) -> bytes:
        """Bytes [start, end) read with ``pread``: safe on holes, unlike the map, whose
        reading of a hole needs a free page on tmpfs (SIGBUS when there is none)."""
        return os.pread(self._fd, end - start, start)

    def write_at(self, pos: int, *chunks) -> None:
        """Write ``chunks`` back to back at relative position ``pos`` with one syscall."""
        total = sum(len(c) for c in chunks)
        if pos < 0 or pos + total > self.size:
            raise ValueError(f"write of {total} bytes at {pos} overflows {self.path}")
        written = os.pwritev(self._fd, chunks, pos)
        while written < total:  # a short write only happens under signals or disk errors
            rest = b"".join(bytes(c) for c in chunks)[written:]
            written += os.pwrite(self._fd, rest, pos + written)
        self.write_pos = max(self.write_pos, pos + total)

    def append(self, *chunks) -> int:
        pos = self.write_pos
        self.write_at(pos, *chunks)
        return pos

    def flush(self) -> int:
        """fdatasync if anything was written since the last flush; returns flushed_pos."""
        target = self.write_pos
        if target > self.flushed_pos and not self.closed:
            os.fdatasync(self._fd)
            self.flushed_pos = target
        return self.flushed_pos

    def zero_from(self, pos: int) -> None:
        """Erase everything from ``pos`` to the end (recovery of a torn tail)."""
        if pos < self.size:
            # Punching a hole would be faster but is not portable; rewriting keeps it simple.
            os.ftruncate(self._fd, pos)
            if self.preallocate:
                try:  # the blocks just freed: no hole is left behind
                    os.posix_fallocate(self._fd, pos, self.size - pos)
                except OSError as exc:
                    log.warning("%s: cannot allocate its blocks again (%s)", self.path, exc)
            os.ftruncate(self._fd, self.size)
        self.write_pos = min(self.write_pos, pos)
        self.flushed_pos = min(self.flushed_pos, pos)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._mmap.close()
        except BufferError:
            # A reader still holds a view; the map is released when that view is dropped.
            log.debug("mmap of %s still exported; leaving it to the garbage collector", self.path)
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
