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

With ``prometheus_port`` (or a prometheus-client ``registry`` of your own), the listener
also exports each running query's lag as Prometheus gauges from the driver, so a dashboard
shows it beside the brokers' own ``rocketmq_consumer_lag_messages``::

    lag = LagListener(prometheus_port=9108)   # http://driver:9108/metrics

========================================= ==========================================
``rocketlite_query_lag_messages``         per query and queue: ``query_id``,
                                          ``query_name``, ``topic``, ``broker_name``,
                                          ``queue_id``
``rocketlite_query_max_lag_messages``     per query: the largest of its queues'
========================================= ==========================================

A query's series go when it terminates.
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
    the last one, and ``on_lag(query_id, lag)`` (optional) is called with each.

    ``prometheus_port``: serve the running queries' lag as Prometheus gauges at
    ``http://<prometheus_host>:<port>/metrics`` from the driver (0 picks a free port:
    ``self.prometheus_port`` says which). ``registry``: add the gauges to this
    prometheus-client registry instead (an application that serves its own)."""

    def __init__(
        self,
        on_lag: Callable[[str, Lag], None] | None = None,
        *,
        prometheus_port: int | None = None,
        prometheus_host: str = "127.0.0.1",
        registry: Any | None = None,
    ) -> None:
        self._on_lag = on_lag
        self._lock = threading.Lock()
        self._latest: dict[str, Lag] = {}
        #: the running queries' names (their lag is exported), by query id
        self._running: dict[str, str] = {}
        #: the port the gauges are served on, None when they are not
        self.prometheus_port: int | None = None
        self._server: Any = None
        if prometheus_port is not None or registry is not None:
            self._export(prometheus_port, prometheus_host, registry)

    def _export(self, port: int | None, host: str, registry: Any | None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"prometheus_port {port!r} must be 0..65535 (0 picks a free one)")
        target = registry if registry is not None else CollectorRegistry(auto_describe=False)
        target.register(_LagCollector(self._snapshot))
        if port is not None:
            self._server, _ = start_http_server(port, addr=host, registry=target)
            self.prometheus_port = self._server.server_address[1]

    def close(self) -> None:
        """Stop serving the gauges (the listener goes on computing lag)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _snapshot(self) -> list[tuple[str, str, Lag]]:
        with self._lock:
            return [
                (qid, name, self._latest[qid])
                for qid, name in self._running.items()
                if qid in self._latest
            ]

    def latest(self, query_id: object) -> Lag | None:
        with self._lock:
            return self._latest.get(str(query_id))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        with self._lock:
            self._running[str(event.id)] = event.name or ""

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self._lock:  # its series end (latest() still answers)
            self._running.pop(str(event.id), None)

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
                self._running[query_id] = progress.name or ""
            if self._on_lag is not None:
                self._on_lag(query_id, lag)


class _LagCollector:
    """The running queries' lag as gauges, read at each scrape."""

    def __init__(self, snapshot: Callable[[], list[tuple[str, str, Lag]]]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        per_queue = GaugeMetricFamily(
            "rocketlite_query_lag_messages",
            "Messages a streaming query is behind the brokers after its last batch, per queue",
            labels=["query_id", "query_name", "topic", "broker_name", "queue_id"],
        )
        worst = GaugeMetricFamily(
            "rocketlite_query_max_lag_messages",
            "The largest lag of a streaming query's queues after its last batch",
            labels=["query_id", "query_name"],
        )
        for query_id, name, lag in sorted(self._snapshot()):
            for mq, behind in lag.queues.items():
                labels = [query_id, name, mq.topic, mq.broker_name, str(mq.queue_id)]
                per_queue.add_metric(labels, behind)
            worst.add_metric([query_id, name], lag.max)
        yield per_queue
        yield worst
