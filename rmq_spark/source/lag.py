"""How far a streaming query is behind the brokers, per queue, from its progress events.

Kafka's source reports ``minOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` /
``avgOffsetsBehindLatest`` as custom metrics; pyspark's Python source API cannot report
custom metrics yet. Every progress event carries, for each source, the ``endOffset`` of the
batch and the ``latestOffset`` the source saw (this source reports the brokers' max offsets
there), so the lag is their difference, queue by queue. :func:`offsets_behind` computes it
from one source's progress; :class:`LagListener` does it for every batch of every query::

    lag = LagListener()                  # or LagListener(print) to be told at each batch
    spark.streams.addListener(lag)
    ...
    lag.latest(query.id)                 # Lag(min=0, max=1200, avg=310.5, queues={...})
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from rmq_spark.offsets.spark import from_json_dict
from rmq_spark.structs import MessageQueue

__all__ = ["Lag", "LagListener", "offsets_behind"]


class Lag(NamedTuple):
    """Messages the query is behind the brokers after a batch, over its queues."""

    min: int
    max: int
    avg: float
    queues: dict[MessageQueue, int]

    def metrics(self) -> dict[str, float]:
        """The figures under the Kafka source's metric names."""
        return {
            "minOffsetsBehindLatest": self.min,
            "maxOffsetsBehindLatest": self.max,
            "avgOffsetsBehindLatest": self.avg,
        }


def offsets_behind(
    end_offset: str | Mapping[str, Any] | None, latest_offset: str | Mapping[str, Any] | None
) -> Lag | None:
    """The lag between a batch's end offsets and the latest ones (JSON text or dicts, as in
    a progress event); None when either is missing (no trigger has probed yet).

    >>> offsets_behind('{"t": {"b": {"0": 5, "1": 9}}}', '{"t": {"b": {"0": 8, "1": 9}}}')
    Lag(min=0, max=3, avg=1.5, queues={MessageQueue(topic='t', broker_name='b', queue_id=0): 3, \
MessageQueue(topic='t', broker_name='b', queue_id=1): 0})
    """
    if not end_offset or not latest_offset:
        return None
    end = from_json_dict(_as_dict(end_offset), "endOffset")
    latest = from_json_dict(_as_dict(latest_offset), "latestOffset")
    queues = {mq: max(0, latest[mq] - end.get(mq, 0)) for mq in sorted(latest)}
    if not queues:
        return Lag(0, 0, 0.0, {})
    values = list(queues.values())
    return Lag(min(values), max(values), sum(values) / len(values), queues)


def _as_dict(value: str | Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


class LagListener(StreamingQueryListener):
    """Computes every rocketlite source's lag at each batch; ``latest(query_id)`` answers
    the last one, and ``on_lag(query_id, lag)`` (optional) is called with each."""

    def __init__(self, on_lag: Callable[[str, Lag], None] | None = None) -> None:
        self._on_lag = on_lag
        self._lock = threading.Lock()
        self._latest: dict[str, Lag] = {}

    def latest(self, query_id: object) -> Lag | None:
        with self._lock:
            return self._latest.get(str(query_id))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        for source in progress.sources:
            # Spark describes every Python source alike; rocketlite's are known by the
            # shape of their offsets ({topic: {brokerName: {queueId: offset}}}).
            try:
                lag = offsets_behind(source.endOffset, source.latestOffset)
            except Exception:  # another source's offsets: not ours to read
                continue
            if lag is None:
                continue
            query_id = str(progress.id)
            with self._lock:
                self._latest[query_id] = lag
            if self._on_lag is not None:
                self._on_lag(query_id, lag)
