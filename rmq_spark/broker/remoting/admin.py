"""What ``mqadmin`` and the dashboard call on a broker: topics (17, 215, 351, 21), broker
runtime info (28), topic and consumer statistics (202, 208, 43, 201), the broker's rates
(315: ``statsAll``, the exporter), consumer connections (203), a topic's consumer groups
(300), a message by offset id (33) and messages by key or unique key (12).

Statistics keyed by message queue use fastjson's object keys (see
:func:`rmq_spark.wire.remoting.bodies.mq_keyed`): ``mqadmin`` reads them only in that form.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from rmq_spark.auth.permissions import PUB_OR_SUB, SUB, SUB_OR_GET, Need
from rmq_spark.auth.remoting_rules import RemotingRule, group_need, topic_need
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.groups_seen import consuming_groups, progress_topics
from rmq_spark.broker.core.key_query import MAX_KEY_MATCHES, KeyMatches
from rmq_spark.broker.core.messaging import MessagingCore, TopicConfig
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.consume import MAX_PULL_BYTES
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.membership import Membership
from rmq_spark.broker.remoting.namesrv import required
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.stats import RateHistory, Totals
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms
from rmq_spark.codec.record import decode_record
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.filter import TAG
from rmq_spark.names import check_manageable, validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.codes import OUR_VERSION, UNIQUE_KEY_QUERY, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from rmq_spark.wire.remoting.headers import INT32, whole

#: how ``clusterList`` shows this broker's version
VERSION_DESC = "V5_3_3"
#: the count a unique-key query asks for, whatever its maxNum (RocketMQ's
#: defaultQueryMaxNum); a key query asks for at most MAX_KEY_MATCHES
UNIQUE_KEY_MAX_NUM = 32


class Administration:
    def __init__(
        self, broker: Broker, workers: Workers, address: str, membership: Membership
    ) -> None:
        self._broker = broker
        self._workers = workers
        self._address = address
        self._membership = membership

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        on_topic = RemotingRule(needs=lambda topic: topic_need(topic, PUB_OR_SUB))
        reads_topic = RemotingRule(needs=lambda topic: topic_need(topic, SUB))
        finds_in_topic = RemotingRule(needs=lambda topic: topic_need(topic, SUB_OR_GET))
        of_group = RemotingRule(needs=group_need)
        group_name = _field("consumerGroup", validate_group)
        return {
            code.UPDATE_AND_CREATE_TOPIC: Endpoint(self.update_topic, decode=self.decode_topic),
            code.DELETE_TOPIC_IN_BROKER: Endpoint(
                self.delete_topic, decode=_field("topic", _deletable_topic)
            ),
            code.GET_TOPIC_CONFIG: Endpoint(self.topic_config, on_topic, decode=_field("topic")),
            code.GET_ALL_TOPIC_CONFIG: Endpoint(self.all_topic_configs),
            code.GET_BROKER_RUNTIME_INFO: Endpoint(self.runtime_info),
            code.VIEW_BROKER_STATS_DATA: Endpoint(
                self.stats_data,
                RemotingRule(needs=_stats_needs, super_only_if=_broker_wide),
                decode=_stats_item,
            ),
            code.GET_TOPIC_STATS_INFO: Endpoint(
                self.topic_stats, reads_topic, decode=_field("topic", _any_topic)
            ),
            code.GET_CONSUME_STATS: Endpoint(
                self.consume_stats,
                RemotingRule(needs=_consume_stats_needs),
                decode=_consume_stats,
            ),
            code.GET_CONSUMER_CONNECTION_LIST: Endpoint(
                self.consumer_connections, of_group, decode=group_name
            ),
            code.GET_ALL_CONSUMER_OFFSET: Endpoint(self.all_offsets),
            code.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: Endpoint(self.group_configs),
            code.VIEW_MESSAGE_BY_ID: Endpoint(
                self.view_message, decode=lambda r: whole(r.ext, "offset")
            ),
            code.QUERY_MESSAGE: Endpoint(
                self.query_message,
                RemotingRule(needs=lambda query: topic_need(query.topic, SUB_OR_GET)),
                decode=_key_query,
            ),
            code.QUERY_TOPIC_CONSUME_BY_WHO: Endpoint(
                self.topic_consumers, finds_in_topic, decode=_field("topic")
            ),
        }

    def decode_topic(self, request: Command) -> TopicUpdate:
        ext = request.ext
        topic = _user_topic(required(request, "topic"))
        read = whole(ext, "readQueueNums", self._broker.config.default_topic_queues, INT32)
        write = whole(ext, "writeQueueNums", read, INT32)
        perm = whole(ext, "perm", 6, INT32) & 6  # the inherit bit means nothing for a user topic
        return TopicUpdate(topic, read, write, perm)

    async def update_topic(
        self, connection: Connection, request: Command, update: TopicUpdate
    ) -> Command:
        topics = self._broker.messaging.topics
        topic, read, write = update.topic, update.read_queues, update.write_queues

        def create_or_update() -> None:
            if topics.find(topic) is None:
                topics.create(topic, read, read_queues=read, write_queues=write, perm=update.perm)
            else:
                topics.update(topic, read_queues=read, write_queues=write, perm=update.perm)

        await self._workers.run(create_or_update)
        return request.reply()

    async def delete_topic(self, connection: Connection, request: Command, topic: str) -> Command:
        def delete() -> None:
            try:
                self._broker.messaging.delete_topic(topic)
            except NotFoundError:
                pass  # RocketMQ answers success for a topic it does not have

        await self._workers.run(delete)
        return request.reply()

    async def topic_config(self, connection: Connection, request: Command, topic: str) -> Command:
        config = self._broker.messaging.topics.find(topic)
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        response = request.reply()
        response.body = bodies.dumps(_topic_config_json(config)).encode()
        return response

    async def all_topic_configs(self, connection: Connection, request: Command, _: None) -> Command:
        configs = self._broker.messaging.topics.list()
        response = request.reply()
        table = {config.name: _topic_config_json(config) for config in configs}
        body = {"dataVersion": _data_version(), "topicConfigTable": table}
        response.body = bodies.dumps(body).encode()
        return response

    async def runtime_info(self, connection: Connection, request: Command, _: None) -> Command:
        broker = self._broker
        stats = broker.messaging.stats()
        now = broker.stats.totals()
        # RocketMQ's "over the last 10 s, minute, 10 minutes"
        puts, gets = (
            " ".join(f"{broker.rates.window(s, now, out=out).tps:.1f}" for s in (10, 60, 600))
            for out in (False, True)
        )
        table = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": str(OUR_VERSION),
            "brokerActive": "true",
            "putTps": puts,
            "getTransferredTps": gets,
            "getTransferedTps": gets,  # the spelling of RocketMQ 4.x
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(broker.start_ms),
            "commitLogDiskRatio": f"{_disk_ratio(broker):.4f}",
            "msgPutTotalTodayNow": str(now.all_in()[0]),
            "msgGetTotalTodayNow": str(now.all_out()[0]),
            "commitLogMinOffset": str(stats.get("commitlog_min_offset", 0)),
            "commitLogMaxOffset": str(stats.get("commitlog_max_offset", 0)),
            "bootTimestamp": str(broker.start_ms),
            "runtime": _uptime(broker.start_ms),
        }
        response = request.reply()
        response.body = bodies.dumps({"table": table}).encode()
        return response

    async def stats_data(
        self, connection: Connection, request: Command, item: tuple[str, str]
    ) -> Command:
        broker = self._broker
        name, key = item
        found = stats_item(name, key, broker.rates, broker.stats.totals(), broker.config.cluster)
        if found is None:  # RocketMQ's answer for a name or key it keeps nothing under
            raise Refusal(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        response = request.reply()
        response.body = bodies.dumps(found).encode()
        return response

    async def topic_stats(self, connection: Connection, request: Command, topic: str) -> Command:
        store = self._broker.messaging
        config = store.topics.find(topic)
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")

        def stats() -> str:
            table = {}
            for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
                mq = MessageQueue(topic, self._broker.name, queue_id)
                table[mq] = {
                    "lastUpdateTimestamp": _last_store_time(store, topic, queue_id),
                    "maxOffset": store.max_offset(topic, queue_id),
                    "minOffset": store.min_offset(topic, queue_id),
                }
            minute = self._broker.rates.window(60, self._broker.stats.totals(), topic)
            return bodies.mq_keyed(table, topicPutTps=round(minute.tps, 2))

        response = request.reply()
        response.body = (await self._workers.run(stats)).encode()
        return response

    async def consume_stats(
        self, connection: Connection, request: Command, group_topic: tuple[str, str]
    ) -> Command:
        group, only = group_topic
        broker = self._broker
        store = broker.messaging

        def stats() -> str:
            topics = [only] if only else progress_topics(broker, group)
            table = {}
            for topic in topics:
                config = store.topics.find(topic)
                if config is None:
                    raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
                committed = store.offsets.query(group, topic)
                for queue_id in range(config.read_queue_nums):
                    consumer = max(committed.get(queue_id, 0), 0)
                    last = _store_time_at(store, topic, queue_id, consumer - 1)
                    table[MessageQueue(topic, broker.name, queue_id)] = {
                        "brokerOffset": store.max_offset(topic, queue_id),
                        "consumerOffset": consumer,
                        "lastTimestamp": last,
                        "pullOffset": consumer,
                    }
            now = broker.stats.totals()
            tps = sum(broker.rates.window(60, now, (group, topic)).tps for topic in topics)
            return bodies.mq_keyed(table, consumeTps=round(tps, 2))

        response = request.reply()
        response.body = (await self._workers.run(stats)).encode()
        return response

    async def consumer_connections(
        self, connection: Connection, request: Command, group: str
    ) -> Command:
        registry = self._broker.consumers
        members = registry.members(group)
        if not members:
            raise Refusal(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        connections, subscriptions = [], {}
        info = None
        for client_id in members:
            info = registry.consumer_info(group, client_id)
            peer = self._membership.connections.get(client_id)
            connections.append(
                {
                    "clientAddr": peer.peer if peer is not None else "",
                    "clientId": client_id,
                    "language": peer.language if peer is not None else "PYTHON",
                    "version": peer.version if peer is not None else OUR_VERSION,
                }
            )
            if info is None:
                continue
            for topic, expression in info.subscriptions:
                kind = info.expression_type(topic)
                read = info.topic_filters.get(topic)
                version = read.version if read is not None else 0
                subscriptions[topic] = _subscription_json(topic, expression, kind, version)
        body = {
            "connectionSet": connections,
            "consumeFromWhere": "CONSUME_FROM_"
            + (info.consume_from_where if info else "LAST_OFFSET"),
            "consumeType": "CONSUME_PASSIVELY"
            if info and info.consume_type == "PUSH"
            else "CONSUME_ACTIVELY",
            "messageModel": info.message_model if info else "CLUSTERING",
            "subscriptionTable": subscriptions,
        }
        response = request.reply()
        response.body = bodies.dumps(body).encode()
        return response

    async def all_offsets(self, connection: Connection, request: Command, _: None) -> Command:
        snapshot = self._broker.messaging.offsets.snapshot()
        table = {
            f"{topic}@{group}": {str(q): offset for q, offset in sorted(queues.items())}
            for (topic, group), queues in snapshot.items()
        }
        response = request.reply()
        response.body = bodies.dumps({"offsetTable": table}).encode()
        return response

    async def group_configs(self, connection: Connection, request: Command, _: None) -> Command:
        table = self._broker.subscription_groups.table()
        body = {"dataVersion": _data_version(), "subscriptionGroupTable": table}
        response = request.reply()
        response.body = bodies.dumps(body).encode()
        return response

    async def view_message(
        self, connection: Connection, request: Command, physical: int
    ) -> Command:
        if physical < 0:
            raise InvalidArgumentError(f"offset {physical} must be >= 0")

        def read() -> bytes:
            record = self._broker.messaging.read_record(physical)
            if decode_record(record, check_crc=False).physical_offset != physical:
                raise NotFoundError(f"no message starts at commit-log offset {physical}")
            return record

        try:
            data = await self._workers.run(read)
        except NotFoundError:
            raise Refusal(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {physical}"
            ) from None
        response = request.reply()
        response.body = data
        return response

    async def query_message(
        self, connection: Connection, request: Command, query: KeyQuery
    ) -> Command:
        """Messages by key (RocketMQ's QueryMessageProcessor): the records go oldest first,
        as RocketMQ sorts them by commit-log offset."""
        broker = self._broker
        found = KeyMatches([], more=False)
        if query.max_num > 0:  # the answer stops at a pull's size: it must fit RocketMQ's frame
            find = functools.partial(broker.messaging.find_by_key, max_bytes=MAX_PULL_BYTES)
            found = await self._workers.run(
                find, query.topic, query.key, query.max_num, query.begin, query.end
            )
        index = broker.messaging.index
        header = {
            "indexLastUpdateTimestamp": str(index.last_timestamp if index else 0),
            "indexLastUpdatePhyoffset": str(index.end_phy_offset if index else 0),
        }
        if not found.records:
            return request.reply(
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                **header,
            )
        response = request.reply(ResponseCode.SUCCESS, None, **header)
        response.body = b"".join(reversed(found.records))
        return response

    async def topic_consumers(
        self, connection: Connection, request: Command, topic: str
    ) -> Command:
        """The groups that consume a topic (``mqadmin queryMsgByUniqueKey`` and
        ``queryMsgById`` track a message through them; ``topicList -c`` lists them)."""
        groups = await self._workers.run(consuming_groups, self._broker, topic)
        response = request.reply()
        response.body = bodies.dumps({"groupList": groups}).encode()
        return response


@dataclass(frozen=True)
class TopicUpdate:
    topic: str
    read_queues: int
    write_queues: int
    perm: int


@dataclass(frozen=True)
class KeyQuery:
    topic: str
    key: str
    max_num: int
    begin: int
    end: int


def _field(name: str, check: Callable[[str], str] = str) -> Callable[[Command], str]:
    """Decodes the required header field ``name``, checked by ``check``."""
    return lambda request: check(required(request, name))


def _any_topic(name: str) -> str:
    return validate_topic(name, allow_system=True)


def _user_topic(name: str) -> str:
    """A topic a tool may create: a user's name (no reserved prefix), not the broker's."""
    return check_manageable(validate_topic(name))


def _deletable_topic(name: str) -> str:
    """A topic a tool may delete: a user's or a group's retry or dead-letter topic."""
    return check_manageable(validate_topic(name, allow_system=True))


def _consume_stats(request: Command) -> tuple[str, str]:
    """The group, and the one topic asked about ("" for every topic it consumes)."""
    group = validate_group(required(request, "consumerGroup"))
    topic = request.ext.get("topic") or ""
    return group, validate_topic(topic, allow_system=True) if topic else ""


def _consume_stats_needs(group_topic: tuple[str, str]) -> list[Need]:
    """Sub on the group, and on the topic when one is named: its queues' offsets are in
    the answer."""
    group, topic = group_topic
    return [*group_need(group), *topic_need(topic, SUB)]


def _key_query(request: Command) -> KeyQuery:
    """QUERY_MESSAGE's header: a unique-key query asks for ``defaultQueryMaxNum`` (32)
    whatever maxNum says, a key query for at most ``maxMsgsNumBatch`` (64). Every field is
    required, as Java's @CFNotNull are."""
    topic = required(request, "topic")
    key = required(request, "key")
    ext = request.ext
    for name in ("maxNum", "beginTimestamp", "endTimestamp"):
        required(request, name)
    if ext.get(UNIQUE_KEY_QUERY) == "true":  # Java compares with equals("true")
        max_num = UNIQUE_KEY_MAX_NUM
    else:
        max_num = min(whole(ext, "maxNum", bounds=INT32), MAX_KEY_MATCHES)
    if max_num < 0:
        raise InvalidArgumentError(f"maxNum {max_num} is negative; it must be >= 0")
    return KeyQuery(topic, key, max_num, whole(ext, "beginTimestamp"), whole(ext, "endTimestamp"))


def _topic_config_json(config: TopicConfig) -> dict:
    return {
        "order": False,
        "perm": config.perm,
        "readQueueNums": config.read_queue_nums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": config.name,
        "topicSysFlag": 0,
        "writeQueueNums": config.write_queue_nums,
    }


def _subscription_json(topic: str, expression: str, kind: str, version: int) -> dict:
    """A member's subscription as RocketMQ's SubscriptionData: a tag expression's tags and
    their hash codes, none for another type (a SQL92 selector), and its version."""
    from rmq_spark.codec.subscription import parse_subscription
    from rmq_spark.codec.taghash import tag_hash_code

    tags = sorted(parse_subscription(expression).tags or ()) if kind == TAG else []
    return {
        "classFilterMode": False,
        "codeSet": [tag_hash_code(tag) for tag in tags],
        "expressionType": kind,
        "subString": expression,
        "subVersion": version,
        "tagsSet": tags,
        "topic": topic,
    }


def _data_version() -> dict:
    return {"counter": 0, "timestamp": now_ms()}


def _store_time_at(store: MessagingCore, topic: str, queue_id: int, offset: int) -> int:
    """RocketMQ's statistics say 0 for a time they do not have."""
    return store.queue_store_timestamp(topic, queue_id, offset) or 0


def _last_store_time(store: MessagingCore, topic: str, queue_id: int) -> int:
    return _store_time_at(store, topic, queue_id, store.max_offset(topic, queue_id) - 1)


def _disk_ratio(broker: Broker) -> float:
    try:
        usage = os.statvfs(broker.messaging.store_config.store_dir)
    except OSError:
        return 0.0
    total = usage.f_blocks * usage.f_frsize
    return 0.0 if not total else 1 - usage.f_bavail * usage.f_frsize / total


def _uptime(start_ms: int) -> str:
    seconds = max(0, (now_ms() - start_ms) // 1000)
    days, hours = seconds // 86400, seconds // 3600 % 24
    return f"[ {days} days, {hours} hours, {seconds // 60 % 60} minutes, {seconds % 60} seconds ]"


# -- the broker's rates (VIEW_BROKER_STATS_DATA) --------------------------------------------

#: RocketMQ's stats names this broker keeps: (counted per "topic" / "topic@group" / the
#: cluster's name, messages or bytes)
STATS_NAMES = {
    "TOPIC_PUT_NUMS": ("topic", 0),
    "TOPIC_PUT_SIZE": ("topic", 1),
    "GROUP_GET_NUMS": ("topic@group", 0),
    "GROUP_GET_SIZE": ("topic@group", 1),
    "BROKER_PUT_NUMS": ("cluster", 0),
    "BROKER_GET_NUMS": ("cluster", 0),
}
#: BrokerStatsData's windows, in seconds
_WINDOWS = (("statsMinute", 60), ("statsHour", 3600), ("statsDay", 86400))


def stats_item(
    name: str, key: str, rates: RateHistory, now: Totals, cluster: str
) -> dict[str, dict[str, float]] | None:
    """RocketMQ's BrokerStatsData of stats ``name`` under ``key`` (sum and per-second rate
    over the last minute, hour and day; ``avgpt`` is not kept and is 0), or None when
    nothing is counted under them.

    >>> from rmq_spark.broker.stats import Totals
    >>> history = RateHistory()
    >>> history.take(Totals(0.0, {"t": (10, 1000)}, {}))
    >>> item = stats_item("TOPIC_PUT_NUMS", "t", history, Totals(60.0, {"t": (70, 7000)}, {}), "c")
    >>> item["statsMinute"]
    {'sum': 60, 'tps': 1.0, 'avgpt': 0.0}
    >>> stats_item("TOPIC_PUT_NUMS", "other", history, Totals(60.0, {}, {}), "c") is None
    True
    """
    kind = STATS_NAMES.get(name)
    if kind is None:
        return None
    keyed, column = kind
    if keyed == "topic":
        if key not in now.messages_in:
            return None
        picked: str | tuple[str, str] | None = key
        out = False
    elif keyed == "topic@group":
        topic, at, group = key.partition("@")
        if not at or (group, topic) not in now.messages_out:
            return None
        picked, out = (group, topic), True
    else:
        if key != cluster:
            return None
        picked, out = None, name == "BROKER_GET_NUMS"
    data = {}
    for field, seconds in _WINDOWS:
        window = rates.window(seconds, now, picked, out=out)
        total = window.size if column else window.messages
        tps = total / window.seconds if window.seconds > 0 else 0.0
        data[field] = {"sum": total, "tps": round(tps, 2), "avgpt": 0.0}
    return data


def _stats_item(request: Command) -> tuple[str, str]:
    return required(request, "statsName"), required(request, "statsKey")


def _broker_wide(item: tuple[str, str]) -> bool:
    """The broker's totals, and names it does not keep, are for super users."""
    return STATS_NAMES.get(item[0], ("cluster", 0))[0] == "cluster"


def _stats_needs(item: tuple[str, str]) -> list[Need]:
    """A topic's rates need a right on it; a group's on a topic, its topic and group too."""
    name, key = item
    keyed = STATS_NAMES.get(name, ("cluster", 0))[0]
    if keyed == "topic":
        return topic_need(key, PUB_OR_SUB)
    if keyed == "topic@group":
        topic, _, group = key.partition("@")
        return [*topic_need(topic, SUB), *group_need(group)]
    return []
