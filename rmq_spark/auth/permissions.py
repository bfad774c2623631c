"""What every RPC of both protocols needs: ONE table, ``RULES``, keyed by the full method
name gRPC routes on (``/package.Service/Method``).

A :class:`Rule` says whether the RPC is for super users only, and otherwise how to read
the resources it touches from the request (:class:`Need`: a resource and the actions any
of which suffices). A rule without needs asks only for an authenticated, enabled user.
Rules read requests by field name only; they know nothing else of the messages.

Client ids: ``client_ids`` names the request fields (or, for RocketMQ 5, the
``x-mq-client-id`` header) that identify a client. The interceptor binds a client id to the
first user that uses it, so one user cannot unregister, unlock or terminate another user's
client (see docs/security.md for the limits of that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmq_spark.auth.acl import Action, Resource

if TYPE_CHECKING:
    from rocketmq.grpc_protocol import service_pb2 as v2_pb

    from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

V1 = "/rocketlite.v1."
V2 = "/apache.rocketmq.v2.MessagingService/"

PUB = frozenset({Action.PUB})
SUB = frozenset({Action.SUB})
PUB_OR_SUB = frozenset({Action.PUB, Action.SUB})
#: reading what a topic or group holds without consuming it (RocketMQ 5's choice for
#: queries by key and consumer progress)
SUB_OR_GET = frozenset({Action.SUB, Action.GET})


@dataclass(frozen=True)
class Need:
    resource: Resource
    actions: frozenset[Action]


#: A rule's reader of a request. Each reads the request of the RPC its rule is keyed by,
#: so the request's class depends on that key (Any); the generic ones below read any
#: message by field name.
Extract = Callable[[Any], Iterable[Need]]


@dataclass(frozen=True)
class Rule:
    #: only super users may call it (changes or reveals broker-wide state)
    super_only: bool = False
    #: the needs of the request (unary or server-streaming calls), checked before the call
    needs: Extract | None = None
    #: the needs of each message of a client stream (RocketMQ's Telemetry settings)
    message_needs: Extract | None = None
    #: client ids the request names, bound to the caller (see the module doc)
    client_ids: Callable[[Any], Iterable[str]] | None = None
    #: RocketMQ 5: the call acts as the client of the x-mq-client-id header
    header_client_id: bool = False


# -- extractors -------------------------------------------------------------------------


def _path(obj: object, dotted: str) -> Any:
    """The field a dotted path of field names reaches from ``obj`` (of any message)."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def topic(field: str, actions: frozenset[Action]) -> Extract:
    def extract(request: object) -> Iterable[Need]:
        name = _path(request, field)
        return [Need(Resource.topic(name), actions)] if name else []

    return extract


def group(field: str, actions: frozenset[Action] = SUB) -> Extract:
    def extract(request: object) -> Iterable[Need]:
        name = _path(request, field)
        return [Need(Resource.group(name), actions)] if name else []

    return extract


def each_topic(items: str, field: str, actions: frozenset[Action]) -> Extract:
    def extract(request: object) -> Iterable[Need]:
        names = {_path(item, field) for item in _path(request, items)}
        return [Need(Resource.topic(n), actions) for n in sorted(names) if n]

    return extract


def every_topic(action: Action) -> Extract:
    return lambda request: [Need(Resource("Topic", "*"), frozenset({action}))]


def topic_or_every(field: str, actions: frozenset[Action]) -> Extract:
    """The topic ``field`` names; when it is empty the call covers every topic (the
    handler reports all the group's), so it needs ``actions`` on ``Topic:*``."""

    def extract(request: object) -> Iterable[Need]:
        name = _path(request, field)
        return [Need(Resource.topic(name) if name else Resource("Topic", "*"), actions)]

    return extract


def each_topic_or_every(items: str, field: str, actions: frozenset[Action]) -> Extract:
    """Each topic of ``items``; when there are none the call covers every topic."""

    def extract(request: object) -> Iterable[Need]:
        if not len(_path(request, items)):
            return [Need(Resource("Topic", "*"), actions)]
        return each_topic(items, field, actions)(request)

    return extract


def both(*extracts: Extract) -> Extract:
    def extract(request: object) -> Iterable[Need]:
        return [need for e in extracts for need in e(request)]

    return extract


def fields(*names: str) -> Callable[[object], Iterable[str]]:
    return lambda request: [v for v in (getattr(request, n) for n in names) if v]


def _staging_sink(request: messaging_pb2.SendMessagesRequest) -> Iterable[str]:
    """A Spark sink is bound to its user as a client id is (``sink:`` keeps the two apart):
    another user can neither stage into it nor end its batches."""
    if request.HasField("stage") and request.stage.sink_id:
        return [f"sink:{request.stage.sink_id}"]
    return []


def _ended_sink(request: messaging_pb2.EndSinkBatchRequest) -> Iterable[str]:
    return [f"sink:{request.sink_id}"] if request.sink_id else []


def _telemetry(command: v2_pb.TelemetryCommand) -> Iterable[Need]:
    """Settings of a RocketMQ 5 client: Pub per publishing topic, or Sub on the group and
    on each subscribed topic."""
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        return each_topic("settings.publishing.topics", "name", PUB)(command)
    if kind == "subscription":
        return both(
            group("settings.subscription.group.name"),
            each_topic("settings.subscription.subscriptions", "topic.name", SUB),
        )(command)
    return []


def _v2_heartbeat(request: v2_pb.HeartbeatRequest) -> Iterable[Need]:
    # Producers send no group; a consumer's heartbeat needs its group's Sub.
    return group("group.name")(request)


_GROUP_AND_QUEUE = both(group("group.name"), topic("message_queue.topic.name", SUB))
_GROUP_AND_TOPIC = both(group("group.name"), topic("topic.name", SUB))

# -- the table --------------------------------------------------------------------------

RULES: dict[str, Rule] = {
    # rocketlite.v1 MessagingService
    f"{V1}MessagingService/SendMessages": Rule(needs=topic("topic", PUB), client_ids=_staging_sink),
    f"{V1}MessagingService/PullMessages": Rule(
        needs=both(topic("queue.topic", SUB), group("consumer_group"))
    ),
    # commits only what a Pub-checked SendMessages staged, of a sink its caller stages for
    f"{V1}MessagingService/EndSinkBatch": Rule(client_ids=_ended_sink),
    f"{V1}MessagingService/QueryOffsets": Rule(needs=each_topic("queries", "queue.topic", SUB)),
    # names a commit-log position, not a topic: any topic's record can be read
    f"{V1}MessagingService/ViewMessage": Rule(super_only=True),
    # answers only records of the topic named (RocketMQ's QUERY_MESSAGE rule)
    f"{V1}MessagingService/QueryMessagesByKey": Rule(needs=topic("topic", SUB_OR_GET)),
    f"{V1}MessagingService/ConsumerSendBack": Rule(
        needs=both(group("consumer_group"), topic("original_topic", SUB))
    ),
    # rocketlite.v1 OffsetService
    f"{V1}OffsetService/UpdateConsumerOffsets": Rule(
        needs=both(group("consumer_group"), each_topic("offsets", "queue.topic", SUB))
    ),
    # no queues: the group's committed offsets of every topic
    f"{V1}OffsetService/QueryConsumerOffsets": Rule(
        needs=both(group("consumer_group"), each_topic_or_every("queues", "topic", SUB))
    ),
    # no topic: the group's progress on every topic it consumes
    f"{V1}OffsetService/GetConsumerProgress": Rule(
        needs=both(group("consumer_group", SUB_OR_GET), topic_or_every("topic", SUB_OR_GET))
    ),
    # rocketlite.v1 GroupService
    f"{V1}GroupService/Heartbeat": Rule(
        needs=both(group("consumer_group"), each_topic("subscriptions", "topic", SUB)),
        client_ids=fields("client_id"),
    ),
    f"{V1}GroupService/Unregister": Rule(
        needs=group("consumer_group"), client_ids=fields("client_id")
    ),
    f"{V1}GroupService/GetConsumerList": Rule(needs=group("consumer_group")),
    f"{V1}GroupService/WatchConsumerChanges": Rule(
        needs=group("consumer_group"), client_ids=fields("client_id")
    ),
    f"{V1}GroupService/LockQueues": Rule(
        needs=both(group("consumer_group"), each_topic("queues", "topic", SUB)),
        client_ids=fields("client_id"),
    ),
    f"{V1}GroupService/UnlockQueues": Rule(
        needs=both(group("consumer_group"), each_topic("queues", "topic", SUB)),
        client_ids=fields("client_id"),
    ),
    # rocketlite.v1 AdminService
    f"{V1}AdminService/CreateTopic": Rule(needs=topic("topic", frozenset({Action.CREATE}))),
    f"{V1}AdminService/UpdateTopic": Rule(needs=topic("topic", frozenset({Action.UPDATE}))),
    f"{V1}AdminService/DeleteTopic": Rule(needs=topic("topic", frozenset({Action.DELETE}))),
    f"{V1}AdminService/GetTopicRoute": Rule(needs=topic("topic", PUB_OR_SUB)),
    # every topic name: List on Topic:* (or *), or a super user
    f"{V1}AdminService/ListTopics": Rule(needs=every_topic(Action.LIST)),
    # name, version, limits: every client needs it to find brokers
    f"{V1}AdminService/GetBrokerInfo": Rule(),
    # users and grants: they edit the ACL file itself
    f"{V1}AdminService/CreateUser": Rule(super_only=True),
    f"{V1}AdminService/DeleteUser": Rule(super_only=True),
    f"{V1}AdminService/ListUsers": Rule(super_only=True),
    f"{V1}AdminService/GrantAcl": Rule(super_only=True),
    f"{V1}AdminService/RevokeAcl": Rule(super_only=True),
    f"{V1}AdminService/ListAcls": Rule(super_only=True),
    # apache.rocketmq.v2 MessagingService
    f"{V2}QueryRoute": Rule(needs=topic("topic.name", PUB_OR_SUB), header_client_id=True),
    f"{V2}Heartbeat": Rule(needs=_v2_heartbeat, header_client_id=True),
    f"{V2}SendMessage": Rule(
        needs=each_topic("messages", "topic.name", PUB), header_client_id=True
    ),
    f"{V2}QueryAssignment": Rule(needs=_GROUP_AND_TOPIC, header_client_id=True),
    f"{V2}ReceiveMessage": Rule(needs=_GROUP_AND_QUEUE, header_client_id=True),
    f"{V2}AckMessage": Rule(needs=_GROUP_AND_TOPIC, header_client_id=True),
    f"{V2}ForwardMessageToDeadLetterQueue": Rule(needs=_GROUP_AND_TOPIC, header_client_id=True),
    f"{V2}PullMessage": Rule(needs=_GROUP_AND_QUEUE, header_client_id=True),
    f"{V2}UpdateOffset": Rule(needs=_GROUP_AND_QUEUE, header_client_id=True),
    f"{V2}GetOffset": Rule(needs=_GROUP_AND_QUEUE, header_client_id=True),
    f"{V2}QueryOffset": Rule(needs=topic("message_queue.topic.name", SUB), header_client_id=True),
    f"{V2}EndTransaction": Rule(needs=topic("topic.name", PUB), header_client_id=True),
    f"{V2}Telemetry": Rule(message_needs=_telemetry, header_client_id=True),
    f"{V2}NotifyClientTermination": Rule(needs=group("group.name"), header_client_id=True),
    # RocketMQ checks the group only; the handler acts on the request topic's deliveries
    f"{V2}ChangeInvisibleDuration": Rule(needs=_GROUP_AND_TOPIC, header_client_id=True),
    f"{V2}RecallMessage": Rule(needs=topic("topic.name", PUB), header_client_id=True),
    f"{V2}SyncLiteSubscription": Rule(needs=_GROUP_AND_TOPIC, header_client_id=True),
}


def rule_for(method: str) -> Rule | None:
    return RULES.get(method)


def served_methods() -> list[str]:
    """Full names of every RPC the broker serves, from the proto descriptors."""
    from rmq_spark.wire.proto_gen.rocketlite.v1 import (
        admin_pb2,
        groups_pb2,
        messaging_pb2,
        offsets_pb2,
    )

    files = [messaging_pb2, offsets_pb2, groups_pb2, admin_pb2]
    try:
        from rocketmq.grpc_protocol import service_pb2

        files.append(service_pb2)
    except ImportError:
        pass
    return [
        f"/{service.full_name}/{method.name}"
        for module in files
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]
