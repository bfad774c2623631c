"""The name-server role: what a client given ``namesrvAddr`` asks before it talks to a broker.

This broker answers for itself: every route names one broker (this one) under key 0 of its
``brokerAddrs``, at the address of this port, so the client's next call comes back here.
Routes are built from (broker name, queue counts, perm) rows joined to addresses by broker
name, as RocketMQ's are, so a name server fronting several brokers is one more row each.

KV configs (``ORDER_TOPIC_CONFIG``, written by ``mqadmin updateTopic -o``) are kept in
memory, as a name server without a kvConfig file does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rmq_spark.auth.permissions import PUB_OR_SUB, Need
from rmq_spark.auth.remoting_rules import LOGIN, RemotingRule, topic_need
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.names import validate_topic
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.codes import PERM_INHERIT, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command

#: RocketMQ's default cluster name, and the topic producers fall back on for auto-creation
CLUSTER = "DefaultCluster"
AUTO_CREATE_TOPIC = "TBW102"


def required(request: Command, name: str) -> str:
    """A header field the request must carry (RocketMQ's @CFNotNull)."""
    value = request.ext.get(name)
    if value is None:
        raise Refusal(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


class NameServerRole:
    def __init__(self, broker: Broker, address: str) -> None:
        self._broker = broker
        self._address = address
        self._kv: dict[str, dict[str, str]] = {}
        self._kv_lock = threading.Lock()

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: Endpoint(
                self.route, RemotingRule(needs=_route_needs), decode=_topic
            ),
            RequestCode.GET_BROKER_CLUSTER_INFO: Endpoint(self.cluster, LOGIN),
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Endpoint(self.topic_list, LOGIN),
            RequestCode.GET_TOPICS_BY_CLUSTER: Endpoint(self.topic_list, LOGIN),
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: Endpoint(self.system_topics, LOGIN),
            RequestCode.DELETE_TOPIC_IN_NAMESRV: Endpoint(
                self.forget_topic,
                decode=lambda r: validate_topic(required(r, "topic"), allow_system=True),
            ),
            code.PUT_KV_CONFIG: Endpoint(self.put_kv, decode=_kv("namespace", "key", "value")),
            code.GET_KV_CONFIG: Endpoint(self.get_kv, decode=_kv("namespace", "key")),
            code.DELETE_KV_CONFIG: Endpoint(self.delete_kv, decode=_kv("namespace", "key")),
            code.GET_KVLIST_BY_NAMESPACE: Endpoint(self.kv_list, decode=_kv("namespace")),
        }

    async def route(self, connection: Connection, request: Command, topic: str) -> Command:
        row = self.queue_data(topic)
        if row is None:
            raise Refusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        response = request.reply()
        body = bodies.route_data(self._broker.name, self._address, CLUSTER, [row])
        response.body = body.encode()
        return response

    def queue_data(self, topic: str) -> tuple[str, int, int, int] | None:
        """(broker name, read queues, write queues, perm) of ``topic`` here, or None."""
        broker = self._broker
        config = broker.messaging.topics.find(topic)
        if config is not None:
            perm = config.perm & broker.config.broker_perm
            return broker.name, config.read_queue_nums, config.write_queue_nums, perm
        if topic in (AUTO_CREATE_TOPIC, CLUSTER) and broker.config.auto_create_topics:
            # RocketMQ's producers fall back on TBW102's route for a topic that does not
            # exist yet; the broker then creates it on the first send.
            queues = broker.config.default_topic_queues
            return broker.name, queues, queues, broker.config.broker_perm | PERM_INHERIT
        return None

    async def cluster(self, connection: Connection, request: Command, _: None) -> Command:
        response = request.reply()
        info = bodies.cluster_info(self._broker.name, self._address, CLUSTER)
        response.body = info.encode()
        return response

    async def topic_list(self, connection: Connection, request: Command, _: None) -> Command:
        topics = sorted(config.name for config in self._broker.messaging.topics.list())
        response = request.reply()
        response.body = bodies.dumps({"topicList": topics}).encode()
        return response

    async def system_topics(self, connection: Connection, request: Command, _: None) -> Command:
        response = request.reply()
        response.body = bodies.dumps({"topicList": [CLUSTER, self._broker.name]}).encode()
        return response

    async def forget_topic(self, connection: Connection, request: Command, topic: str) -> Command:
        # The broker role deleted the topic already (DELETE_TOPIC_IN_BROKER comes first);
        # routes are read from the topic table, so there is nothing more to forget.
        return request.reply()

    async def put_kv(
        self, connection: Connection, request: Command, kv: tuple[str, ...]
    ) -> Command:
        namespace, key, value = kv
        with self._kv_lock:
            self._kv.setdefault(namespace, {})[key] = value
        return request.reply()

    async def get_kv(
        self, connection: Connection, request: Command, kv: tuple[str, ...]
    ) -> Command:
        namespace, key = kv
        with self._kv_lock:
            value = self._kv.get(namespace, {}).get(key)
        if value is None:
            raise Refusal(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return request.reply(value=value)

    async def delete_kv(
        self, connection: Connection, request: Command, kv: tuple[str, ...]
    ) -> Command:
        namespace, key = kv
        with self._kv_lock:
            self._kv.get(namespace, {}).pop(key, None)
        return request.reply()

    async def kv_list(
        self, connection: Connection, request: Command, kv: tuple[str, ...]
    ) -> Command:
        (namespace,) = kv
        with self._kv_lock:
            table = dict(self._kv.get(namespace, {}))
        if not table:
            raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        response = request.reply()
        response.body = bodies.dumps({"table": table}).encode()
        return response


def _topic(request: Command) -> str:
    return required(request, "topic")


def _route_needs(topic: str) -> list[Need]:
    """A right on the topic; the auto-creation topic's route (a producer's fallback for a
    topic not made yet) only needs a login."""
    return [] if topic == AUTO_CREATE_TOPIC else topic_need(topic, PUB_OR_SUB)


def _kv(*names: str) -> Callable[[Command], tuple[str, ...]]:
    """Decodes the KV fields ``names``, each required."""
    return lambda request: tuple(required(request, name) for name in names)
