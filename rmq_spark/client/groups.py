"""GroupService and ConsumerSendBack over the wire: what a push consumer says to brokers.

Membership (heartbeat, unregister, consumer list, the watch stream), queue leases (lock and
unlock) and giving back a message that failed. Each function takes the consumer's
:class:`~rmq_spark.client.cluster.Cluster` and groups queues by broker where it needs to,
so callers deal in :class:`MessageQueue` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import Connection, error_from_rpc
from rmq_spark.errors import InvalidArgumentError, RocketliteError
from rmq_spark.filter import TAG
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2, messaging_pb2
from rmq_spark.wire.v1 import mq_from_pb, mq_to_pb

__all__ = [
    "ConsumerWatch",
    "Lease",
    "SendBackResult",
    "Subscription",
    "consumer_list",
    "heartbeat",
    "lock_queues",
    "send_back",
    "unlock_queues",
    "unregister",
]

_MESSAGE_MODELS = {
    "CLUSTERING": groups_pb2.MESSAGE_MODEL_CLUSTERING,
    "BROADCASTING": groups_pb2.MESSAGE_MODEL_BROADCASTING,
}
_CONSUME_FROM = {
    "LAST_OFFSET": groups_pb2.CONSUME_FROM_WHERE_LAST_OFFSET,
    "FIRST_OFFSET": groups_pb2.CONSUME_FROM_WHERE_FIRST_OFFSET,
    "TIMESTAMP": groups_pb2.CONSUME_FROM_WHERE_TIMESTAMP,
}


class Subscription(NamedTuple):
    """A topic and its expression, as a heartbeat reports it: tags, or with
    ``expression_type`` "SQL92" a SQL92 selector."""

    topic: str
    expression: str
    expression_type: str = TAG


@dataclass(frozen=True)
class HeartbeatInfo:
    """What every heartbeat of one member says."""

    client_id: str
    group: str
    subscriptions: tuple[Subscription, ...]
    message_model: str = "CLUSTERING"
    push: bool = True
    consume_from: str = "LAST_OFFSET"
    consume_timestamp_ms: int = 0

    def to_pb(self) -> groups_pb2.HeartbeatRequest:
        return groups_pb2.HeartbeatRequest(
            client_id=self.client_id,
            consumer_group=self.group,
            subscriptions=[
                groups_pb2.Subscription(
                    topic=s.topic,
                    expression=s.expression,
                    expression_type="" if s.expression_type == TAG else s.expression_type,
                )
                for s in self.subscriptions
            ],
            message_model=_MESSAGE_MODELS[self.message_model],
            consume_type=groups_pb2.CONSUME_TYPE_PUSH
            if self.push
            else groups_pb2.CONSUME_TYPE_PULL,
            consume_from_where=_CONSUME_FROM[self.consume_from],
            consume_timestamp_ms=self.consume_timestamp_ms,
        )


def heartbeat(conn: Connection, info: HeartbeatInfo) -> groups_pb2.HeartbeatResponse:
    """One heartbeat to one broker; the answer carries the session timeout."""
    return conn.call(conn.groups.Heartbeat, info.to_pb())


def unregister(cluster: Cluster, client_id: str, group: str) -> dict[str, RocketliteError | None]:
    """Leave ``group`` on every broker; per endpoint, None or the error (never raises)."""
    request = groups_pb2.UnregisterRequest(client_id=client_id, consumer_group=group)
    answers = cluster.fan_out(lambda conn: conn.call(conn.groups.Unregister, request))
    return {ep: a if isinstance(a, RocketliteError) else None for ep, a in answers.items()}


def consumer_list(conn: Connection, group: str) -> tuple[list[str], int]:
    """The sorted client ids of ``group``'s live members on one broker, and the version."""
    answer = conn.call(
        conn.groups.GetConsumerList, groups_pb2.GetConsumerListRequest(consumer_group=group)
    )
    return sorted(answer.consumer_ids), answer.membership_version


class ConsumerWatch:
    """The membership stream of one group on one broker; iterate for (ids, version) pairs.

    With ``client_id`` set the open stream stands for the member's connection: when it ends
    the broker drops the member. :meth:`cancel` ends it from any thread.
    """

    def __init__(self, conn: Connection, group: str, client_id: str = "") -> None:
        self.endpoint = conn.endpoint
        self._tls = conn.config.tls
        request = groups_pb2.WatchConsumerChangesRequest(consumer_group=group, client_id=client_id)
        self._call: Any = conn.groups.WatchConsumerChanges(request)

    def __iter__(self) -> Iterator[tuple[list[str], int]]:
        try:
            for event in self._call:
                yield sorted(event.consumer_ids), event.membership_version
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise error_from_rpc(exc, self.endpoint, "WatchConsumerChanges", tls=self._tls) from exc

    def cancel(self) -> None:
        self._call.cancel()


class Lease(NamedTuple):
    """Queues a client now holds on one broker, and for how long from the request's send."""

    queues: frozenset[MessageQueue]
    lease_ms: int


def lock_queues(
    cluster: Cluster, group: str, client_id: str, queues: Iterable[MessageQueue], lease_ms: int
) -> dict[str, Lease | RocketliteError]:
    """Lock (or renew) ``queues`` for ``client_id``: one LockQueues per broker.

    Per broker name, the queues locked and the lease, or the error of that broker (a broker
    that cannot be reached must not stop the others' renewals).
    """
    result: dict[str, Lease | RocketliteError] = {}
    for endpoint, mqs in cluster.group_by_endpoint(queues).items():
        conn = cluster.connection(endpoint)
        request = groups_pb2.LockQueuesRequest(
            consumer_group=group,
            client_id=client_id,
            queues=[mq_to_pb(mq) for mq in mqs],
            lease_ms=lease_ms,
        )
        broker = mqs[0].broker_name
        try:
            answer = conn.call(conn.groups.LockQueues, request)
        except RocketliteError as exc:
            result[broker] = exc
            continue
        locked = frozenset(mq_from_pb(pb) for pb in answer.locked_queues)
        result[broker] = Lease(locked, answer.lease_ms)
    return result


def unlock_queues(
    cluster: Cluster, group: str, client_id: str, queues: Iterable[MessageQueue]
) -> None:
    """Release ``client_id``'s leases on ``queues``, one UnlockQueues per broker."""
    for endpoint, mqs in cluster.group_by_endpoint(queues).items():
        conn = cluster.connection(endpoint)
        request = groups_pb2.UnlockQueuesRequest(
            consumer_group=group, client_id=client_id, queues=[mq_to_pb(mq) for mq in mqs]
        )
        conn.call(conn.groups.UnlockQueues, request)


class SendBackResult(NamedTuple):
    """Where a given-back message went (``%RETRY%{group}`` or ``%DLQ%{group}``)."""

    queue: MessageQueue
    dead_lettered: bool
    reconsume_times: int
    delay_level: int
    offset_msg_id: str


def send_back(
    cluster: Cluster,
    group: str,
    broker_name: str,
    commit_log_offset: int,
    original_topic: str,
    *,
    delay_level: int = 0,
    max_reconsume_times: int = 16,
    dead_letter_now: bool = False,
    reconsume_times: int = 0,
) -> SendBackResult:
    """Give back the record at ``commit_log_offset`` of ``broker_name`` (ConsumerSendBack).

    ``delay_level`` 0 lets the broker pick ``3 + reconsumeTimes``; ``reconsume_times`` is
    the consumer's own count of failed deliveries (local retries included), used by the
    broker when higher than the record's. Raises rocketlite errors
    (PermissionDeniedError when the broker does not take writes).
    """
    if not 0 <= delay_level <= 18:
        raise InvalidArgumentError(f"delay_level={delay_level!r} must be 0 (broker's choice)..18")
    conn = cluster.connection(cluster.endpoint_of(broker_name))
    request = messaging_pb2.ConsumerSendBackRequest(
        consumer_group=group,
        message=messaging_pb2.MessageRef(physical_offset=commit_log_offset),
        original_topic=original_topic,
        delay_level=delay_level,
        max_reconsume_times=max_reconsume_times,
        dead_letter_now=dead_letter_now,
        reconsume_times=reconsume_times,
    )
    answer = conn.call(conn.messaging.ConsumerSendBack, request)
    return SendBackResult(
        mq_from_pb(answer.queue),
        answer.dead_lettered,
        answer.reconsume_times,
        answer.delay_level,
        answer.offset_msg_id,
    )
