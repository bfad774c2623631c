"""A fixed-size file: written with ``pwrite``, read through ``mmap`` or with ``pread``.

Commit-log segments and consume-queue files are both MappedFiles. A file is named by the
global byte offset of its first byte (20 digits), so its name says where it belongs.

A ``preallocate``d file (commit-log segments) has all its blocks allocated when it is made
(``posix_fallocate``): a full disk then fails the creation, not a later write, and the file
has no holes, whose reading through the map kills the process with SIGBUS on a full tmpfs.
Other files are sparse: blocks are allocated as they are written. Nothing is ever written
through a map.

Descriptors do not grow with the store. A file holds its descriptor and its map apart, each
only while in use, and each opened for what an operation needs:

* :meth:`MappedFile.view` needs the map alone. It is made from a descriptor opened for the
  purpose and closed as soon as ``mmap()`` returns, so a file only viewed holds one
  descriptor: the duplicate Python's map keeps of its own (3.11 has no way to avoid it).
* ``pwrite``, ``pread``, ``fdatasync``, ``ftruncate`` and ``SEEK_DATA`` need the descriptor
  alone: a file only written or read with ``pread`` holds one.
* A file both written and viewed holds both, two descriptors. That is the commit-log
  segment being written while consumers read it; a segment gives its descriptor back once
  it is sealed and flushed. Consume-queue files are read with ``pread`` (their entries are
  decoded into a copy anyway), so each of them holds one descriptor at most.

Every use goes through :class:`OpenFiles`, one per store, which counts the descriptors its
files hold and keeps them within ``limit``: to make room it closes the least recently used
files (map and descriptor). When the process itself is out of descriptors (connections
took them), an open closes the least recently used file and tries again, one file at a
time: the store trades its own descriptors rather than giving them up to whatever asks
next, so the reads it served go on; the message index's background rounds close none and
wait. A file in the middle of a write or a flush is pinned and never closed under it; a
reader's view keeps its map alive by itself (the map, and the descriptor it keeps, go when
the last view of it goes). Closing and opening again loses nothing: writes go to the file
with ``pwrite`` and a later ``fdatasync`` on a new descriptor flushes them.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

from rmq_spark.errors import ResourceExhaustedError

log = logging.getLogger("rmq_spark.store")

_T = TypeVar("_T")


def file_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


def fsync_dir(path: Path, files: OpenFiles | None = None) -> None:
    """fsync the directory ``path`` (a file made or removed in it is durable). With the
    store's ``files``, a process out of descriptors gets one as a file's open does (see
    :func:`retrying`)."""
    if files is None:
        fd = os.open(path, os.O_RDONLY)
    else:
        with files.lock:
            fd = retrying(files, f"open {path}", lambda: os.open(path, os.O_RDONLY))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_files_limit(soft_limit: int, reserve: int = 256, floor: int = 16) -> int:
    """How many descriptors the store's files may hold at once under a process file limit
    of ``soft_limit`` descriptors: all of it but ``reserve``, left for connections, the
    store's own few files and everything else. A file holds one or two of them (see the
    module's docstring).

    >>> open_files_limit(1024), open_files_limit(1_048_576), open_files_limit(256)
    (768, 1048320, 16)
    """
    return max(floor, soft_limit - reserve)


def raise_file_limit() -> int:
    """Raise the process's soft file limit to its hard limit, as servers do at start (the
    common soft default, 1,024, is far below what a store with many queues can use); the
    soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as exc:  # e.g. an infinite hard limit not allowed
            log.info("file limit stays at %d (cannot raise it to %s: %s)", soft, hard, exc)
    return soft


class Resident(Protocol):
    """A file :class:`OpenFiles` can close to make room."""

    @property
    def pinned(self) -> bool:
        """In use right now: not to be closed."""

    @property
    def held(self) -> int:
        """Descriptors it holds now."""

    def release(self) -> None:
        """Close whatever it holds (it opens again at its next use)."""


class OpenFiles:
    """The files of one store that hold descriptors right now, least recently used first,
    and how many descriptors they hold, at most ``limit`` (``None``: no limit). A file
    tells it what it opens and closes (:meth:`opened`, :meth:`closed`, with the lock
    held). Thread-safe: readers on the broker's workers and the writer share it."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit {limit} must be >= 1")
        self.limit = limit
        self.lock = threading.RLock()
        self._open: OrderedDict[int, Resident] = OrderedDict()
        #: descriptors the files hold now (a map's counts as one)
        self.held = 0
        #: descriptors and maps opened since the store opened (a churn figure)
        self.opens = 0
        self._waiting = threading.local()

    def __len__(self) -> int:
        """How many files hold a descriptor or a map."""
        return len(self._open)

    def opened(self, file: Resident) -> None:
        """``file`` opened a descriptor or made a map (lock held): most recent now."""
        self.held += 1
        self.opens += 1
        self.used(file)

    def closed(self, file: Resident, still_held: int) -> None:
        """``file`` closed a descriptor or its map, and holds ``still_held`` (lock held)."""
        self.held -= 1
        if not still_held:
            self._open.pop(id(file), None)

    def used(self, file: Resident) -> None:
        """``file`` was just used (lock held): most recent now."""
        self._open[id(file)] = file
        self._open.move_to_end(id(file))

    def make_room(self, need: int = 1) -> None:
        """Close least recently used files until ``need`` more descriptors fit (lock held);
        pinned ones stay open, so the limit may be passed while they are in use."""
        if self.limit is None or self.held + need <= self.limit:
            return
        victims: list[Resident] = []  # from the least used end: the work is what is closed
        freed = 0
        for file in self._open.values():
            if self.held - freed + need <= self.limit:
                break
            if not file.pinned:
                victims.append(file)
                freed += file.held
        for file in victims:
            file.release()

    def shed(self) -> int:
        """Close every unpinned file (lock held), as a store reopened finds them; how many
        were closed."""
        closed = 0
        for file in list(self._open.values()):
            if not file.pinned:
                file.release()
                closed += 1
        return closed

    @contextmanager
    def waiting_for_descriptors(self) -> Iterator[None]:
        """Inside the block, on this thread, an open that finds the process out of
        descriptors closes none of the other files: it fails (ResourceExhaustedError) and
        the caller tries again later. For background work (the message index's rounds):
        a file it traded for one of its own would be one the reads had open."""
        outer = getattr(self._waiting, "on", False)
        self._waiting.on = True
        try:
            yield
        finally:
            self._waiting.on = outer

    def shed_one(self) -> bool:
        """Close the least recently used unpinned file (lock held): the process ran out of
        descriptors and needs one. False when none is left to close.

        One file at a time, each followed by the open that needed it, so the store trades a
        descriptor of its own for the new one: descriptors it freed and did not take back
        at once would go to whatever asks next (a listener accepting connections waiting in
        its backlog takes each within 0.1 s), and the store would be left with none for the
        reads it served before."""
        if getattr(self._waiting, "on", False):
            return False
        victim = next((file for file in self._open.values() if not file.pinned), None)
        if victim is None:
            return False
        victim.release()
        self._open.pop(id(victim), None)  # (released, it is gone already): never picked twice
        return True

    def forget(self, file: Resident) -> None:
        self._open.pop(id(file), None)


def retrying(files: OpenFiles, what: str, opening: Callable[[], _T]) -> _T:
    """``opening()`` (an os.open, or an mmap: Python duplicates its descriptor); when the
    process is out of descriptors, the least recently used unpinned file of ``files`` is
    closed and ``opening()`` tried again, one file at a time (see :meth:`OpenFiles.shed_one`;
    lock held); ResourceExhaustedError saying it could not ``what`` when none is left."""
    while True:
        try:
            return opening()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            if not files.shed_one():
                raise ResourceExhaustedError(
                    f"cannot {what}: the process has no file descriptor left "
                    f"({exc.strerror}); raise the file limit (ulimit -n) or close connections"
                ) from None


def map_file(files: OpenFiles, path: Path, fd: int, size: int, access: int) -> mmap.mmap:
    """``mmap`` of the file open as ``fd`` (see :func:`retrying`)."""
    mapped: mmap.mmap = retrying(files, f"map {path}", lambda: mmap.mmap(fd, size, access=access))
    return mapped


#: for files opened outside a store (tools, tests): nothing is ever closed for room
UNBOUNDED = OpenFiles()


class FileClosedError(ValueError):
    """The file was closed for good (deleted by retention, or the store closed)."""


class ResidentFile:
    """A store file opened on use under the store's descriptor budget (:class:`OpenFiles`).

    Its descriptor and its map open apart, each at the first use that needs it
    (:meth:`using`), and stay pinned while that use runs; cold, they are closed to make
    room (:meth:`release`), and open again at the next use. :meth:`close` closes it for
    good; a use in progress on another thread keeps the descriptor and the map until it
    ends (closed under it, a call would fail, or land on whatever file the descriptor's
    number is given to next). :attr:`held` is 0, 1 or 2 descriptors. Subclasses set how
    the descriptor is opened (:attr:`open_flags`) and the map made (:attr:`map_access`)."""

    def __init__(self, path: Path, map_size: int, files: OpenFiles) -> None:
        self.path = path
        self.closed = False
        #: flags the descriptor is opened with, and the access its map is made with
        self.open_flags = os.O_RDWR
        self.map_access = mmap.ACCESS_READ
        self._map_size = map_size
        self._files = files
        self._fd = -1
        self._mmap: mmap.mmap | None = None
        self._pins = 0
        #: closed while in use: the last use closes it (see close)
        self._close_when_unpinned = False

    def closed_error(self) -> Exception:
        """What a use of the file after :meth:`close` raises."""
        return FileClosedError(f"{self.path} is closed")

    @property
    def pinned(self) -> bool:
        return self._pins > 0

    @property
    def is_open(self) -> bool:
        """It holds a descriptor or a map."""
        return self._fd >= 0 or self._mmap is not None

    @property
    def held(self) -> int:
        """Descriptors it holds now: its own, and its map's."""
        return (self._fd >= 0) + (self._mmap is not None)

    @property
    def fd(self) -> int:
        """The descriptor: open inside :meth:`using` with ``descriptor=True``."""
        return self._fd

    def adopt(self, fd: int) -> None:
        """Hold ``fd``, just opened on the file by its maker (lock held)."""
        self._fd = fd
        self._files.opened(self)

    @contextmanager
    def using(self, *, descriptor: bool = False, mapped: bool = False) -> Iterator[mmap.mmap]:
        """Pinned (never closed for room) inside the block, with the descriptor and the map
        asked for open; yields the map (None when not asked for). The map is made from the
        descriptor when that is open, else from one opened for it and closed at once: the
        map keeps a duplicate of its own."""
        files = self._files
        with files.lock:
            if self.closed:
                raise self.closed_error()
            self._pins += 1
            try:
                if descriptor and self._fd < 0:
                    files.make_room()
                    self._fd = self._open()
                    files.opened(self)
                if mapped and self._mmap is None:
                    files.make_room()
                    self._mmap = self._make_map()
                    files.opened(self)
                files.used(self)
            except BaseException:
                self._unpin()
                raise
        try:
            yield self._mmap  # type: ignore[misc]
        finally:
            with files.lock:
                self._unpin()

    def _open(self, flags: int | None = None) -> int:
        flags = self.open_flags if flags is None else flags
        return retrying(self._files, f"open {self.path}", lambda: os.open(self.path, flags, 0o644))

    def _make_map(self) -> mmap.mmap:
        files, size, access = self._files, self._map_size, self.map_access
        if self._fd >= 0:
            return map_file(files, self.path, self._fd, size, access)
        fd = self._open(os.O_RDONLY if access == mmap.ACCESS_READ else None)
        try:
            return map_file(files, self.path, fd, size, access)
        finally:
            os.close(fd)  # the map keeps a duplicate of its own

    def _unpin(self) -> None:
        """One use ended (lock held); the last one ends a close that waited for it."""
        self._pins -= 1
        if not self._pins and self._close_when_unpinned:
            self._close_when_unpinned = False
            self.release()
            self._files.forget(self)

    def release(self) -> None:
        """Close the map and the descriptor (each opens again at its next use). A map a
        reader still has a view of is released when the last view goes."""
        with self._files.lock:
            mapped, self._mmap = self._mmap, None
            if mapped is not None:
                try:
                    mapped.close()
                except BufferError:
                    pass  # views still point into it: it closes when they are gone
                self._files.closed(self, self.held)
            self.release_descriptor()

    def release_descriptor(self) -> None:
        """Close the descriptor alone (lock held)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
            self._files.closed(self, self.held)

    def close(self) -> None:
        """Close it for good (see the class doc)."""
        with self._files.lock:
            if self.closed:
                return
            self.closed = True
            if self._pins:
                self._close_when_unpinned = True
                return
            self.release()
            self._files.forget(self)


class MappedFile(ResidentFile):
    """One segment. ``write_pos`` and ``flushed_pos`` are relative to the file start.

    Its descriptor (for ``pwrite``, ``pread``, ``fdatasync``) and its map (for
    :meth:`view`) open apart, each at the first use that needs it: :attr:`held` is 0, 1 or
    2 descriptors, 2 only for a file both written and viewed (see the module's docstring).
    """

    def __init__(
        self,
        path: Path,
        start_offset: int,
        size: int,
        *,
        create: bool,
        grow: bool = False,
        preallocate: bool = False,
        files: OpenFiles = UNBOUNDED,
    ) -> None:
        """Check (``create``: create and size) the file; it is opened when first used.
        With ``grow``, an existing file shorter than ``size`` is extended with zeros: that
        is what a crash leaves between creating a file and sizing it, or inside
        :meth:`zero_from`. With ``preallocate`` a created file gets its blocks now (ENOSPC:
        the file is removed again), and an existing one with ``grow`` (the one written
        next) gets its missing blocks if the disk has room (older versions made sparse
        files). A file created or grown keeps its descriptor open (it is written next)."""
        super().__init__(path, size, files)
        self.start_offset = start_offset
        self.size = size
        self.preallocate = preallocate
        self.write_pos = 0
        self.flushed_pos = 0
        if not create and not grow:
            # An existing file that needs no fixing: checked by its size alone, opened at
            # its first use (a store of many queues opens only what it reads).
            actual = path.stat().st_size
            if actual != size:
                raise OSError(f"{path} is {actual} bytes, expected {size}")
            return
        with files.lock:
            files.make_room()
            fd = retrying(
                files,
                f"open {path}",
                lambda: os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644),
            )
            try:
                self._check_size(fd, size, create=create, grow=grow)
            except BaseException:
                os.close(fd)
                if create:
                    path.unlink(missing_ok=True)
                raise
            self.adopt(fd)

    def _check_size(self, fd: int, size: int, *, create: bool, grow: bool) -> None:
        if create:
            self._size_new(fd, size)
        actual = os.fstat(fd).st_size
        if grow and actual < size:
            log.warning(
                "%s is %d bytes, expected %d: extending it with zeros", self.path, actual, size
            )
            os.ftruncate(fd, size)
            actual = size
        if grow and self.preallocate and not create and actual == size:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP):
                    raise
        if actual != size:
            raise OSError(f"{self.path} is {actual} bytes, expected {size}")

    def _size_new(self, fd: int, size: int) -> None:
        if self.preallocate:
            try:
                os.posix_fallocate(fd, 0, size)
                return
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise OSError(
                        exc.errno, f"no room for a {size:,}-byte file ({exc.strerror})", self.path
                    ) from None
                if exc.errno != errno.EOPNOTSUPP:
                    raise
        os.ftruncate(fd, size)  # sparse: blocks are allocated as they are written

    def open(self) -> None:
        """Open the descriptor now if it is not (the most recently used file)."""
        with self.using(descriptor=True):
            pass

    # -- positions and I/O ------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.write_pos

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of bytes [start, end) of this file (relative positions). It
        needs the map only: a file only viewed holds one descriptor, the map's."""
        with self.using(mapped=True) as mapped:
            return memoryview(mapped)[start : self.size if end is None else end]

    def read_copy(self, start: int, end: int) -> bytes:
        """Bytes [start, end) read with ``pread``: safe on holes, unlike the map, whose
        reading of a hole needs a free page on tmpfs (SIGBUS when there is none). It needs
        the descriptor only."""
        with self.using(descriptor=True):
            fd = self._fd
            return os.pread(fd, end - start, start)

    def data_end(self) -> int:
        """Where the file's last written block ends: its size when the file system cannot
        tell holes apart (then the tail may still be zeros), 0 when nothing was written."""
        with self.using(descriptor=True):
            fd = self._fd
            return data_end(fd, self.size)

    def write_at(self, pos: int, *chunks: bytes | memoryview) -> None:
        """Write ``chunks`` back to back at relative position ``pos`` with one syscall."""
        total = sum(len(c) for c in chunks)
        if pos < 0 or pos + total > self.size:
            raise ValueError(f"write of {total} bytes at {pos} overflows {self.path}")
        with self.using(descriptor=True):
            fd = self._fd
            written = os.pwritev(fd, chunks, pos)
            while written < total:  # a short write only happens under signals or disk errors
                rest = b"".join(bytes(c) for c in chunks)[written:]
                written += os.pwrite(fd, rest, pos + written)
        self.write_pos = max(self.write_pos, pos + total)

    def append(self, *chunks: bytes | memoryview) -> int:
        pos = self.write_pos
        self.write_at(pos, *chunks)
        return pos

    def flush(self) -> int:
        """fdatasync if anything was written since the last flush; returns flushed_pos.
        A file then sealed (written to its end) and mapped gives its descriptor back: it
        is only read from now on, through the map."""
        target = self.write_pos
        if target > self.flushed_pos and not self.closed:
            try:
                with self.using(descriptor=True):
                    fd = self._fd
                    os.fdatasync(fd)
            except FileClosedError:  # deleted meanwhile (retention): nothing left to sync
                return self.flushed_pos
            self.flushed_pos = target
            with self._files.lock:
                if self.flushed_pos >= self.size and self._mmap is not None and not self.pinned:
                    self.release_descriptor()
        return self.flushed_pos

    def zero_from(self, pos: int) -> None:
        """Erase everything from ``pos`` to the end (recovery of a torn tail)."""
        if pos < self.size:
            # Punching a hole would be faster but is not portable; rewriting keeps it simple.
            with self.using(descriptor=True):
                fd = self._fd
                os.ftruncate(fd, pos)
                if self.preallocate:
                    try:  # the blocks just freed: no hole is left behind
                        os.posix_fallocate(fd, pos, self.size - pos)
                    except OSError as exc:
                        log.warning("%s: cannot allocate its blocks again (%s)", self.path, exc)
                os.ftruncate(fd, self.size)
        self.write_pos = min(self.write_pos, pos)
        self.flushed_pos = min(self.flushed_pos, pos)

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def data_end(fd: int, size: int) -> int:
    """The end of the last data extent of the file open as ``fd`` (``size`` bytes): 0 for a
    file of holes only; ``size`` where SEEK_DATA/SEEK_HOLE are not supported."""
    end = 0
    pos = 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data at or after pos
                    return end
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            pos = end
    except OSError:
        return size
    return end
