"""What ``mqadmin`` asks of a group's live consumers through the broker:
GET_CONSUMER_RUNNING_INFO (307, ``consumerStatus``) and CONSUME_MESSAGE_DIRECTLY (309,
``queryMsgById -g -d``) relayed to one client's connection, and
INVOKE_BROKER_TO_RESET_OFFSET (222, ``resetOffsetByTime``), which moves a group's offsets
and tells its clients.

A relayed call is a request of the broker's on the client's remoting connection, answered
by the client (RocketMQ's ``Broker2Client.callClient``): the client's answer (code, remark,
body) goes back to the tool as it came. No answer within :data:`CALL_CLIENT_TIMEOUT_S`
answers CONSUME_MSG_TIMEOUT (207), as RocketMQ does. Only a client connected over the
remoting protocol can be asked: a member of the group over rocketlite.v1 or RocketMQ 5
(gRPC) has no broker-to-client call, and is answered SYSTEM_ERROR saying so.

A reset finds each queue's offset by time in the broker core
(:mod:`rmq_spark.broker.core.offset_reset`), commits it for the group, and sends
RESET_CONSUMER_CLIENT_OFFSET (220, oneway) with the offset table to every member of the
group connected here over remoting: a Java push consumer drops its queues of the topic and
restarts them from the new offsets (a client that said it is C++ gets the list form its
client reads, ResetOffsetBodyForC). It answers the table, as ``mqadmin`` prints it. A group
with no live member at all is answered CONSUMER_NOT_ONLINE (206) and nothing is committed:
``mqadmin`` then sets the offsets itself (its ``resetOffsetByTimeOld`` path).

All three are a super user's with ACL on: they reach into a client (its threads' stacks,
a message of any topic consumed by it) or rewrite a group's offsets.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.offset_reset import NOW, offsets_at_time
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.membership import Membership
from rmq_spark.broker.remoting.namesrv import required
from rmq_spark.broker.remoting.server import Connection, next_opaque
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.record import parse_offset_msg_id
from rmq_spark.errors import InvalidArgumentError, UnavailableError
from rmq_spark.names import validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting import bodies, headers
from rmq_spark.wire.remoting.codes import FLAG_ONEWAY, OUR_VERSION, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command

log = logging.getLogger("rmq_spark.broker.remoting")

#: how long a relayed call waits for the client (RocketMQ's callClient: 10 s)
CALL_CLIENT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ClientCall:
    """A call relayed to one client of a group."""

    group: str
    client_id: str
    #: the header fields the client is sent
    ext: dict[str, str]
    #: CONSUME_MESSAGE_DIRECTLY: the message's commit-log position and the store host
    #: its id names (None for running info)
    message: tuple[str, int] | None = None


@dataclass(frozen=True)
class Reset:
    topic: str
    group: str
    #: ms since the epoch, or NOW (-1)
    timestamp_ms: int
    force: bool


class ClientCalls:
    def __init__(self, broker: Broker, workers: Workers, membership: Membership) -> None:
        self._broker = broker
        self._workers = workers
        self._membership = membership

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        return {
            code.GET_CONSUMER_RUNNING_INFO: Endpoint(
                functools.partial(self.relay, code.GET_CONSUMER_RUNNING_INFO),
                decode=_running_info,
            ),
            code.CONSUME_MESSAGE_DIRECTLY: Endpoint(
                functools.partial(self.relay, code.CONSUME_MESSAGE_DIRECTLY),
                decode=self._consume_directly,
            ),
            code.INVOKE_BROKER_TO_RESET_OFFSET: Endpoint(self.reset_offset, decode=_reset),
        }

    def _consume_directly(self, request: Command) -> ClientCall:
        ext = request.ext
        group = validate_group(required(request, "consumerGroup"))
        client_id = _client_id(request)
        msg_id = required(request, "msgId")
        host, physical = parse_offset_msg_id(msg_id)
        forwarded = {
            "consumerGroup": group,
            "clientId": client_id,
            "msgId": msg_id,
            "brokerName": self._broker.name,
        }
        if "topic" in ext:
            forwarded["topic"] = ext["topic"]
        return ClientCall(group, client_id, forwarded, (host, physical))

    def connection_of(self, group: str, client_id: str, what: str) -> Connection:
        """The remoting connection of ``client_id``, a live member of ``group``; a Refusal
        (SYSTEM_ERROR, RocketMQ's answer) saying why there is none."""
        if client_id not in self._broker.consumers.members(group):
            raise Refusal(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        connection = self._membership.connections.get(client_id)
        gone = client_id in self._membership.closed_clients
        if (connection is None and gone) or (connection is not None and connection.closed):
            raise Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online: its connection closed "
                "(it leaves the group in a moment)",
            )
        if connection is None:
            raise Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> is a member over rocketlite.v1 or "
                f"RocketMQ 5 (gRPC), which have no broker-to-client call: only a client "
                f"connected over RocketMQ's remoting protocol can be asked for {what}",
            )
        return connection

    async def relay(
        self, code: int, connection: Connection, request: Command, call: ClientCall
    ) -> Command:
        what = (
            "its running info"
            if code == RequestCode.GET_CONSUMER_RUNNING_INFO
            else "consuming a message"
        )
        client = self.connection_of(call.group, call.client_id, what)
        body = b""
        if call.message is not None:
            host, physical = call.message
            body = await self._workers.run(self._record, host, physical)
        forwarded = Command(code, dict(call.ext), body, version=OUR_VERSION)
        try:
            answer = await client.request(forwarded, CALL_CLIENT_TIMEOUT_S)
        except TimeoutError:
            raise Refusal(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{call.group}> <{call.client_id}> Timeout: no answer to {what} "
                f"within {CALL_CLIENT_TIMEOUT_S:.0f} s",
            ) from None
        except UnavailableError as exc:
            raise Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{call.group}> <{call.client_id}> Exception: {exc}",
            ) from None
        response = request.reply(answer.code, answer.remark)
        response.body = bytes(answer.body)
        return response

    def _record(self, host: str, physical: int) -> bytes:
        """The stored record the message id names (it must be this broker's)."""
        messaging = self._broker.messaging
        messaging.find_record(physical, host)  # NotFoundError: not a message of this broker
        return messaging.record_at(physical)

    async def reset_offset(self, connection: Connection, request: Command, reset: Reset) -> Command:
        broker = self._broker
        find = functools.partial(
            offsets_at_time,
            broker.messaging,
            reset.group,
            reset.topic,
            reset.timestamp_ms,
            force=reset.force,
        )
        found = await self._workers.run(find)
        members = broker.consumers.members(reset.group)
        if not members:
            raise Refusal(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {reset.group} Topic: "
                f"{reset.topic} Timestamp: {reset.timestamp_ms}",
            )
        commit = functools.partial(
            broker.messaging.commit_offsets, reset.group, reset.topic, found, increase_only=False
        )
        await self._workers.run(commit)
        told = self.tell_reset(reset.group, reset.topic, found, reset.timestamp_ms, reset.force)
        log.info(
            "reset the offsets of group %s on topic %s to time %d: %s; %d of %d members told "
            "over remoting",
            reset.group,
            reset.topic,
            reset.timestamp_ms,
            found,
            told,
            len(members),
        )
        response = request.reply()
        table = {MessageQueue(reset.topic, broker.name, q): offset for q, offset in found.items()}
        response.body = offset_table_body(table)
        return response

    def tell_reset(
        self, group: str, topic: str, offsets: Mapping[int, int], timestamp_ms: int, force: bool
    ) -> int:
        """Send the group's live remoting members RESET_CONSUMER_CLIENT_OFFSET with the
        offsets just committed (a C++ member the list its client reads), as RocketMQ's
        broker does, so running consumers move to them; how many were told (on the event
        loop). gRPC members read the committed offsets themselves."""
        table = {MessageQueue(topic, self._broker.name, q): o for q, o in offsets.items()}
        body, body_for_c = offset_table_body(table), offset_list_body(table)
        told = 0
        for client_id in self._broker.consumers.members(group):
            client = self._membership.connections.get(client_id)
            if client is None or client.closed:
                continue
            client.send(
                Command(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    {
                        "topic": topic,
                        "group": group,
                        "timestamp": str(timestamp_ms),
                        "isForce": "true" if force else "false",
                    },
                    body_for_c if client.language == "CPP" else body,
                    opaque=next_opaque(),
                    flag=FLAG_ONEWAY,
                    version=OUR_VERSION,
                )
            )
            told += 1
        return told


def offset_table_body(table: Mapping[MessageQueue, int]) -> bytes:
    """RocketMQ's ResetOffsetBody: ``{"offsetTable": {<MQ>: offset}}`` with the message
    queues as fastjson's object keys (what Java's clients and ``mqadmin`` parse)."""
    entries = ",".join(
        bodies.dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})
        + f":{offset}"
        for mq, offset in sorted(table.items())
    )
    return ('{"offsetTable":{' + entries + "}}").encode()


def offset_list_body(table: Mapping[MessageQueue, int]) -> bytes:
    """RocketMQ's ResetOffsetBodyForC, the form its C++ client reads: ``{"offsetTable":
    [{"brokerName", "offset", "queueId", "topic"}]}``."""
    rows = [
        {"brokerName": mq.broker_name, "offset": offset, "queueId": mq.queue_id, "topic": mq.topic}
        for mq, offset in sorted(table.items())
    ]
    return bodies.dumps({"offsetTable": rows}).encode()


def _client_id(request: Command) -> str:
    client_id = required(request, "clientId")
    if not client_id.strip():
        raise InvalidArgumentError("the header field clientId is empty; name a client of the group")
    return client_id


def _running_info(request: Command) -> ClientCall:
    group = validate_group(required(request, "consumerGroup"))
    client_id = _client_id(request)
    jstack = "true" if headers.flag(request.ext, "jstackEnable") else "false"
    ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": jstack}
    return ClientCall(group, client_id, ext)


def _reset(request: Command) -> Reset:
    topic = validate_topic(required(request, "topic"), allow_system=True)
    group = validate_group(required(request, "group"))
    timestamp = headers.whole(request.ext, "timestamp")
    if timestamp < NOW:
        raise InvalidArgumentError(
            f"the header field timestamp={timestamp} is not a time: give milliseconds since "
            "the epoch, or -1 for now"
        )
    return Reset(topic, group, timestamp, headers.flag(request.ext, "isForce"))
