"""Latency histograms cheap enough for every request: fixed bucket bounds, one list of
counts, no lock (an observation is a few list operations; a reader copies the counts,
and a count seen one observation early or late is within what a scrape promises).

Exported as Prometheus histograms by the broker's metrics (cumulative buckets, ``_sum``
and ``_count``), and read as mean and maximum by the admin calls.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LATENCY_MS_BOUNDS", "Histogram", "HistogramSnapshot"]

#: bucket upper bounds in milliseconds, as RocketMQ 5's rocketmq_rpc_latency has them
LATENCY_MS_BOUNDS: tuple[float, ...] = (1, 3, 5, 10, 50, 100, 500, 1000, 3000, 10000)


@dataclass(frozen=True)
class HistogramSnapshot:
    """Counts at one moment: ``counts[i]`` observations <= ``bounds[i]`` and above the
    bound before it; the last count is those above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float
    maximum: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: (upper bound as text, observations at or below it)."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else _text(bound), running))
        return out


class Histogram:
    """Observations of one quantity (milliseconds by convention) in fixed buckets."""

    __slots__ = ("_bounds", "_counts", "_max", "_sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_MS_BOUNDS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"histogram bounds must increase strictly: {list(bounds)}")
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._max = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value
        if value > self._max:
            self._max = value

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self._bounds, tuple(self._counts), self._sum, self._max)


def _text(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else repr(bound)
