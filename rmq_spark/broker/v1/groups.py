"""GroupService: consumer-group membership and queue locks over gRPC.

A thin servicer: it validates requests, converts protocol messages to plain values and
delegates to :class:`~rmq_spark.broker.membership.groups.ConsumerRegistry` and
:class:`~rmq_spark.broker.membership.locks.QueueLockManager`. The only store access is creating a
group's retry topic on its first CLUSTERING heartbeat (RocketMQ does the same).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from rmq_spark.broker.core import checks
from rmq_spark.broker.membership.filters import Subscribed
from rmq_spark.broker.membership.groups import MembershipEvent
from rmq_spark.broker.v1.queues import check_queue
from rmq_spark.broker.v1.status import blocking, streaming
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms
from rmq_spark.errors import InvalidArgumentError, ResourceExhaustedError
from rmq_spark.filter import TAG
from rmq_spark.names import RETRY_PREFIX, retry_topic, validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, groups_pb2, groups_pb2_grpc
from rmq_spark.wire.v1 import mq_to_pb

if TYPE_CHECKING:
    from rmq_spark.broker.core.broker import Broker

MAX_CLIENT_ID_LENGTH = 255

_MESSAGE_MODELS = {
    groups_pb2.MESSAGE_MODEL_CLUSTERING: "CLUSTERING",
    groups_pb2.MESSAGE_MODEL_BROADCASTING: "BROADCASTING",
}
_CONSUME_TYPES = {
    groups_pb2.CONSUME_TYPE_PULL: "PULL",
    groups_pb2.CONSUME_TYPE_PUSH: "PUSH",
}
_CONSUME_FROM = {
    groups_pb2.CONSUME_FROM_WHERE_UNSPECIFIED: "LAST_OFFSET",
    groups_pb2.CONSUME_FROM_WHERE_LAST_OFFSET: "LAST_OFFSET",
    groups_pb2.CONSUME_FROM_WHERE_FIRST_OFFSET: "FIRST_OFFSET",
    groups_pb2.CONSUME_FROM_WHERE_TIMESTAMP: "TIMESTAMP",
}


def validate_client_id(client_id: object) -> str:
    """A client id is 1..255 printable characters without spaces (e.g. ``10.0.0.7@4242``)."""
    if not isinstance(client_id, str) or not client_id:
        raise InvalidArgumentError("client_id must be a non-empty string such as 'ip@pid'")
    if len(client_id) > MAX_CLIENT_ID_LENGTH or not client_id.isprintable() or " " in client_id:
        raise InvalidArgumentError(
            f"client_id {client_id[:40]!r} must be at most {MAX_CLIENT_ID_LENGTH} printable "
            "characters without spaces"
        )
    return client_id


def _enum_value(table: Mapping[Any, str], value: int, field: str) -> str:
    try:
        return table[value]
    except KeyError:
        choices = ", ".join(sorted(set(table.values())))
        raise InvalidArgumentError(
            f"{field}={value} is not set or unknown; use {choices}"
        ) from None


def _event_to_pb(event: MembershipEvent) -> groups_pb2.ConsumerChangeEvent:
    return groups_pb2.ConsumerChangeEvent(
        consumer_group=event.group,
        consumer_ids=event.consumer_ids,
        membership_version=event.version,
    )


class GroupServicer(groups_pb2_grpc.GroupServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers

    @blocking
    def Heartbeat(
        self, request: groups_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> groups_pb2.HeartbeatResponse:
        group = validate_group(request.consumer_group)
        client_id = validate_client_id(request.client_id)
        model = _enum_value(_MESSAGE_MODELS, request.message_model, "message_model")
        consume_type = _enum_value(_CONSUME_TYPES, request.consume_type, "consume_type")
        from_where = _enum_value(_CONSUME_FROM, request.consume_from_where, "consume_from_where")
        config = self._broker.config
        checks.at_most(
            len(request.subscriptions),
            "subscriptions",
            config.max_request_items,
            "--max-request-items",
        )
        registry = self._broker.consumers
        # Each subscription read by the broker core's one decoder: one that cannot be read
        # (a malformed SQL92 selector: INVALID_ARGUMENT naming the topic, the column and
        # why; any SQL92 one under --no-property-filter: FAILED_PRECONDITION) is refused,
        # so a member never joins with a filter none of its pulls could use.
        subscriptions = registry.read_subscriptions(
            client_id, [(group, self._subscriptions(request.subscriptions))]
        )[group]
        if model == "CLUSTERING" and self._consumes_here([s.topic for s in subscriptions]):
            # Before joining, so a member that got an answer can subscribe to the retry topic.
            self._ensure_retry_topic(group)
        registry.heartbeat(
            client_id,
            group,
            subscriptions,
            model,  # type: ignore[arg-type]
            consume_type,  # type: ignore[arg-type]
            from_where,  # type: ignore[arg-type]
            request.consume_timestamp_ms,
        )
        return groups_pb2.HeartbeatResponse(
            session_timeout_ms=registry.session_timeout_ms,
            membership_version=registry.snapshot(group).version,
        )

    def _subscriptions(self, entries: Sequence[groups_pb2.Subscription]) -> list[Subscribed]:
        """A heartbeat's subscriptions as sent (rocketlite.v1 carries no version: the
        registry counts each from the heartbeat that first brought it)."""
        return [
            Subscribed(
                validate_topic(s.topic, allow_system=True), s.expression, s.expression_type or TAG
            )
            for s in entries
        ]

    def _consumes_here(self, topics: list[str]) -> bool:
        """Whether the group reads a topic of this broker (or may once topics are made on
        first use): only then does it get a retry topic here."""
        if self._broker.config.auto_create_topics:
            return True
        found = self._broker.messaging.topics
        return any(
            not topic.startswith(RETRY_PREFIX) and found.find(topic) is not None for topic in topics
        )

    def _ensure_retry_topic(self, group: str) -> None:
        topics = self._broker.messaging.topics
        name = retry_topic(group)
        if topics.find(name) is not None:
            return
        limit = self._broker.config.max_consumer_groups
        existing = sum(1 for t in topics.list() if t.name.startswith(RETRY_PREFIX))
        if existing >= limit:
            raise ResourceExhaustedError(
                f"broker {self._broker.name!r} already has {existing:,} retry topics, its "
                f"limit for consumer groups (--max-consumer-groups {limit:,}); group "
                f"{group!r} cannot join: remove unused groups' %RETRY% topics or raise it"
            )
        topics.ensure_system_topic(name, 1)

    @blocking
    def Unregister(
        self, request: groups_pb2.UnregisterRequest, context: grpc.aio.ServicerContext
    ) -> groups_pb2.UnregisterResponse:
        group = validate_group(request.consumer_group)
        self._broker.consumers.unregister(validate_client_id(request.client_id), group)
        return groups_pb2.UnregisterResponse()

    @blocking
    def GetConsumerList(
        self, request: groups_pb2.GetConsumerListRequest, context: grpc.aio.ServicerContext
    ) -> groups_pb2.GetConsumerListResponse:
        event = self._broker.consumers.snapshot(validate_group(request.consumer_group))
        return groups_pb2.GetConsumerListResponse(
            consumer_ids=event.consumer_ids, membership_version=event.version
        )

    @streaming
    async def WatchConsumerChanges(
        self, request: groups_pb2.WatchConsumerChangesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[groups_pb2.ConsumerChangeEvent]:
        # On the event loop: an open stream holds no thread while it waits for a change.
        group = validate_group(request.consumer_group)
        client_id = validate_client_id(request.client_id) if request.client_id else ""
        async for event in self._broker.consumers.watch(group, client_id):
            yield _event_to_pb(event)

    @blocking
    def LockQueues(
        self, request: groups_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> groups_pb2.LockQueuesResponse:
        group = validate_group(request.consumer_group)
        client_id = validate_client_id(request.client_id)
        queues = _queues(self._broker, request.queues, must_exist=True)
        locks = self._broker.locks
        lease_ms = locks.effective_lease_ms(request.lease_ms)
        locked, _ = locks.lock(group, client_id, queues, lease_ms)
        return groups_pb2.LockQueuesResponse(
            locked_queues=[mq_to_pb(mq) for mq in locked],
            lease_ms=lease_ms,
            lease_expire_timestamp_ms=now_ms() + lease_ms,
        )

    @blocking
    def UnlockQueues(
        self, request: groups_pb2.UnlockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> groups_pb2.UnlockQueuesResponse:
        group = validate_group(request.consumer_group)
        client_id = validate_client_id(request.client_id)
        # A deleted topic's locks can still be released, so existence is not checked.
        queues = _queues(self._broker, request.queues, must_exist=False)
        self._broker.locks.unlock(group, client_id, queues)
        return groups_pb2.UnlockQueuesResponse()


def _queues(
    broker: Broker, queues: Sequence[common_pb2.MessageQueue], *, must_exist: bool
) -> list[MessageQueue]:
    """The requested queues as values on this broker; the first bad one fails the call."""
    limit = broker.config.max_request_items
    checks.at_most(len(queues), "queues", limit, "--max-request-items")
    checked = []
    for i, pb in enumerate(queues):
        with checks.item(f"queues[{i}]"):
            checked.append(check_queue(broker, pb, must_exist=must_exist)[0])
    return checked
