"""Group membership over remoting: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

Members go into the broker's one :class:`~rmq_spark.broker.membership.groups.ConsumerRegistry`
and queue locks into its one lock table, so a group's members are the same whichever
protocol each speaks, and so are its locks. A remoting member's connection stands for it as
RocketMQ's channel does: while the connection is open a watch of the group sends it
NOTIFY_CONSUMER_IDS_CHANGED (40) when it joins and at every change after. When the
connection closes without UNREGISTER_CLIENT and the client has no other connection
watching the group, the member leaves after the registry's reconnect grace: its queue locks
end first, then the others are told, so an orderly consumer that rebalances on the
notification locks the freed queues at its first try (RocketMQ's broker keeps them until
they expire).

CHECK_CLIENT_CONFIG (46) is served here too: Java's consumers ask it at start about each
SQL92 subscription, and fail to start on anything but SUCCESS. A heartbeat's subscriptions
are read by the broker core, on a worker (the newest per group and topic, a SQL92 text
compiled once, one that does not compile kept with why, as RocketMQ's heartbeats always
succeed), and go into the registry with the member: what a pull without its subscription
is filtered by is decided there from the live members (:mod:`.filters` answers it).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import random
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import cast

from rmq_spark.auth.permissions import SUB, Need
from rmq_spark.auth.remoting_rules import RemotingRule, group_need, topic_need
from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.delivery import retry
from rmq_spark.broker.membership.filters import Subscribed
from rmq_spark.broker.membership.groups import ConsumeFromWhere, ConsumeType, MessageModel
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.filters import refusal
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.properties import REAL_QID, UNIQ_KEY, decode_properties
from rmq_spark.codec.record import Record, encode_record, offset_msg_id
from rmq_spark.errors import InvalidArgumentError, RocketliteError, shown
from rmq_spark.filter import TAG
from rmq_spark.names import retry_topic, validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.codes import FLAG_ONEWAY, OUR_VERSION, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command

log = logging.getLogger("rmq_spark.broker.remoting")

_CONSUME_TYPES = {"CONSUME_PASSIVELY": "PUSH", "CONSUME_ACTIVELY": "PULL", "CONSUME_POP": "PULL"}
_FROM_WHERE = {
    "CONSUME_FROM_LAST_OFFSET": "LAST_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET": "FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP": "TIMESTAMP",
}
#: the producer group every RocketMQ client instance has (mqadmin's too): never transactional
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
#: the property naming the producer group of a transactional message
PRODUCER_GROUP = "PGROUP"
#: queue ids a lock request may name (RocketMQ's queue ids are ints)
MAX_QUEUES = 1 << 31
#: how many client ids of closed connections are remembered
CLOSED_REMEMBERED = 4096


@dataclass(frozen=True)
class ConsumerData:
    """One consumer group of a heartbeat, checked."""

    group: str
    subscriptions: list[Subscribed]
    message_model: MessageModel
    consume_type: ConsumeType
    from_where: ConsumeFromWhere


@dataclass(frozen=True)
class Heartbeat:
    client_id: str
    producer_groups: list[str]
    consumers: list[ConsumerData]


@dataclass(frozen=True)
class CheckClient:
    """CHECK_CLIENT_CONFIG: may this consumer group's subscription be served?"""

    group: str
    #: None when the request carries no subscription (nothing to check)
    subscription: Subscribed | None


@dataclass(frozen=True)
class Unregister:
    client_id: str
    group: str
    producer_group: str


@dataclass(frozen=True)
class LockBody:
    group: str
    client_id: str
    #: the queues of this broker it names (other brokers' are theirs to lock)
    queues: list[MessageQueue]


class Membership:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._opaques = itertools.count()
        #: live connections by client id (for consumer connection lists)
        self.connections: dict[str, Connection] = {}
        #: client ids whose remoting connection closed (the newest CLOSED_REMEMBERED), told
        #: from gRPC members by the calls relayed to a client while they still linger
        self.closed_clients: OrderedDict[str, None] = OrderedDict()
        broker.transaction_checks.add_asker(self.ask_about_transaction)

    def endpoints(self) -> dict[int, Endpoint]:
        lock = RemotingRule(needs=_lock_needs, client_ids=lambda body: [body.client_id])
        return {
            RequestCode.HEART_BEAT: Endpoint(
                self.heartbeat,
                RemotingRule(needs=_heartbeat_needs, client_ids=lambda hb: [hb.client_id]),
                decode=self.decode_heartbeat,
            ),
            RequestCode.UNREGISTER_CLIENT: Endpoint(
                self.unregister,
                RemotingRule(client_ids=lambda leave: [leave.client_id]),
                decode=_decode_unregister,
            ),
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: Endpoint(
                self.consumer_list,
                RemotingRule(needs=group_need),
                decode=lambda r: validate_group(r.ext.get("consumerGroup")),
            ),
            RequestCode.CHECK_CLIENT_CONFIG: Endpoint(
                self.check_client,
                RemotingRule(needs=_check_needs),
                decode=self.decode_check_client,
            ),
            RequestCode.LOCK_BATCH_MQ: Endpoint(self.lock, lock, decode=self.decode_lock),
            RequestCode.UNLOCK_BATCH_MQ: Endpoint(self.unlock, lock, decode=self.decode_lock),
        }

    def decode_heartbeat(self, request: Command) -> Heartbeat:
        data = bodies.json_object(request.body, "HeartbeatData")
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id.strip():
            raise InvalidArgumentError(f"the heartbeat's clientID {shown(client_id)} is empty")
        producers = [
            producer["groupName"]
            for producer in self._items(data, "producerDataSet")
            if isinstance(producer, dict) and isinstance(producer.get("groupName"), str)
        ]
        consumers = [self._consumer(item) for item in self._items(data, "consumerDataSet")]
        return Heartbeat(client_id, producers, consumers)

    async def heartbeat(self, connection: Connection, request: Command, hb: Heartbeat) -> Command:
        client_id = hb.client_id
        connection.client_id = client_id
        connection.language = request.language
        connection.version = request.version
        self.connections[client_id] = connection
        self.closed_clients.pop(client_id, None)
        connection.producer_groups.update(hb.producer_groups)
        if connection.producer_groups - {INNER_PRODUCER_GROUP}:
            # a producer that may have transactions to be asked about
            self._broker.transaction_checks.start(self._workers)
        if hb.consumers:
            await self._workers.run(self._join, client_id, hb.consumers)
        for consumer in hb.consumers:
            group = consumer.group
            if group not in connection.watches:
                watch = self._watch(connection, group, client_id)
                connection.watches[group] = connection.spawn(watch)
        return request.reply()

    def _items(self, data: dict, name: str) -> list:
        """The list ``name`` of a JSON body, no longer than --max-request-items allows."""
        items = _list(data, name)
        checks.at_most(
            len(items), name, self._broker.config.max_request_items, "--max-request-items"
        )
        return items

    def _consumer(self, item: object) -> ConsumerData:
        if not isinstance(item, dict):
            raise InvalidArgumentError(f"consumerDataSet holds {shown(item)}, not an object")
        group = validate_group(item.get("groupName"))
        model = item.get("messageModel", "CLUSTERING")
        if model not in ("CLUSTERING", "BROADCASTING"):
            raise InvalidArgumentError(
                f"messageModel {shown(model)} is not CLUSTERING or BROADCASTING"
            )
        consume_type = _CONSUME_TYPES[_enum(item, "consumeType", _CONSUME_TYPES)]
        from_where = _FROM_WHERE.get(_enum(item, "consumeFromWhere", _FROM_WHERE), "LAST_OFFSET")
        subscriptions = [self._subscribed(sub) for sub in self._items(item, "subscriptionDataSet")]
        return ConsumerData(
            group,
            subscriptions,
            cast(MessageModel, model),
            cast(ConsumeType, consume_type),
            cast(ConsumeFromWhere, from_where),
        )

    def _subscribed(self, sub: object) -> Subscribed:
        """One SubscriptionData of a heartbeat or a client check: topic, expression as sent,
        type and version (the broker core reads the expression, on a worker)."""
        if not isinstance(sub, dict):
            raise InvalidArgumentError(f"subscriptionDataSet holds {shown(sub)}")
        topic = validate_topic(sub.get("topic"), allow_system=True)
        kind = sub.get("expressionType") or TAG
        if not isinstance(kind, str):
            raise InvalidArgumentError(f"the expressionType of {topic!r} is {shown(kind)}")
        kind = kind.upper()
        text = sub.get("subString")
        if text is not None and not isinstance(text, str):
            raise InvalidArgumentError(f"the subString of {topic!r} is {shown(text)}, not text")
        version = sub.get("subVersion")
        if version is None:
            version = 0
        elif isinstance(version, str) and version.lstrip("-").isdigit():
            version = int(version)
        if not isinstance(version, int) or isinstance(version, bool) or abs(version) >= 1 << 63:
            raise InvalidArgumentError(
                f"the subVersion of {topic!r} is {shown(version)}, not a long"
            )
        return Subscribed(topic, text or "", kind, version)

    def _join(self, client_id: str, consumers: list[ConsumerData]) -> None:
        """Every group of the heartbeat read first (nothing joins when one subscription is
        refused), then joined."""
        registry = self._broker.consumers
        read = registry.read_subscriptions(
            client_id, [(c.group, c.subscriptions) for c in consumers], keep_errors=True
        )
        for c in consumers:
            registry.heartbeat(
                client_id, c.group, read[c.group], c.message_model, c.consume_type, c.from_where
            )
            group = c.group
            if c.message_model == "CLUSTERING":
                # RocketMQ creates the group's retry topic on its first heartbeat; mqadmin's
                # consumerProgress and consumerConnection start from its route.
                self._broker.messaging.topics.ensure_system_topic(
                    retry_topic(group), retry.RETRY_QUEUE_NUMS
                )

    async def _watch(self, connection: Connection, group: str, client_id: str) -> None:
        # The first event is the membership the member has just joined into: it is told
        # too, as RocketMQ's broker tells a new channel. A lite pull consumer does not
        # rebalance at start, so without it its first message waits for its 20 s timer.
        async for _ in self._broker.consumers.watch(group, client_id):
            connection.send(
                Command(
                    code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                    ext={"consumerGroup": group},
                    opaque=next(self._opaques) & 0x7FFFFFFF,
                    flag=FLAG_ONEWAY,
                    version=OUR_VERSION,
                )
            )

    def ask_about_transaction(self, transaction_id: str, record: Record, topic: str) -> bool:
        """Send CHECK_TRANSACTION_STATE about an orphaned transaction to a live connection of
        the producer group that began it (its PGROUP); the producer's checker answers with
        END_TRANSACTION. False when no producer of that group is connected here."""
        fields = decode_properties(record.properties)
        group = fields.get(PRODUCER_GROUP)
        producers = [
            c
            for c in list(self.connections.values())
            if group in c.producer_groups and not c.closed
        ]
        if not producers:
            return False
        real_queue = int(fields.get(REAL_QID, record.queue_id))
        real = dataclasses.replace(record, topic=topic, queue_id=real_queue)
        unique_key = fields.get(UNIQ_KEY, transaction_id)
        random.choice(producers).send(
            Command(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                ext={
                    "topic": topic,
                    "tranStateTableOffset": str(record.queue_offset),
                    "commitLogOffset": str(record.physical_offset),
                    "msgId": unique_key,
                    "transactionId": transaction_id,
                    "offsetMsgId": offset_msg_id(record.store_host, record.physical_offset),
                },
                body=encode_record(real),
                opaque=next(self._opaques) & 0x7FFFFFFF,
                flag=FLAG_ONEWAY,
                version=OUR_VERSION,
            )
        )
        return True

    def decode_check_client(self, request: Command) -> CheckClient:
        data = bodies.json_object(request.body, "CheckClientRequestBody")
        group = validate_group(data.get("group"))
        sub = data.get("subscriptionData")
        return CheckClient(group, None if sub is None else self._subscribed(sub))

    async def check_client(
        self, connection: Connection, request: Command, check: CheckClient
    ) -> Command:
        """CHECK_CLIENT_CONFIG: SUCCESS for a tag subscription or one this broker can
        compile; SYSTEM_ERROR (1) when it does not filter by that type, else
        SUBSCRIPTION_PARSE_FAILED (23) naming the column and why, as RocketMQ answers."""
        sub = check.subscription
        if sub is not None and sub.kind != TAG:
            read = functools.partial(self._broker.messaging.read_filter, sub.kind, sub.expression)
            try:
                await self._workers.run(read)
            except RocketliteError as exc:
                raise refusal(sub.kind, exc) from None
        return request.reply()

    async def unregister(
        self, connection: Connection, request: Command, leave: Unregister
    ) -> Command:
        client_id = leave.client_id or connection.client_id
        if leave.group:
            watch = connection.watches.pop(leave.group, None)
            if watch is not None:
                watch.cancel()
            self._broker.consumers.unregister(client_id, leave.group)
        if leave.producer_group:
            connection.producer_groups.discard(leave.producer_group)
        return request.reply()

    async def consumer_list(self, connection: Connection, request: Command, group: str) -> Command:
        members = self._broker.consumers.members(group)
        if not members:
            raise Refusal(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        response = request.reply()
        response.body = bodies.dumps({"consumerIdList": members}).encode()
        return response

    async def lock(self, connection: Connection, request: Command, body: LockBody) -> Command:
        lock = functools.partial(self._broker.locks.lock, body.group, body.client_id, body.queues)
        locked, _ = await self._workers.run(lock)
        response = request.reply()
        response.body = bodies.dumps({"lockOKMQSet": [_mq_json(mq) for mq in locked]}).encode()
        return response

    async def unlock(self, connection: Connection, request: Command, body: LockBody) -> Command:
        unlock = functools.partial(
            self._broker.locks.unlock, body.group, body.client_id, body.queues
        )
        await self._workers.run(unlock)
        return request.reply()

    def decode_lock(self, request: Command) -> LockBody:
        data = bodies.json_object(request.body, "LockBatchRequestBody")
        group = validate_group(data.get("consumerGroup"))
        client_id = data.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            raise InvalidArgumentError("the lock request names no clientId")
        queues = []
        for item in self._items(data, "mqSet"):
            queue_id = item.get("queueId") if isinstance(item, dict) else None
            if not isinstance(queue_id, int) or not 0 <= queue_id < MAX_QUEUES:
                raise InvalidArgumentError(f"mqSet holds {shown(item)}, not a message queue")
            if item.get("brokerName") not in (None, self._broker.name):
                continue  # another broker's queue: that broker locks it
            topic = validate_topic(item.get("topic"), allow_system=True)
            queues.append(MessageQueue(topic, self._broker.name, item["queueId"]))
        return LockBody(group, client_id, queues)

    def forget(self, connection: Connection) -> None:
        """The connection closed: its watches end with it (and its members leave)."""
        if connection.client_id and self.connections.get(connection.client_id) is connection:
            del self.connections[connection.client_id]
            self.closed_clients[connection.client_id] = None
            self.closed_clients.move_to_end(connection.client_id)
            if len(self.closed_clients) > CLOSED_REMEMBERED:
                self.closed_clients.popitem(last=False)


def _enum(data: dict, name: str, names: Collection[str]) -> str:
    """An enum field as Java writes it (by name); the first name when absent. Names this
    broker does not know (newer clients' consume-from choices) count as absent."""
    value = data.get(name)
    if value is None:
        return next(iter(names))
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} is {shown(value)}, not one of {', '.join(names)}")
    return value if value in names else next(iter(names))


def _list(data: dict, name: str) -> list:
    value = data.get(name) or []
    if not isinstance(value, list):
        raise InvalidArgumentError(f"{name} is {shown(value)}, not a list")
    return value


def _decode_unregister(request: Command) -> Unregister:
    ext = request.ext
    return Unregister(
        ext.get("clientID", ""), ext.get("consumerGroup", ""), ext.get("producerGroup", "")
    )


def _heartbeat_needs(hb: Heartbeat) -> list[Need]:
    """Sub on each consumer group it joins and on each topic they subscribe to (a retry
    topic is its group's)."""
    needs = []
    for consumer in hb.consumers:
        needs.extend(group_need(consumer.group))
        for sub in consumer.subscriptions:
            needs.extend(topic_need(sub.topic, SUB))
    return needs


def _check_needs(check: CheckClient) -> list[Need]:
    """Sub on the group and the topic whose subscription is checked."""
    topic = check.subscription.topic if check.subscription is not None else ""
    return [*group_need(check.group), *topic_need(topic, SUB)]


def _lock_needs(body: LockBody) -> list[Need]:
    needs = group_need(body.group)
    for topic in sorted({mq.topic for mq in body.queues}):
        needs.extend(topic_need(topic, SUB))
    return needs


def _mq_json(mq: MessageQueue) -> dict:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
