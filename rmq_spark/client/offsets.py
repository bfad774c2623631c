"""Queue offsets and consumer-group offsets over the wire, one request per broker.

Shared by :class:`~rmq_spark.client.admin.Admin` and
:class:`~rmq_spark.client.consumer.PullConsumer`. Every function takes queues of any brokers,
groups them by broker, and merges the answers keyed by :class:`MessageQueue`.
:class:`ClusterOffsets` gives the push consumer's offset store
(:class:`~rmq_spark.offsets.remote_broker.RemoteBrokerOffsetStore`) a cluster's group
offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from rmq_spark.client.cluster import Cluster
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError
from rmq_spark.names import validate_group
from rmq_spark.offsets.remote_broker import CommittedOffset
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2, offsets_pb2
from rmq_spark.wire.v1 import mq_from_pb, mq_to_pb

__all__ = [
    "ClusterOffsets",
    "CommittedOffset",
    "QueueOffsets",
    "QueueProgress",
    "commit_offsets",
    "consumer_progress",
    "query_committed",
    "query_queue_offsets",
    "query_range_sizes",
]


class QueueOffsets(NamedTuple):
    """A queue's readable range; ``timestamp_offset`` only when a timestamp was asked."""

    min_offset: int
    max_offset: int
    timestamp_offset: int | None = None


class QueueProgress(NamedTuple):
    """One row of a group's progress: the broker's range, the committed offset and the lag."""

    message_queue: MessageQueue
    broker_min_offset: int
    broker_max_offset: int
    committed_offset: int | None
    lag: int


def _unique(queues: Iterable[MessageQueue]) -> list[MessageQueue]:
    out = list(dict.fromkeys(queues))
    if not out:
        raise InvalidArgumentError("no queue given; pass at least one MessageQueue")
    return out


def query_queue_offsets(
    cluster: Cluster, queues: Iterable[MessageQueue], timestamp_ms: int | None = None
) -> dict[MessageQueue, QueueOffsets]:
    """Min / max (and the offset at ``timestamp_ms``, broker's clock) of every queue."""
    if timestamp_ms is not None and (not isinstance(timestamp_ms, int) or timestamp_ms < 0):
        raise InvalidArgumentError(f"timestamp_ms={timestamp_ms!r} must be epoch ms >= 0")
    result: dict[MessageQueue, QueueOffsets] = {}
    for endpoint, group in cluster.group_by_endpoint(_unique(queues)).items():
        conn = cluster.connection(endpoint)
        request = messaging_pb2.QueryOffsetsRequest(
            queries=[
                messaging_pb2.QueueOffsetsQuery(queue=mq_to_pb(mq), timestamp_ms=timestamp_ms)
                for mq in group
            ]
        )
        response = conn.call(conn.messaging.QueryOffsets, request)
        for mq, answer in zip(group, response.offsets, strict=True):
            stamp = answer.timestamp_offset if answer.HasField("timestamp_offset") else None
            result[mq] = QueueOffsets(answer.min_offset, answer.max_offset, stamp)
    return result


class RangeSize(NamedTuple):
    """What a broker measured of a queue range: its record bytes, and with a budget the end
    of what fits in it (at least one message past the start when the range has any)."""

    size_bytes: int
    estimated: bool
    budget_end_offset: int | None = None


def query_range_sizes(
    cluster: Cluster,
    ranges: Mapping[MessageQueue, tuple[int, int]],
    budgets: Mapping[MessageQueue, int] | None = None,
) -> dict[MessageQueue, RangeSize]:
    """Bytes of the records of each ``[start, end)`` range (from the consume-queue entries,
    no record is read), and how far ``budgets[mq]`` bytes go from each start."""
    budgets = budgets or {}
    result: dict[MessageQueue, RangeSize] = {}
    for endpoint, group in cluster.group_by_endpoint(_unique(ranges)).items():
        conn = cluster.connection(endpoint)
        queries = []
        for mq in group:
            start, end = ranges[mq]
            query = messaging_pb2.QueueOffsetsQuery(
                queue=mq_to_pb(mq), size_from_offset=start, size_to_offset=end
            )
            if mq in budgets:
                query.size_budget_bytes = budgets[mq]
            queries.append(query)
        request = messaging_pb2.QueryOffsetsRequest(queries=queries)
        response = conn.call(conn.messaging.QueryOffsets, request)
        for mq, answer in zip(group, response.offsets, strict=True):
            budget_end = answer.budget_end_offset if answer.HasField("budget_end_offset") else None
            result[mq] = RangeSize(answer.size_bytes, answer.size_estimated, budget_end)
    return result


def query_committed(
    cluster: Cluster, group: str, queues: Iterable[MessageQueue]
) -> dict[MessageQueue, int]:
    """The group's committed offsets; queues never committed are absent (not 0)."""
    validate_group(group)
    result: dict[MessageQueue, int] = {}
    for endpoint, mqs in cluster.group_by_endpoint(_unique(queues)).items():
        conn = cluster.connection(endpoint)
        request = offsets_pb2.QueryConsumerOffsetsRequest(
            consumer_group=group, queues=[mq_to_pb(mq) for mq in mqs]
        )
        response = conn.call(conn.offsets.QueryConsumerOffsets, request)
        for mq, answer in zip(mqs, response.offsets, strict=True):
            if answer.HasField("offset"):
                result[mq] = answer.offset
    return result


def commit_offsets(
    cluster: Cluster,
    group: str,
    offsets: Mapping[MessageQueue, int],
    *,
    increase_only: bool,
) -> dict[MessageQueue, CommittedOffset]:
    """Commit ``offsets`` for ``group``: one UpdateConsumerOffsets per broker."""
    validate_group(group)
    for mq, offset in offsets.items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"offset {offset!r} for {mq} must be a whole number >= 0")
    result: dict[MessageQueue, CommittedOffset] = {}
    for endpoint, mqs in cluster.group_by_endpoint(_unique(offsets)).items():
        conn = cluster.connection(endpoint)
        request = offsets_pb2.UpdateConsumerOffsetsRequest(
            consumer_group=group,
            offsets=[offsets_pb2.QueueOffset(queue=mq_to_pb(mq), offset=offsets[mq]) for mq in mqs],
            increase_only=increase_only,
        )
        response = conn.call(conn.offsets.UpdateConsumerOffsets, request)
        for mq, answer in zip(mqs, response.results, strict=True):
            result[mq] = CommittedOffset(answer.offset, answer.updated)
    return result


def consumer_progress(
    cluster: Cluster, group: str, topic: str | None = None
) -> list[QueueProgress]:
    """The group's progress on every broker (optionally one topic), sorted by queue."""
    validate_group(group)
    request = offsets_pb2.GetConsumerProgressRequest(consumer_group=group, topic=topic or "")
    answers = cluster.fan_out(lambda conn: conn.call(conn.offsets.GetConsumerProgress, request))
    rows: list[QueueProgress] = []
    errors: list[RocketliteError] = []
    for answer in answers.values():
        if isinstance(answer, NotFoundError):
            continue  # the topic is not on that broker
        if isinstance(answer, RocketliteError):
            errors.append(answer)
            continue
        for q in answer.queues:
            committed = q.committed_offset if q.HasField("committed_offset") else None
            rows.append(
                QueueProgress(
                    mq_from_pb(q.queue), q.broker_min_offset, q.broker_max_offset, committed, q.lag
                )
            )
    if errors:
        raise errors[0]
    return sorted(rows)


class ClusterOffsets:
    """The group offsets of ``cluster``'s brokers, as
    :class:`~rmq_spark.offsets.remote_broker.BrokerOffsets` (what RemoteBrokerOffsetStore
    uses): :func:`query_committed` and :func:`commit_offsets`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def query_committed(
        self, group: str, queues: Iterable[MessageQueue]
    ) -> dict[MessageQueue, int]:
        return query_committed(self.cluster, group, queues)

    def commit(
        self, group: str, offsets: Mapping[MessageQueue, int], *, increase_only: bool
    ) -> dict[MessageQueue, CommittedOffset]:
        return commit_offsets(self.cluster, group, offsets, increase_only=increase_only)
