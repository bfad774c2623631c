"""A client of RocketMQ clusters over the remoting protocol: routes from a name server, then
pulls, offsets and sends at the brokers the routes name.

It reads an Apache RocketMQ 4.9+/5.x cluster (``namesrvAddr``) or a rocketlite broker's
remoting port alike. Queues are ``MessageQueue(topic, brokerName, queueId)`` as everywhere
in rocketlite; a broker's address comes only from the route (its master, id 0).

>>> client = RemotingClient("127.0.0.1:9876")                              # doctest: +SKIP
>>> queues = client.route("orders").readable                               # doctest: +SKIP
>>> answer = client.pull(queues[0], 0, max_messages=32)                    # doctest: +SKIP
>>> decode_records(answer.data)                                            # doctest: +SKIP
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client.connection import ClientConfig
from rmq_spark.client.message import new_unique_keys
from rmq_spark.client.remoting.transport import RemotingConnection, RemotingError, raise_for
from rmq_spark.clock import now_ms
from rmq_spark.codec import fastjson
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import UNIQ_KEY, encode_properties
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    RocketliteError,
    UnavailableError,
)
from rmq_spark.names import validate_key_query
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.remoting.codes import (
    PERM_READ,
    PERM_WRITE,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    UNIQUE_KEY_QUERY,
    RequestCode,
    ResponseCode,
)
from rmq_spark.wire.remoting.frame import Buffer, Command
from rmq_spark.wire.remoting.headers import decode_sizes, encode_batch

#: the consumer group a pull names when the caller has none (brokers require one)
DEFAULT_GROUP = "rocketlite-reader"
DEFAULT_PRODUCER_GROUP = "rocketlite-producer"
#: "no upper bound" of a store-time range (Java's Long.MAX_VALUE)
JAVA_LONG_MAX = 2**63 - 1
#: how far a search by time is corrected (RocketMQ 4.x answers the nearest offset)
MAX_SEARCH_STEPS = 4
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True)
class Route:
    """A topic's queues and the address of each broker that holds some of them."""

    topic: str
    addresses: dict[str, str]
    readable: list[MessageQueue]
    writable: list[MessageQueue]


@dataclass(frozen=True)
class SendAnswer:
    queue: MessageQueue
    #: queue offset of the first message (the others follow it)
    queue_offset: int
    #: each message's UNIQ_KEY (the id consumers see) and offset message id
    msg_ids: list[str]
    offset_msg_ids: list[str]


@dataclass(frozen=True)
class PullAnswer:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: the stored records back to back, as the broker's commit log holds them
    data: Buffer
    #: each record's size when the broker sends them (rocketlite does), else None
    sizes: np.ndarray | None = None

    def records(self, columns: Sequence[str] | None = None) -> pa.RecordBatch:
        """The records decoded into Arrow (:data:`~rmq_spark.codec.arrow_decode.RECORD_SCHEMA`,
        or its ``columns`` only)."""
        if not self.data:
            return decode_records(b"", columns=columns)
        return decode_records(self.data, sizes=self.sizes, columns=columns)


def parse_route(topic: str, body: bytes | bytearray | memoryview) -> Route:
    """A TopicRouteData body (standard JSON or fastjson's) as a :class:`Route`."""
    data = fastjson.loads(body)
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"the route of {topic!r} is not a JSON object")
    addresses = {}
    for broker in data.get("brokerDatas") or []:
        addrs = broker.get("brokerAddrs") or {}
        master = addrs.get(0, addrs.get("0"))
        if master:
            addresses[broker["brokerName"]] = master
    readable, writable = [], []
    for queue_data in data.get("queueDatas") or []:
        name = queue_data["brokerName"]
        if name not in addresses:
            continue  # no master: RocketMQ's clients skip such a broker too
        perm = int(queue_data.get("perm", 6))
        if perm & PERM_READ:
            readable += [MessageQueue(topic, name, i) for i in range(queue_data["readQueueNums"])]
        if perm & PERM_WRITE:
            writable += [MessageQueue(topic, name, i) for i in range(queue_data["writeQueueNums"])]
    return Route(topic, addresses, sorted(readable), sorted(writable))


class RemotingClient:
    def __init__(self, name_server: str, config: ClientConfig | None = None) -> None:
        servers = [part.strip() for part in name_server.replace(",", ";").split(";")]
        self.name_servers = [s for s in servers if s]
        if not self.name_servers:
            raise InvalidArgumentError(
                f"name server {name_server!r} names no address; use host:9876 (several "
                "separated by ';')"
            )
        self.config = config or ClientConfig()
        self._lock = threading.Lock()
        self._connections: dict[str, RemotingConnection] = {}
        self._brokers: dict[str, str] = {}  # broker name -> address, learnt from routes
        self._tls = tls_context(self.config)

    # -- name server ------------------------------------------------------------------------

    def route(self, topic: str) -> Route:
        """The topic's route from the first name server that answers."""
        request = Command(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
        )
        answer = self._ask_name_server(request, f"route of topic {topic!r}")
        route = parse_route(topic, answer.body)
        with self._lock:
            self._brokers.update(route.addresses)
        return route

    def topics(self) -> list[str]:
        """Every topic the name server knows (system topics included), sorted."""
        request = Command(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        answer = self._ask_name_server(request, "topic list")
        data = fastjson.loads(answer.body)
        return sorted(data.get("topicList") or []) if isinstance(data, dict) else []

    def _ask_name_server(self, request: Command, what: str) -> Command:
        errors = []
        for address in self.name_servers:
            try:
                answer = self._call(address, request, what)
            except RocketliteError as exc:
                if not exc.retriable:
                    raise
                errors.append(str(exc))
                continue
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                raise NotFoundError(
                    f"{what}: the name server {address} knows no such topic ({answer.remark})"
                )
            raise_for(answer, f"{what} from name server {address}")
            return answer
        raise UnavailableError(f"no name server answered for the {what}: {'; '.join(errors)}")

    # -- broker calls -----------------------------------------------------------------------

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        *,
        max_messages: int = 32,
        max_bytes: int | None = None,
        group: str | None = None,
        expression: str = "*",
        suspend_ms: int = 0,
    ) -> PullAnswer:
        """Records of ``mq`` from ``offset`` (tag ``expression`` filtered by the broker), at
        most ``max_messages`` and about ``max_bytes`` (the broker's cap when None); with
        ``suspend_ms`` the broker holds an empty pull that long for new messages."""
        sys_flag = PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms > 0 else 0)
        request = Command(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": group or DEFAULT_GROUP,
                "topic": mq.topic,
                "queueId": str(mq.queue_id),
                "queueOffset": str(offset),
                "maxMsgNums": str(max_messages),
                "sysFlag": str(sys_flag),
                "commitOffset": "0",
                "suspendTimeoutMillis": str(suspend_ms),
                "subscription": expression,
                "subVersion": str(now_ms()),
                "expressionType": "TAG",
                # a rocketlite broker answers with the records' sizes; others ignore it
                "rocketliteSizes": "true",
                **({"maxMsgBytes": str(max_bytes)} if max_bytes else {}),
            },
        )
        answer = self._broker_call(mq, request, f"pull of {mq}", extra_s=suspend_ms / 1000)
        status = _PULL_STATUS.get(answer.code)  # type: ignore[call-overload]
        if status is None:
            raise_for(answer, f"pull of {mq}")
            raise RemotingError(answer.code, f"pull of {mq}: unexpected answer {answer.code}")
        ext = answer.ext
        found = status == PullStatus.FOUND
        sizes = ext.get("rocketliteSizes") if found else None
        return PullAnswer(
            status,
            int(ext.get("nextBeginOffset", offset)),
            int(ext.get("minOffset", 0)),
            int(ext.get("maxOffset", 0)),
            answer.body if found else b"",
            None if sizes is None else decode_sizes(sizes),
        )

    def send(
        self,
        mq: MessageQueue,
        bodies: list[bytes],
        properties: list[dict[str, str]] | None = None,
        *,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        sys_flag: int = 0,
    ) -> SendAnswer:
        """Store ``bodies`` (with their properties: TAGS, KEYS, your own) in ``mq``, in order,
        as one request (a batch when there are several). Each message gets a UNIQ_KEY.
        ``sys_flag`` is RocketMQ's (0x301: the body is zlib-compressed)."""
        if not bodies:
            raise InvalidArgumentError("bodies is empty; send at least one message")
        fields = [dict(p) for p in properties] if properties else [{} for _ in bodies]
        if len(fields) != len(bodies):
            raise InvalidArgumentError(f"{len(fields)} property maps for {len(bodies)} bodies")
        keys = new_unique_keys(len(bodies))
        for item, key in zip(fields, keys, strict=True):
            item.setdefault(UNIQ_KEY, key)
        encoded = [encode_properties(item) for item in fields]
        header = {
            "a": producer_group,
            "b": mq.topic,
            "c": "TBW102",  # the broker's template when it creates the topic on this send
            "d": "4",
            "e": str(mq.queue_id),
            "f": str(sys_flag),
            "g": str(now_ms()),
            "h": "0",
            "j": "0",
            "k": "false",
        }
        if len(bodies) == 1:
            request = Command(RequestCode.SEND_MESSAGE_V2, {**header, "i": encoded[0].decode()})
            request.body = bodies[0]
        else:
            request = Command(RequestCode.SEND_BATCH_MESSAGE, {**header, "m": "true"})
            request.body = encode_batch([0] * len(bodies), bodies, encoded)
        answer = self._broker_call(mq, request, f"send to {mq}")
        raise_for(answer, f"send to {mq}")
        return SendAnswer(
            mq,
            int(answer.ext["queueOffset"]),
            [item[UNIQ_KEY] for item in fields],
            answer.ext.get("msgId", "").split(","),
        )

    def query_messages(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = 64,
        begin_ms: int | None = None,
        end_ms: int | None = None,
    ) -> list[tuple[pa.RecordBatch, str]]:
        """The messages of ``topic`` stored under ``key`` (one of their KEYS, or their
        UNIQ_KEY), asked of every broker of the topic's route with QUERY_MESSAGE, as
        ``mqadmin queryMsgByKey`` asks: per broker that holds some, in broker-name order,
        the messages decoded (newest first; a broker answers at most ``max_count``, and
        RocketMQ's at most 64) and the broker's name. ``begin_ms`` / ``end_ms`` bound the
        store time (epoch ms, inclusive). Records of other keys with the same index hash,
        which RocketMQ's brokers answer too, are dropped here as its client drops them."""
        validate_key_query(topic, key, max_count, begin_ms, end_ms)
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_count),
            "beginTimestamp": str(begin_ms or 0),
            "endTimestamp": str(JAVA_LONG_MAX if end_ms is None else end_ms),
            UNIQUE_KEY_QUERY: "false",  # KEYS and UNIQ_KEY share the index: both are found
        }
        what = f"look-up of key {key!r} in topic {topic!r}"
        found = []
        for name, address in sorted(self.route(topic).addresses.items()):
            answer = self._call(address, Command(RequestCode.QUERY_MESSAGE, ext), what)
            if answer.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            raise_for(answer, f"{what} on broker {name!r}")
            batch = rows_with_key(decode_records(answer.body), topic, key) if answer.body else None
            if batch is not None and batch.num_rows:
                found.append((batch, name))
        return found

    def min_offset(self, mq: MessageQueue) -> int:
        return self._offset(RequestCode.GET_MIN_OFFSET, mq, "min offset")

    def max_offset(self, mq: MessageQueue) -> int:
        """The next offset to be written (exclusive end)."""
        return self._offset(RequestCode.GET_MAX_OFFSET, mq, "max offset")

    def offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (max offset if none).

        RocketMQ 5 and rocketlite answer exactly that. RocketMQ 4.x answers the offset whose
        store time is *nearest* (the last one when every message is older), so the answer is
        checked against the store times around it and moved by the one step it may be off.
        """
        code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        found = self._offset(code, mq, "offset by time", timestamp=str(timestamp_ms))
        for _ in range(MAX_SEARCH_STEPS):
            here = self._store_time(mq, found)
            if here is not None and here < timestamp_ms:
                found += 1  # older than the time: the answer is after it
                continue
            before = self._store_time(mq, found - 1) if found > 0 else None
            if before is not None and before >= timestamp_ms:
                found -= 1  # the one before is not older: the answer is before
                continue
            break
        return found

    def _store_time(self, mq: MessageQueue, offset: int) -> int | None:
        """The store time of the message at ``offset``, or None when there is none."""
        answer = self.pull(mq, offset, max_messages=1)
        if answer.status != PullStatus.FOUND:
            return None
        records = answer.records()
        if not records.num_rows or records.column("queueOffset")[0].as_py() != offset:
            return None
        return records.column("storeTimestamp")[0].as_py()

    def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq``, or None when it has none (a RocketMQ 4.x
        broker answers 0 instead while the queue's first message is still stored)."""
        request = Command(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": str(mq.queue_id),
                "setZeroIfNotFound": "false",
            },
        )
        answer = self._broker_call(mq, request, f"offset of {group} on {mq}")
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        raise_for(answer, f"offset of group {group!r} on {mq}")
        return int(answer.ext["offset"])

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as ``group``'s next offset of ``mq`` (what mqadmin shows)."""
        request = Command(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": str(mq.queue_id),
                "commitOffset": str(offset),
            },
        )
        raise_for(self._broker_call(mq, request, "offset commit"), f"commit of {group} on {mq}")

    def _offset(self, code: int, mq: MessageQueue, what: str, **ext: str) -> int:
        request = Command(code, {"topic": mq.topic, "queueId": str(mq.queue_id), **ext})
        answer = self._broker_call(mq, request, f"{what} of {mq}")
        raise_for(answer, f"{what} of {mq}")
        return int(answer.ext["offset"])

    def _broker_call(
        self, mq: MessageQueue, request: Command, what: str, extra_s: float = 0.0
    ) -> Command:
        address = self.address_of(mq)
        return self._call(address, request, what, extra_s)

    def broker_address(self, broker_name: str) -> str | None:
        """The address of a broker some route named, or None."""
        with self._lock:
            return self._brokers.get(broker_name)

    def learn_broker(self, broker_name: str, address: str) -> None:
        """Use ``address`` for ``broker_name`` without asking a name server (a Spark task
        gets the addresses the driver's routes gave)."""
        with self._lock:
            self._brokers[broker_name] = address

    def address_of(self, mq: MessageQueue) -> str:
        with self._lock:
            address = self._brokers.get(mq.broker_name)
        if address is None:
            address = self.route(mq.topic).addresses.get(mq.broker_name)
        if address is None:
            raise NotFoundError(
                f"no route names broker {mq.broker_name!r} for topic {mq.topic!r}; is it "
                "registered with the name server?"
            )
        return address

    # -- connections --------------------------------------------------------------------------

    def _call(self, address: str, request: Command, what: str, extra_s: float = 0.0) -> Command:
        timeout_s = self.config.request_timeout_s + extra_s
        delays = self.config.retry.delays_s()
        while True:
            try:
                return self._connection(address).call(self._signed(request), timeout_s)
            except RocketliteError as exc:
                if not exc.retriable:
                    raise
                delay = next(delays, None)
                if delay is None:
                    raise UnavailableError(f"{what}: {exc}") from None
                time.sleep(delay)

    def _signed(self, request: Command) -> Command:
        """A fresh command for each attempt (the connection stamps its own opaque), signed
        with the client's access key when it has one (RocketMQ's ACL client hook)."""
        ext = dict(request.ext)
        access_key, secret_key = self.config.access_key, self.config.secret_key
        if access_key and secret_key:
            ext = sign_request(ext, request.body, access_key, secret_key)
        return Command(request.code, ext, request.body)

    def _connection(self, address: str) -> RemotingConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is None:
                connection = RemotingConnection(address, tls=self._tls)
                self._connections[address] = connection
            return connection

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rows_with_key(batch: pa.RecordBatch, topic: str, key: str) -> pa.RecordBatch:
    """The rows of ``topic`` that carry ``key`` (a KEYS word or the UNIQ_KEY), newest
    first: a broker's index names every record whose ``topic#key`` hash collides."""
    keep = [
        name == topic and (key in (keys or "").split(" ") or dict(props or ()).get(UNIQ_KEY) == key)
        for name, keys, props in zip(
            batch.column("topic").to_pylist(),
            batch.column("keys").to_pylist(),
            batch.column("properties").to_pylist(),
            strict=True,
        )
    ]
    kept = batch.filter(pa.array(keep, pa.bool_()))
    return kept.take(pc.sort_indices(kept, [("commitLogOffset", "descending")]))


def tls_context(config: ClientConfig) -> ssl.SSLContext | None:
    """The TLS settings of ``config`` as an SSLContext (None without TLS): the brokers'
    certificates checked against ``tls_ca_file`` (default: the system's CAs), and a client
    certificate for brokers that require one."""
    if not config.tls:
        return None
    context = ssl.create_default_context(cafile=config.tls_ca_file)
    if config.tls_cert_file and config.tls_key_file:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    return context
