"""Background flushing: ASYNC (every flush_interval_ms) or SYNC (group commit).

In SYNC mode an appender calls :meth:`FlushService.wait_flushed` with the end offset of its
write. The flush thread wakes, fsyncs once for everything written so far and wakes every
waiter whose data that covered, so concurrent appends share one fsync. In both modes the
thread also flushes consume queues and writes the checkpoint every checkpoint_interval_ms
(the owner writes the last checkpoint itself after :meth:`FlushService.stop`).

A failed flush or checkpoint is fatal (fail-stop): the thread stops, waiting SYNC appenders
get StoreFailedError, and ``on_failure`` is called once so the store stops serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rmq_spark.errors import FlushTimeoutError, ResourceExhaustedError, StoreFailedError
from rmq_spark.histogram import Histogram

log = logging.getLogger("rmq_spark.store")

T = TypeVar("T")


class FlushService:
    def __init__(
        self,
        *,
        sync: bool,
        flush_interval_ms: int,
        checkpoint_interval_ms: int,
        flush_commitlog: Callable[[], int],
        checkpoint: Callable[[], None],
        on_failure: Callable[[BaseException], None] = lambda exc: None,
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
        #: a failed sync is fatal (see the module doc): set once, never cleared
        self.failure: BaseException | None = None
        self._on_failure = on_failure
        self._last_exhausted_log = -1e9
        #: how long each flush of the commit log took (write-back and fsync), in ms
        self.flush_ms = Histogram()
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
                if self.failure is not None:
                    raise StoreFailedError(
                        f"the commit log could not be synced to disk ({self.failure}); the "
                        "message was not stored durably and is not served. Restart the "
                        "broker: recovery keeps what was durable"
                    ) from self.failure
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    raise FlushTimeoutError(
                        f"commit log not flushed to offset {offset} within {timeout_ms} ms; "
                        "the message may or may not be durable"
                    )
                self._cond.wait(left)

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_interval
        while self.failure is None:
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
        began = time.perf_counter()
        flushed = self._safely(self._flush_commitlog)
        self.flush_ms.observe((time.perf_counter() - began) * 1000)
        with self._cond:
            if flushed is not None:
                self.flushed_offset = max(self.flushed_offset, flushed)
            self._cond.notify_all()

    def _safely(self, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except ResourceExhaustedError as exc:
            # No descriptor to open a file with: nothing was synced or lost (the dirty pages
            # wait in the page cache), so the next round tries again.
            now = time.monotonic()
            if now - self._last_exhausted_log >= 60:
                self._last_exhausted_log = now
                log.warning("flush postponed: %s", exc)
            return None
        except Exception as exc:
            # After a failed fsync the kernel may already have dropped the dirty pages, so a
            # later successful fsync proves nothing: stop, as PostgreSQL does.
            with self._cond:
                first = self.failure is None
                self.failure = exc
                self._cond.notify_all()
            if first:
                self._on_failure(exc)
            return None

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
