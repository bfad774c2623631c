"""What every v2 call shares: turning failures into statuses, reading the client id and
checking names and topics, and the broker facts several calls need (FIFO groups, attempts,
the endpoints and message types a queue is announced with).

Names are checked by the rules every protocol of the broker uses (:mod:`rmq_spark.names`,
:mod:`rmq_spark.broker.core.checks`); only the code a refusal is answered with is v2's own.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import TopicConfig
from rmq_spark.broker.v2.codes import Code, V2Error, code_of, status
from rmq_spark.errors import InvalidArgumentError, ReservedTopicError, RocketliteError
from rmq_spark.filter import SQL92, TAG, Selector
from rmq_spark.names import check_sendable, validate_group, validate_topic

log = logging.getLogger("rmq_spark.broker")

CLIENT_ID_HEADER = "x-mq-client-id"

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

#: a unary method as gRPC calls it: (servicer, request, context), awaited for the response
Unary = Callable[[S, Req, grpc.aio.ServicerContext], Coroutine[Any, Any, Resp]]


def answered(
    response_type: Callable[..., Resp],
) -> Callable[[Unary[S, Req, Resp]], Unary[S, Req, Resp]]:
    """A unary method whose failures become ``response_type(status=...)``."""

    def wrap(method: Unary[S, Req, Resp]) -> Unary[S, Req, Resp]:
        @functools.wraps(method)
        async def handler(self: S, request: Req, context: grpc.aio.ServicerContext) -> Resp:
            try:
                return await method(self, request, context)
            except Exception as exc:
                return response_type(status=failure_status(exc, method.__name__))

        return handler

    return wrap


def failure_status(exc: BaseException, rpc: str) -> pb.Status:
    """The status of a failed request: a rocketlite error's code and message; anything
    else is a bug, logged, and answered INTERNAL_SERVER_ERROR."""
    if isinstance(exc, RocketliteError):
        return status(code_of(exc), str(exc))
    log.error("internal error in v2 %s", rpc, exc_info=exc)
    return status(code_of(exc), f"internal broker error: {type(exc).__name__}: {exc}")


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return value
    return ""


def required_client_id(context: grpc.aio.ServicerContext) -> str:
    client_id = client_id_of(context)
    if not client_id.strip():
        raise V2Error(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is missing or blank")
    return client_id


def checked_name(check: Callable[[str], str], name: str, code: int) -> str:
    """``check(name)``, a refusal of it answered with ``code``."""
    try:
        return check(name)
    except InvalidArgumentError as exc:
        raise V2Error(code, str(exc)) from None


def topic_name(resource: pb.Resource, *, allow_system: bool = False) -> str:
    """A topic a client names (``allow_system``: ``%RETRY%``/``%DLQ%`` ones too)."""
    check = functools.partial(validate_topic, allow_system=allow_system)
    return checked_name(check, resource.name, Code.ILLEGAL_TOPIC)


def sendable_topic_name(resource: pb.Resource) -> str:
    """A topic a producer names: one a producer of any protocol may send to. The broker's
    own topics and dead-letter queues are ILLEGAL_TOPIC, as RocketMQ 5 answers a send to a
    system topic."""
    topic = checked_name(checks.sendable_topic, resource.name, Code.ILLEGAL_TOPIC)
    try:
        return check_sendable(topic)
    except ReservedTopicError as exc:
        raise V2Error(Code.ILLEGAL_TOPIC, str(exc)) from None


def filter_type(expression: pb.FilterExpression) -> str:
    """The expression type a v2 filter names: SQL is SQL92, anything else TAG (as the
    proxy reads it)."""
    return SQL92 if expression.type == pb.SQL else TAG


def read_filter(
    expression: pb.FilterExpression, broker: Broker
) -> tuple[list[int] | None, Selector | None]:
    """What a receive's or pull's filter selects, as (tag codes, selector), read by the
    broker core's one decoder (:meth:`MessagingCore.read_filter`).

    A tag filter (unspecified is TAG) narrows by the tags' hash codes and then checks the
    TAGS of those messages exactly (different tags can share a code; RocketMQ 5's proxy
    re-checks them as well, its clients do not). What cannot be read is answered by the
    core's table: ILLEGAL_FILTER_EXPRESSION naming why (a SQL92 selector's column), and
    NOT_IMPLEMENTED naming --no-property-filter on a broker started with it."""
    found = broker.messaging.read_filter(
        filter_type(expression), expression.expression, exact_tags=True
    )
    return found.tag_codes, found.selector


def group_name(resource: pb.Resource) -> str:
    return checked_name(validate_group, resource.name, Code.ILLEGAL_CONSUMER_GROUP)


def existing_topic(broker: Broker, topic: str) -> TopicConfig:
    """The config of a topic on this broker; TOPIC_NOT_FOUND when it has none (a v2
    client's topic is never created by a request)."""
    config = broker.messaging.topics.find(topic)
    if config is None:
        raise V2Error(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist on this broker")
    return config


def is_fifo_group(broker: Broker, topics: list[str]) -> bool:
    """A group is FIFO when it subscribes to a FIFO topic (RocketMQ sets this on the
    group; rocketlite has no group table, so the topic's type says it)."""
    for topic in topics:
        config = broker.messaging.topics.find(topic)
        if config is not None and config.message_type == "FIFO":
            return True
    return False


def max_attempts(broker: Broker, group: str) -> int:
    """Deliveries of one message to ``group`` before it goes to the dead-letter queue."""
    return broker.subscription_groups.retry_max_times(group) + 1


def endpoints_for(broker: Broker, asked: pb.Endpoints) -> pb.Endpoints:
    """The address clients should use: the one they reached us by (a single broker is
    its own access point), else the advertised endpoint."""
    if asked.addresses:
        return asked
    host, _, port = broker.endpoint.rpartition(":")
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])


def accepted_types(message_type: str) -> list[int]:
    if message_type == "MIXED":
        return [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    return [getattr(pb, message_type)]
