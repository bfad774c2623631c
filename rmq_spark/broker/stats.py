"""What the broker counts as it serves, taken once where every protocol passes: the write
path counts messages in, the core's reads count messages out, each front-end times its
requests. The metrics endpoint, RocketMQ's stats calls and the console all read these.

* messages and bytes in, per topic (every stored message, the broker's own moves included);
* messages and bytes out, per consumer group and topic, and where each group's reads of a
  queue have got to (its next offset), from which in-flight messages follow;
* send-backs and dead letters, per group and topic;
* request latency, per protocol, request kind and result.

:class:`RateHistory` keeps samples of the totals, so rates over the last minute, hour and
day can be answered without a time series database (RocketMQ's ``statsAll`` and
``brokerStatus`` give such rates; the console draws the last minutes).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rmq_spark.histogram import Histogram, HistogramSnapshot

__all__ = ["BrokerStats", "RateHistory", "Rates", "StatsSnapshot", "Totals"]

#: (consumer group, topic)
GroupTopic = tuple[str, str]


@dataclass(frozen=True)
class StatsSnapshot:
    """The counters at one moment, all cumulative since the broker started."""

    taken_s: float
    #: topic -> (messages, bytes) stored
    messages_in: dict[str, tuple[int, int]]
    #: (group, topic) -> (messages, bytes) handed to consumers
    messages_out: dict[GroupTopic, tuple[int, int]]
    #: (group, topic, queue) -> the next offset the group's reads start from
    read_to: dict[tuple[str, str, int], int]
    #: (group, topic) -> messages given back for redelivery / moved to the dead-letter queue
    sent_back: dict[GroupTopic, int]
    dead_letters: dict[GroupTopic, int]
    #: (protocol, request kind, result) -> latency in ms
    requests: dict[tuple[str, str | int, str | int], HistogramSnapshot]


class BrokerStats:
    """The broker's counters. Counting takes a lock (writes and reads come from worker
    threads and the event loop alike); request latencies are recorded on the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in: dict[str, list[int]] = {}
        self._out: dict[GroupTopic, list[int]] = {}
        self._read_to: dict[tuple[str, str, int], int] = {}
        self._sent_back: dict[GroupTopic, int] = {}
        self._dead: dict[GroupTopic, int] = {}
        self._requests: dict[tuple[str, str | int, str | int], Histogram] = {}
        self.started_s = time.time()

    def stored(self, topic: str, messages: int, size: int) -> None:
        """``messages`` of ``size`` bytes in all were stored into ``topic``."""
        with self._lock:
            counts = self._in.get(topic)
            if counts is None:
                self._in[topic] = [messages, size]
            else:
                counts[0] += messages
                counts[1] += size

    def read(
        self, group: str, topic: str, queue_id: int, messages: int, size: int, next_offset: int
    ) -> None:
        """``group`` was handed ``messages`` (``size`` bytes) of the queue; its next read
        starts at ``next_offset``."""
        with self._lock:
            if messages:
                counts = self._out.get((group, topic))
                if counts is None:
                    self._out[group, topic] = [messages, size]
                else:
                    counts[0] += messages
                    counts[1] += size
            if group:
                self._read_to[group, topic, queue_id] = next_offset

    def sent_back(self, group: str, topic: str, *, dead_letter: bool) -> None:
        """One message of ``topic`` given back by ``group``: to its retry topic, or (with
        ``dead_letter``) to its dead-letter queue."""
        with self._lock:
            table = self._dead if dead_letter else self._sent_back
            table[group, topic] = table.get((group, topic), 0) + 1

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's counters go (its series end)."""
        with self._lock:
            self._in.pop(topic, None)
            tables: tuple[dict[Any, Any], ...] = (
                self._out, self._sent_back, self._dead, self._read_to,
            )  # fmt: skip
            for table in tables:
                for key in [key for key in table if key[1] == topic]:
                    del table[key]

    def request(self, protocol: str, kind: str | int, result: str | int, ms: float) -> None:
        """One request of ``protocol`` (``remoting``, ``grpc_v1``, ``grpc_v2``), of ``kind``
        (its request code or method), answered with ``result`` (a code), took ``ms``."""
        key = (protocol, kind, result)
        histogram = self._requests.get(key)
        if histogram is None:
            histogram = self._requests.setdefault(key, Histogram())
        histogram.observe(ms)

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            taken = StatsSnapshot(
                taken_s=time.time(),
                messages_in={k: (v[0], v[1]) for k, v in self._in.items()},
                messages_out={k: (v[0], v[1]) for k, v in self._out.items()},
                read_to=dict(self._read_to),
                sent_back=dict(self._sent_back),
                dead_letters=dict(self._dead),
                requests={},
            )
        taken.requests.update((k, h.snapshot()) for k, h in list(self._requests.items()))
        return taken

    def totals(self) -> Totals:
        """The broker-wide totals and per-topic / per-group-topic counts, for rates."""
        with self._lock:
            return Totals(
                time.time(),
                {k: (v[0], v[1]) for k, v in self._in.items()},
                {k: (v[0], v[1]) for k, v in self._out.items()},
            )


@dataclass(frozen=True)
class Totals:
    """Cumulative counts at ``at_s``: per topic in, per (group, topic) out."""

    at_s: float
    messages_in: dict[str, tuple[int, int]]
    messages_out: dict[GroupTopic, tuple[int, int]]

    def all_in(self) -> tuple[int, int]:
        return _sum(self.messages_in.values())

    def all_out(self) -> tuple[int, int]:
        return _sum(self.messages_out.values())


def _sum(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    messages = size = 0
    for m, s in pairs:
        messages += m
        size += s
    return messages, size


@dataclass(frozen=True)
class Rates:
    """What happened over a window of ``seconds``: counts and per-second rates."""

    seconds: float
    messages: int
    size: int

    @property
    def tps(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RateHistory:
    """Samples of :class:`BrokerStats` totals: one every ``step_s`` for the last hour, and
    one every ten minutes for the last day. ``take()`` is called by the broker's clock."""

    step_s: float = 10.0
    recent: deque[Totals] = field(default_factory=lambda: deque(maxlen=361))
    daily: deque[Totals] = field(default_factory=lambda: deque(maxlen=145))

    def take(self, totals: Totals) -> None:
        self.recent.append(totals)
        if not self.daily or totals.at_s - self.daily[-1].at_s >= 600 - self.step_s / 2:
            self.daily.append(totals)

    def window(
        self, seconds: float, now: Totals, key: str | GroupTopic | None = None, out: bool = False
    ) -> Rates:
        """Counts over the last ``seconds`` up to ``now``, from the oldest sample inside the
        window (a broker younger than the window counts from its start): of one topic's
        messages in or one (group, topic)'s out (``key``), else of the whole broker's in,
        or out with ``out``."""
        samples = self.recent if seconds <= 3600 else self.daily
        then = None
        for sample in samples:
            if now.at_s - sample.at_s <= seconds + self.step_s / 2:
                then = sample
                break
        if then is None:
            return Rates(0.0, 0, 0)
        first, last = _pick(then, key, out), _pick(now, key, out)
        return Rates(now.at_s - then.at_s, last[0] - first[0], last[1] - first[1])

    def series(
        self, key: str | GroupTopic | None = None, out: bool = False
    ) -> list[tuple[float, float]]:
        """(time, messages per second) between consecutive recent samples (``key`` and
        ``out`` as for :meth:`window`)."""
        points = []
        for before, after in itertools.pairwise(self.recent):
            span = after.at_s - before.at_s
            if span > 0:
                moved = _pick(after, key, out)[0] - _pick(before, key, out)[0]
                points.append((after.at_s, moved / span))
        return points


def _pick(totals: Totals, key: str | GroupTopic | None, out: bool) -> tuple[int, int]:
    if key is None:
        return totals.all_out() if out else totals.all_in()
    if isinstance(key, str):
        return totals.messages_in.get(key, (0, 0))
    return totals.messages_out.get(key, (0, 0))
