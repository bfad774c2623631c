"""The package's two millisecond clocks."""

from __future__ import annotations

import time

from rmq_spark.clock import monotonic_ms, now_ms


def test_now_ms_is_the_wall_clock_in_whole_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = now_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(now, int) and before <= now <= after


def test_monotonic_ms_never_goes_back_and_follows_time() -> None:
    readings = [monotonic_ms() for _ in range(1_000)]
    assert readings == sorted(readings) and all(isinstance(r, int) for r in readings)
    start = monotonic_ms()
    time.sleep(0.02)
    assert monotonic_ms() - start >= 20
