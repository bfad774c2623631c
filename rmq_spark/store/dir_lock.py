"""One process per store directory, enforced with an advisory ``flock`` on ``lock``."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rmq_spark.errors import StoreLockedError


class DirectoryLock:
    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / "lock"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise StoreLockedError(
                f"store directory {store_dir} is in use by another process (pid {holder}); "
                "stop that broker first or choose another --store directory"
            ) from None
        # Overwritten in place, padded: on a full disk the file keeps its block (a new
        # file may get none; the pid is only a hint for the message above).
        try:
            os.pwrite(self._fd, f"{os.getpid()}\n".ljust(16).encode(), 0)
        except OSError:
            pass

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
