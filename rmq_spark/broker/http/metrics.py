"""``/metrics``: the broker's counters and state in Prometheus' text format, through
prometheus-client, under RocketMQ 5's metric names and labels where RocketMQ has one
(``rocketmq_*``) and ``rocketlite_*`` where it has none.

Counters come from :class:`~rmq_spark.broker.stats.BrokerStats` (taken once, where every
protocol passes); lag, storage and membership are read at scrape time. With ACL on, a user
sees the series of the topics and groups its policies grant it anything on.

===================================== ======================================= ==========
metric                                labels                                  unit
===================================== ======================================= ==========
rocketmq_messages_in_total            topic                                   messages
rocketmq_throughput_in_total          topic                                   bytes
rocketmq_messages_out_total           topic, consumer_group                   messages
rocketmq_throughput_out_total         topic, consumer_group                   bytes
rocketmq_send_to_dlq_messages_total   topic, consumer_group                   messages
rocketlite_send_back_messages_total   topic, consumer_group                   messages
rocketmq_consumer_lag_messages        topic, consumer_group, queue_id         messages
rocketmq_consumer_lag_latency         topic, consumer_group, queue_id         ms
rocketmq_consumer_inflight_messages   topic, consumer_group, queue_id         messages
rocketmq_consumer_ready_messages      topic, consumer_group, queue_id         messages
rocketmq_consumer_connections         consumer_group                          clients
rocketmq_rpc_latency                  protocol_type, request_code,            ms
                                      response_code                           (histogram)
rocketmq_storage_size                 (none)                                  bytes
rocketmq_storage_flush_behind_bytes   (none)                                  bytes
rocketlite_storage_flush_latency      (none)                                  ms (histogram)
rocketlite_disk_total_bytes,          (none)                                  bytes
rocketlite_disk_free_bytes
rocketlite_ready                      (none)                                  0 or 1
rocketlite_long_polls_held            (none)                                  reads
rocketlite_connections                protocol_type                           connections
rocketmq_topic_number,                (none)                                  count
rocketmq_consumer_group_number
===================================== ======================================= ==========
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.http.health import Phase, readiness
from rmq_spark.broker.http.lag import group_lags
from rmq_spark.histogram import HistogramSnapshot

__all__ = ["CONTENT_TYPE", "Visible", "render"]

#: the text format's content type (version 0.0.4, what every Prometheus scrapes)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: whether a user may see the series of a topic (and consumer group, when not None)
Visible = Callable[[str, str | None], bool]


def render(
    broker: Broker,
    connections: dict[str, int],
    visible: Visible | None = None,
    other_members: Mapping[str, int] | None = None,
) -> bytes:
    """One scrape, in Prometheus' text format (blocking: store reads; call on a worker).
    ``other_members``: per group, its live members the broker's group registry does not
    hold (RocketMQ 5 clients)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(broker, connections, visible, other_members or {}))
    return generate_latest(registry)


class _Collector:
    def __init__(
        self,
        broker: Broker,
        connections: dict[str, int],
        visible: Visible | None,
        other_members: Mapping[str, int],
    ) -> None:
        self._broker = broker
        self._connections = connections
        self._visible = visible or (lambda topic, group: True)
        self._other_members = other_members

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        broker, visible = self._broker, self._visible
        taken = broker.stats.snapshot()
        yield from _flows(taken.messages_in, taken.messages_out, visible)
        sent_back = CounterMetricFamily(
            "rocketlite_send_back_messages",
            "Messages consumers gave back for redelivery, per topic and group",
            labels=["topic", "consumer_group"],
        )
        dead = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a group's dead-letter queue, per topic and group",
            labels=["topic", "consumer_group"],
        )
        for family, table in ((sent_back, taken.sent_back), (dead, taken.dead_letters)):
            for (group, topic), count in sorted(table.items()):
                if visible(topic, group):
                    family.add_metric([topic, group], count)
            yield family
        yield from _lag(broker, taken.read_to, visible)
        members = GaugeMetricFamily(
            "rocketmq_consumer_connections",
            "Live members of each consumer group, whatever protocol they speak",
            labels=["consumer_group"],
        )
        groups = set(broker.consumers.groups()) | set(self._other_members)
        for group in sorted(groups):
            if visible("", group):
                count = len(broker.consumers.members(group)) + self._other_members.get(group, 0)
                members.add_metric([group], count)
        yield members
        latency = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "How long requests took from arrival to answer, in ms",
            labels=["protocol_type", "request_code", "response_code"],
        )
        for (protocol, kind, result), snap in sorted(
            taken.requests.items(), key=lambda item: tuple(map(str, item[0]))
        ):
            latency.add_metric([protocol, str(kind), str(result)], *_histogram(snap))
        yield latency
        yield from _storage(broker)
        waiting = GaugeMetricFamily(
            "rocketlite_long_polls_held", "Reads waiting for messages (long polling)"
        )
        waiting.add_metric([], broker.notifier.waiting())
        yield waiting
        connections = GaugeMetricFamily(
            "rocketlite_connections", "Open client connections", labels=["protocol_type"]
        )
        for protocol, count in sorted(self._connections.items()):
            connections.add_metric([protocol], count)
        yield connections
        topics = broker.messaging.topics.list()
        yield GaugeMetricFamily("rocketmq_topic_number", "Topics on this broker", len(topics))
        yield GaugeMetricFamily(
            "rocketmq_consumer_group_number",
            "Consumer groups with members or committed offsets",
            len(set(groups) | {group for _, group in broker.messaging.offsets.snapshot()}),
        )


def _flows(
    messages_in: dict[str, tuple[int, int]],
    messages_out: dict[tuple[str, str], tuple[int, int]],
    visible: Visible,
) -> Iterator[Metric]:
    count_in = CounterMetricFamily(
        "rocketmq_messages_in", "Messages stored, per topic", labels=["topic"]
    )
    bytes_in = CounterMetricFamily(
        "rocketmq_throughput_in", "Bytes of messages stored, per topic", labels=["topic"]
    )
    for topic, (count, size) in sorted(messages_in.items()):
        if visible(topic, None):
            count_in.add_metric([topic], count)
            bytes_in.add_metric([topic], size)
    count_out = CounterMetricFamily(
        "rocketmq_messages_out",
        "Messages handed to consumers, per topic and group",
        labels=["topic", "consumer_group"],
    )
    bytes_out = CounterMetricFamily(
        "rocketmq_throughput_out",
        "Bytes of messages handed to consumers, per topic and group",
        labels=["topic", "consumer_group"],
    )
    for (group, topic), (count, size) in sorted(messages_out.items()):
        if visible(topic, group or None):
            count_out.add_metric([topic, group], count)
            bytes_out.add_metric([topic, group], size)
    yield from (count_in, bytes_in, count_out, bytes_out)


def _lag(
    broker: Broker, read_to: dict[tuple[str, str, int], int], visible: Visible
) -> Iterator[Metric]:
    labels = ["topic", "consumer_group", "queue_id"]
    lag = GaugeMetricFamily(
        "rocketmq_consumer_lag_messages",
        "Messages stored but not yet committed by the group, per queue",
        labels=labels,
    )
    lag_ms = GaugeMetricFamily(
        "rocketmq_consumer_lag_latency",
        "How long ago the oldest message the group has not committed was stored, in ms",
        labels=labels,
    )
    inflight = GaugeMetricFamily(
        "rocketmq_consumer_inflight_messages",
        "Messages handed to the group and not yet committed, per queue",
        labels=labels,
    )
    ready = GaugeMetricFamily(
        "rocketmq_consumer_ready_messages",
        "Messages stored and not yet handed to the group, per queue",
        labels=labels,
    )
    now_ms = int(time.time() * 1000)
    for row in group_lags(broker.messaging, read_to, now_ms, visible):
        values = [row.topic, row.group, str(row.queue_id)]
        lag.add_metric(values, row.lag)
        lag_ms.add_metric(values, row.lag_ms)
        inflight.add_metric(values, row.inflight)
        ready.add_metric(values, row.ready)
    yield from (lag, lag_ms, inflight, ready)


def _storage(broker: Broker) -> Iterator[Metric]:
    storage = broker.messaging.storage()
    yield GaugeMetricFamily(
        "rocketmq_storage_size", "Bytes the commit log holds", storage.commitlog_bytes
    )
    yield GaugeMetricFamily(
        "rocketmq_storage_flush_behind_bytes",
        "Bytes written to the commit log and not yet flushed to disk",
        storage.flush_behind_bytes,
    )
    flush = HistogramMetricFamily(
        "rocketlite_storage_flush_latency", "How long each commit-log flush took, in ms"
    )
    flush.add_metric([], *_histogram(storage.flush_ms))
    yield flush
    yield GaugeMetricFamily(
        "rocketlite_disk_total_bytes", "Size of the store's disk", storage.disk_total_bytes
    )
    yield GaugeMetricFamily(
        "rocketlite_disk_free_bytes", "Free bytes on the store's disk", storage.disk_free_bytes
    )
    state = readiness(
        Phase.SERVING,
        failure=storage.failure,
        disk_full=storage.disk_full,
        free_bytes=storage.disk_free_bytes,
    )
    yield GaugeMetricFamily(
        "rocketlite_ready", "1 when the broker takes writes (see /readyz)", int(state.ready)
    )


def _histogram(snap: HistogramSnapshot) -> tuple[list[tuple[str, float]], float]:
    return [(bound, float(count)) for bound, count in snap.cumulative()], snap.total
