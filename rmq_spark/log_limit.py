"""Logging what clients cause without letting them fill the log: each kind of event is
one line at most once per interval (the broker's refusals and malformed requests)."""

from __future__ import annotations

import logging
import re
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


_WORDS = re.compile(r"[A-Za-z ]*")


def brief(text: str, limit: int = 200) -> str:
    """``text`` cut to about ``limit`` characters for a log line or an answer: what a
    client sent may be megabytes long, and a line must not be.

    >>> brief("short")
    'short'
    >>> brief("x" * 300, limit=4)
    'xxxx... (300 characters)'
    """
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def kind_of(message: str) -> str:
    """The fixed words a message starts with (before any number, name or quoted value a
    client chose): the key under which a malformed input is rate-limited, so varying the
    values does not make a new kind of line.

    >>> kind_of("header field code is '\\"yy\\"', not a whole number")
    'header field code is'
    >>> kind_of("header is not JSON: Expecting value: line 1 column 5 (char 4)")
    'header is not JSON'
    """
    match = _WORDS.match(message)
    return match.group().strip() if match else ""
