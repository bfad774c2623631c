"""Logging what clients cause without letting them fill the log: each kind of event is
one line at most once per interval (the broker's refusals and malformed requests)."""

from __future__ import annotations

import logging
import time


class LogLimiter:
    """Logs each kind of event as one line at most once per ``interval_s``: what clients
    send decides what is logged, so a client must not be able to fill the log."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, limit: int = 10_000):
        self._log = logger
        self._interval_s = interval_s
        self._limit = limit
        self._last: dict[object, float] = {}

    def allow(self, key: object) -> bool:
        now = time.monotonic()
        if now - self._last.get(key, -1e18) < self._interval_s:
            return False
        if len(self._last) >= self._limit:
            self._last.clear()
        self._last[key] = now
        return True

    def warning(self, key: object, message: str, *args: object) -> None:
        if self.allow(key):
            self._log.warning(message, *args)

    def error(self, key: object, message: str, *args: object) -> None:
        if self.allow(key):
            self._log.error(message, *args)
