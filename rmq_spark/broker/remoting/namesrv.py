"""The name-server role: what a client given ``namesrvAddr`` asks before it talks to a broker.

The role keeps RocketMQ's route table (:mod:`.route_table`) of every broker registered with
it (REGISTER_BROKER every 30 s from rocketlite brokers started with ``--namesrv-addr`` and
from Apache RocketMQ brokers alike), with this port's own broker in it too: its topics are
read from its topic table whenever that changes, under its ``--name``, ``--broker-id`` and
``--cluster``, at the address of this port, and it never expires. A broker that has not
registered for 120 s, that unregistered, or whose connection closed leaves the routes.
Routes, cluster info and topic lists answer for all of them.

KV configs (``ORDER_TOPIC_CONFIG``, written by ``mqadmin updateTopic -o``) are kept in
memory, as a name server without a kvConfig file does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rmq_spark.auth.permissions import PUB_OR_SUB, Need
from rmq_spark.auth.remoting_rules import LOGIN, RemotingRule, topic_need
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.route_table import (
    Registration,
    RouteTable,
    TopicEntry,
    TopicRoute,
)
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.clock import now_ms
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import validate_topic
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.codes import PERM_INHERIT, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from rmq_spark.wire.remoting.headers import INT64, flag, whole

log = logging.getLogger("rmq_spark.broker.remoting")

#: the topic producers fall back on for auto-creation
AUTO_CREATE_TOPIC = "TBW102"
#: RocketMQ's KV namespace of ordered topics' queue layouts, sent back to registering brokers
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: MQVersion.Version.V3_0_11: brokers from this version on register a RegisterBrokerBody
V3_0_11 = 39


def required(request: Command, name: str) -> str:
    """A header field the request must carry (RocketMQ's @CFNotNull)."""
    value = request.ext.get(name)
    if value is None:
        raise Refusal(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


def published_topics(broker: Broker) -> tuple[TopicEntry, ...]:
    """The topics ``broker`` registers with name servers: its topic table, each topic's
    perm narrowed by the broker's, plus, when it creates topics on first send, the
    auto-creation topic and its cluster's topic (RocketMQ's producers fall back on their
    route for a topic that does not exist yet)."""
    config = broker.config
    rows = [
        TopicEntry(t.name, t.read_queue_nums, t.write_queue_nums, t.perm & config.broker_perm)
        for t in broker.messaging.topics.list()
    ]
    if config.auto_create_topics:
        held = {row.topic for row in rows}
        queues = config.default_topic_queues
        for name in (AUTO_CREATE_TOPIC, config.cluster):
            if name not in held:
                rows.append(TopicEntry(name, queues, queues, config.broker_perm | PERM_INHERIT))
    return tuple(rows)


def route_settings(config: BrokerConfig) -> tuple[int, bool, int]:
    """The settings :func:`published_topics` depends on besides the topic table (a running
    broker may change them)."""
    return config.broker_perm, config.auto_create_topics, config.default_topic_queues


class NameServerRole:
    def __init__(self, broker: Broker, address: str) -> None:
        self._broker = broker
        self._address = address
        self._kv: dict[str, dict[str, str]] = {}
        self._kv_lock = threading.Lock()
        #: used on the event loop only (every endpoint here is served there)
        self._table = RouteTable()
        self._local_version: int | None = None
        self._local_settings: tuple[int, bool, int] | None = None
        self._settings_changes = 0
        self._sync_local(now_ms())

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: Endpoint(
                self.route, RemotingRule(needs=_route_needs), decode=_topic
            ),
            RequestCode.GET_BROKER_CLUSTER_INFO: Endpoint(self.cluster, LOGIN),
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Endpoint(self.topic_list, LOGIN),
            RequestCode.GET_TOPICS_BY_CLUSTER: Endpoint(
                self.cluster_topics, LOGIN, decode=lambda r: required(r, "cluster")
            ),
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: Endpoint(self.system_topics, LOGIN),
            RequestCode.DELETE_TOPIC_IN_NAMESRV: Endpoint(self.forget_topic, decode=_deleted),
            code.REGISTER_BROKER: Endpoint(self.register, decode=_registration),
            code.UNREGISTER_BROKER: Endpoint(self.unregister, decode=_leaving),
            code.PUT_KV_CONFIG: Endpoint(self.put_kv, decode=_kv("namespace", "key", "value")),
            code.GET_KV_CONFIG: Endpoint(self.get_kv, decode=_kv("namespace", "key")),
            code.DELETE_KV_CONFIG: Endpoint(self.delete_kv, decode=_kv("namespace", "key")),
            code.GET_KVLIST_BY_NAMESPACE: Endpoint(self.kv_list, decode=_kv("namespace")),
        }

    # -- the table ------------------------------------------------------------------------------

    def table(self) -> RouteTable:
        """The route table as of now: this broker's topics current, silent brokers gone."""
        now = now_ms()
        self._sync_local(now)
        for address in self._table.expire(now):
            log.warning(
                "broker at %s left the routes: no registration for %d s",
                address,
                self._table.expiry_ms // 1000,
            )
        return self._table

    def _sync_local(self, now: int) -> None:
        """This port's own broker in the table, registered again when its topics changed,
        or a setting its routes depend on (the broker's permission, auto-creation and its
        queue count, changed while running by updateBrokerConfig): a change of those moves
        the data version too."""
        config = self._broker.config
        settings = route_settings(config)
        if settings != self._local_settings:
            self._local_settings = settings
            self._settings_changes += 1
        version = self._broker.messaging.topics.version + self._settings_changes
        if version == self._local_version:
            return
        registration = Registration(
            config.cluster,
            config.name,
            config.broker_id,
            self._address,
            self._address,
            (self._broker.start_ms, version),
            published_topics(self._broker),
        )
        self._table.register(registration, now, pinned=True)
        self._local_version = version

    def connection_closed(self, connection: Connection) -> None:
        """A broker that registered on ``connection`` leaves, as RocketMQ's name server
        drops a broker whose channel closed."""
        for address in self._table.channel_closed(connection):
            log.info("broker at %s left the routes: its connection closed", address)

    # -- endpoints ------------------------------------------------------------------------------

    async def route(self, connection: Connection, request: Command, topic: str) -> Command:
        route = self.table().route(topic)
        if route is None:
            raise Refusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        response = request.reply()
        response.body = _route_body(route).encode()
        return response

    async def cluster(self, connection: Connection, request: Command, _: None) -> Command:
        response = request.reply()
        brokers = self.table().brokers()
        info = bodies.cluster_table((b.cluster, b.broker_name, b.addresses) for b in brokers)
        response.body = info.encode()
        return response

    async def topic_list(self, connection: Connection, request: Command, _: None) -> Command:
        return _topic_list(request, self._listed(self.table().topics()))

    async def cluster_topics(
        self, connection: Connection, request: Command, cluster: str
    ) -> Command:
        return _topic_list(request, self._listed(self.table().topics_of_cluster(cluster)))

    def _listed(self, topics: list[str]) -> list[str]:
        """``topics`` without the auto-creation routes only this broker publishes and its
        topic table does not hold (no broker stores messages in them)."""
        held = self._broker.messaging.topics
        name = self._broker.name
        return [
            topic
            for topic in topics
            if topic not in (AUTO_CREATE_TOPIC, self._broker.config.cluster)
            or held.find(topic) is not None
            or any(q.broker_name != name for q in self._route_queues(topic))
        ]

    def _route_queues(self, topic: str) -> tuple:
        route = self._table.route(topic)
        return () if route is None else route.queues

    async def system_topics(self, connection: Connection, request: Command, _: None) -> Command:
        return _topic_list(request, self.table().system_topics())

    async def forget_topic(
        self, connection: Connection, request: Command, deleted: tuple[str, str | None]
    ) -> Command:
        # mqadmin deleteTopic deletes it on every broker first (DELETE_TOPIC_IN_BROKER);
        # this broker's own routes follow its topic table, registered brokers' follow this
        topic, cluster = deleted
        self.table().delete_topic(topic, cluster)
        return request.reply()

    async def register(
        self, connection: Connection, request: Command, registration: Registration
    ) -> Command:
        table = self.table()
        known = registration.address in table.live_addresses()
        try:
            registered = table.register(registration, now_ms(), channel=connection)
        except InvalidArgumentError as exc:
            raise Refusal(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        if registered.replaced is not None:
            log.warning(
                "broker %s id %d moved from %s to %s, which registered it too: are two "
                "brokers started with the same --name and --broker-id?",
                registration.broker_name,
                registration.broker_id,
                registered.replaced,
                registration.address,
            )
        elif not known:
            log.info(
                "broker %s (id %d, cluster %s) at %s registered",
                registration.broker_name,
                registration.broker_id,
                registration.cluster,
                registration.address,
            )
        extra = {}
        if registered.master_address is not None:
            extra["masterAddr"] = registered.master_address
        if registered.ha_address:
            extra["haServerAddr"] = registered.ha_address
        response = request.reply(0, None, **extra)
        with self._kv_lock:
            orders = dict(self._kv.get(ORDER_TOPIC_CONFIG, {}))
        if orders:
            response.body = bodies.dumps({"table": orders}).encode()
        return response

    async def unregister(
        self, connection: Connection, request: Command, leaving: tuple[str, str, int, str]
    ) -> Command:
        cluster, name, broker_id, address = leaving
        if self.table().unregister(cluster, name, broker_id, address):
            log.info("broker %s (id %d) at %s unregistered", name, broker_id, address)
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


def _route_body(route: TopicRoute) -> str:
    return bodies.topic_route(
        ((q.broker_name, q.read_queues, q.write_queues, q.perm, q.sys_flag) for q in route.queues),
        ((b.cluster, b.broker_name, b.addresses) for b in route.brokers),
    )


def _topic_list(request: Command, topics: list[str]) -> Command:
    response = request.reply()
    response.body = bodies.dumps({"topicList": topics}).encode()
    return response


def _topic(request: Command) -> str:
    return required(request, "topic")


def _deleted(request: Command) -> tuple[str, str | None]:
    topic = validate_topic(required(request, "topic"), allow_system=True)
    return topic, request.ext.get("clusterName") or None


def _broker_id(request: Command) -> int:
    required(request, "brokerId")
    broker_id = whole(request.ext, "brokerId", bounds=INT64)
    if broker_id < 0:
        raise InvalidArgumentError(f"the header field brokerId={broker_id} is negative")
    return broker_id


def _registration(request: Command) -> Registration:
    """A REGISTER_BROKER request: its header (every field RocketMQ requires) and body (the
    broker's topics, checked against bodyCrc32 when that is not 0)."""
    name, address, cluster, ha_address = (
        required(request, field)
        for field in ("brokerName", "brokerAddr", "clusterName", "haServerAddr")
    )
    broker_id = _broker_id(request)
    crc = whole(request.ext, "bodyCrc32", 0)
    body = bytes(request.body)
    if crc != 0 and bodies.body_crc32(body) != crc:
        raise Refusal(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    if not body:
        return Registration(cluster, name, broker_id, address, ha_address)
    topics = bodies.read_register_broker_body(
        body, compressed=flag(request.ext, "compressed"), wrapped=request.version >= V3_0_11
    )
    entries = tuple(
        TopicEntry(t.topic, t.read_queues, t.write_queues, t.perm, t.sys_flag)
        for t in topics.topics
    )
    version = (topics.timestamp_ms, topics.counter)
    return Registration(cluster, name, broker_id, address, ha_address, version, entries)


def _leaving(request: Command) -> tuple[str, str, int, str]:
    """An UNREGISTER_BROKER request: (cluster, broker name, broker id, address)."""
    cluster, name, address = (
        required(request, field) for field in ("clusterName", "brokerName", "brokerAddr")
    )
    return cluster, name, _broker_id(request), address


def _route_needs(topic: str) -> list[Need]:
    """A right on the topic; the auto-creation topic's route (a producer's fallback for a
    topic not made yet) only needs a login."""
    return [] if topic == AUTO_CREATE_TOPIC else topic_need(topic, PUB_OR_SUB)


def _kv(*names: str) -> Callable[[Command], tuple[str, ...]]:
    """Decodes the KV fields ``names``, each required."""
    return lambda request: tuple(required(request, name) for name in names)
