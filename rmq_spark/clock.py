"""The two clocks, in whole milliseconds.

:func:`now_ms` is wall-clock time since the epoch: what records store (born and store
timestamps), what crosses the wire and what survives a restart. :func:`monotonic_ms` never
goes back: for leases, timeouts and idle times within one process. Both read the clock in
nanoseconds and round down, so they are exact where ``int(time.time() * 1000)`` can be off
by one.
"""

from __future__ import annotations

import time

__all__ = ["monotonic_ms", "now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch (wall clock)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes back (only differences mean anything)."""
    return time.monotonic_ns() // 1_000_000
