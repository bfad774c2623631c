"""What the store does when the disk fills up or fails: refuse writes, undo, or stop.

* **Disk full** (a write failed with ENOSPC, or housekeeping sees too little room): writes
  are refused at once with ``RESOURCE_EXHAUSTED`` naming the directory, the free space and
  the space the store needs to write again (:attr:`StoreHealth.needed_bytes`: one commit-log
  segment plus one consume-queue file, what a write may have to create). Reads go on.
  Housekeeping turns writes back on once that much is free. A store opened on a full disk
  starts this way: read-only, with one line in the log saying so.
* **A failed sync** is fail-stop (:meth:`StoreHealth.fail`): after a failed fsync the kernel
  may have dropped the dirty pages, so nothing is served until a restart runs recovery.
"""

from __future__ import annotations

import errno
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from rmq_spark.errors import ResourceExhaustedError, RocketliteError, StoreError, StoreFailedError

log = logging.getLogger("rmq_spark.store")

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


class StoreHealth:
    """The store's disk-full flag and fail-stop state; thread-safe enough for flags."""

    def __init__(
        self, store_dir: Path, *, needed_bytes: int, needed_what: str, max_used_ratio: float
    ) -> None:
        self.store_dir = store_dir
        #: free bytes the store needs to accept writes
        self.needed_bytes = needed_bytes
        self._needed_what = needed_what
        self.max_used_ratio = max_used_ratio
        self._disk_full = False
        self._failure: BaseException | None = None
        self._failure_listeners: list[Callable[[BaseException], None]] = []

    # -- disk full -------------------------------------------------------------------------

    @property
    def disk_full(self) -> bool:
        return self._disk_full

    def set_disk_full(self, full: bool) -> None:
        """Force the flag (tests; an operator's tool); housekeeping sets it again later."""
        self._disk_full = full

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.store_dir).free

    def _lacks_space(self) -> tuple[bool, int]:
        usage = shutil.disk_usage(self.store_dir)
        full = usage.used / usage.total > self.max_used_ratio or usage.free < self.needed_bytes
        return full, usage.free

    def _need(self, free: int) -> str:
        return (
            f"the disk holding {self.store_dir} has {free:,} bytes free; the store needs "
            f"{self.needed_bytes:,} bytes free ({self._needed_what}) and the disk at most "
            f"{self.max_used_ratio:.0%} used to accept writes"
        )

    def check_at_open(self) -> None:
        """Before the first write: start read-only when the disk lacks room, saying so once."""
        full, free = self._lacks_space()
        self._disk_full = full
        if full:
            log.warning(
                "store %s starts READ-ONLY for lack of disk space: %s. Reads are served; "
                "sends are refused until that much is free",
                self.store_dir,
                self._need(free),
            )

    def check_disk(self) -> None:
        """Housekeeping: refuse or allow writes by the free space now."""
        full, free = self._lacks_space()
        if full != self._disk_full:
            if full:
                log.warning("disk full: writes off (%s)", self._need(free))
            else:
                log.warning("disk ok: writes on (%s: %s bytes free)", self.store_dir, f"{free:,}")
        self._disk_full = full

    def check_writable(self) -> None:
        """Raise RESOURCE_EXHAUSTED while the disk is known to be full."""
        if self._disk_full:
            raise ResourceExhaustedError(
                f"{self._need(self.free_bytes())}; writes are refused until that much space "
                "is freed (delete files or expired segments); then send again"
            )

    def write_failed(self, exc: OSError) -> RocketliteError:
        """The error to answer for a write that failed (and was undone)."""
        if exc.errno in NO_SPACE:
            self._disk_full = True  # refuse at once until housekeeping sees free space
            return ResourceExhaustedError(
                f"{self._need(self.free_bytes())}; the disk is full, and the batch was not "
                "stored (nothing of it is kept). Free space or delete expired segments, then "
                "send again"
            )
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return ResourceExhaustedError(
                f"the process has no file descriptor left ({exc.strerror}); the batch was "
                "not stored (nothing of it is kept). Raise the file limit (ulimit -n) or "
                "close connections, then send again"
            )
        return StoreError(
            f"writing to the store {self.store_dir} failed: {exc}; the batch was not "
            "stored (nothing of it is kept)"
        )

    def no_space_at_open(self, exc: OSError, doing: str) -> StoreError:
        """A one-line error for a write the store cannot open without."""
        return StoreError(
            f"cannot open the store {self.store_dir}: {doing} failed ({exc.strerror}); "
            f"{self._need(self.free_bytes())}. Free space, then start again"
        )

    # -- fail-stop -------------------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def check_not_failed(self) -> None:
        if self._failure is not None:
            raise StoreFailedError(
                f"store {self.store_dir} stopped after a failed disk write or sync "
                f"({self._failure}); it serves nothing until the broker is restarted, when "
                "recovery keeps exactly what was durable"
            )

    def add_failure_listener(self, listener: Callable[[BaseException], None]) -> None:
        self._failure_listeners.append(listener)

    def fail(self, exc: BaseException) -> None:
        """Stop the store (once): log one CRITICAL line and tell the listeners."""
        if self._failure is not None:
            return
        self._failure = exc
        log.critical(
            "store %s FAILED: %s. Nothing past the last good sync is trusted: the store "
            "stops accepting writes and serving reads. Restart the broker; crash recovery "
            "keeps exactly the records that reached the disk",
            self.store_dir,
            exc,
        )
        for listener in list(self._failure_listeners):
            try:
                listener(exc)
            except Exception:
                log.exception("a store failure listener failed")
