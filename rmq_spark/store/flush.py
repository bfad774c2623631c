"""Background flushing: ASYNC (every flush_interval_ms) or SYNC (group commit).

In SYNC mode an appender calls :meth:`FlushService.wait_flushed` with the end offset of its
write. The flush thread wakes, fsyncs once for everything written so far and wakes every
waiter whose data that covered, so concurrent appends share one fsync. In both modes the
thread also flushes consume queues and writes the checkpoint every checkpoint_interval_ms
(the owner writes the last checkpoint itself after :meth:`FlushService.stop`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rmq_spark.errors import FlushTimeoutError

log = logging.getLogger("rmq_spark.store")


class FlushService:
    def __init__(
        self,
        *,
        sync: bool,
        flush_interval_ms: int,
        checkpoint_interval_ms: int,
        flush_commitlog: Callable[[], int],
        checkpoint: Callable[[], None],
    ) -> None:
        self._sync = sync
        self._interval = flush_interval_ms / 1000
        self._checkpoint_interval = checkpoint_interval_ms / 1000
        self._flush_commitlog = flush_commitlog
        self._checkpoint = checkpoint
        self._cond = threading.Condition()
        self._requested = 0
        self.flushed_offset = 0
        self._stopping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rmq-flush", daemon=True)

    def start(self, flushed_offset: int) -> None:
        self.flushed_offset = self._requested = flushed_offset
        self._thread.start()

    def wait_flushed(self, offset: int, timeout_ms: int) -> None:
        """Block until the commit log is durable up to ``offset`` (SYNC mode)."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self.flushed_offset < offset:
                if self._error is not None:
                    raise FlushTimeoutError(f"flush failed: {self._error}") from self._error
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    raise FlushTimeoutError(
                        f"commit log not flushed to offset {offset} within {timeout_ms} ms; "
                        "the message may or may not be durable"
                    )
                self._cond.wait(left)

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_interval
        while True:
            with self._cond:
                if not self._stopping:
                    timeout = self._interval if not self._sync else self._checkpoint_interval
                    if not (self._sync and self._requested > self.flushed_offset):
                        self._cond.wait(timeout)
                stopping = self._stopping
            self._flush_once()
            now = time.monotonic()
            if now >= next_checkpoint and not stopping:
                self._safely(self._checkpoint)
                next_checkpoint = now + self._checkpoint_interval
            if stopping:
                return

    def _flush_once(self) -> None:
        flushed = self._safely(self._flush_commitlog)
        with self._cond:
            if flushed is not None:
                self.flushed_offset = max(self.flushed_offset, flushed)
            self._cond.notify_all()

    def _safely(self, fn):
        try:
            result = fn()
            self._error = None
            return result
        except Exception as exc:  # keep flushing; waiters see the error
            log.exception("flush failed")
            self._error = exc
            return None

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
