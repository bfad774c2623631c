"""A client of RocketMQ clusters over the remoting protocol: routes from a name server, then
pulls, offsets and sends at the brokers the routes name.

It reads an Apache RocketMQ 4.9+/5.x cluster (``namesrvAddr``) or a rocketlite broker's
remoting port alike. Queues are ``MessageQueue(topic, brokerName, queueId)`` as everywhere
in rocketlite; a broker group's addresses come only from the route: its master (id 0) and
its slaves. Writes and offset commits go to the master. Reads go to the master, or to a
slave when the master is down or gone from the route, or when a pull answer suggests one
(``suggestWhichBrokerId``), and back to the master when it returns, as RocketMQ's Java
client does (:mod:`~rmq_spark.client.remoting.replicas` decides).

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
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client.connection import ClientConfig
from rmq_spark.client.message import new_unique_keys
from rmq_spark.client.remoting.replicas import MASTER_ID, commit_node, read_node
from rmq_spark.client.remoting.transport import RemotingConnection, RemotingError, raise_for
from rmq_spark.clock import now_ms
from rmq_spark.codec import fastjson
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import UNIQ_KEY, encode_properties
from rmq_spark.errors import (
    FilterNotSupportedError,
    InvalidArgumentError,
    NotFoundError,
    RocketliteError,
    UnavailableError,
)
from rmq_spark.filter import TAG
from rmq_spark.names import validate_key_query
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.remoting.codes import (
    FILTER_NOT_SUPPORTED,
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
#: how long reads pass over a replica that failed (then it is tried again)
DOWN_S = 5.0
#: how often reads from slaves ask the name server whether the master is back
ROUTE_RECHECK_S = 5.0
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class BrokerGroupGoneError(NotFoundError):
    """A fresh route of the topic no longer names the broker group a read needs: every
    broker of the group stopped (or left the name server). It may come back (a restart)."""


@dataclass(frozen=True)
class Route:
    """A topic's queues and where the broker groups that hold them are."""

    topic: str
    #: broker name -> its master's address (groups without a master are absent)
    addresses: dict[str, str]
    #: the queues of every group that may be read, masterless ones too
    readable: list[MessageQueue]
    #: the queues of the groups with a master that may be written
    writable: list[MessageQueue]
    #: broker name -> broker id -> address, every replica the route names (a group the
    #: route gives queues but no address maps to {})
    replicas: dict[str, dict[int, str]] = field(default_factory=dict)

    def reached_at(self, broker_name: str) -> str:
        """Where a group is read now: its master, else its first slave ("" if none)."""
        replicas = self.replicas.get(broker_name) or {}
        master = self.addresses.get(broker_name)
        return master or (replicas[min(replicas)] if replicas else "")


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
    #: the replica that answered (0: the master, else a slave of the group)
    broker_id: int = MASTER_ID
    #: the replica the broker said to read this queue from next (suggestWhichBrokerId)
    suggested_broker_id: int = MASTER_ID

    def records(self, columns: Sequence[str] | None = None) -> pa.RecordBatch:
        """The records decoded into Arrow (:data:`~rmq_spark.codec.arrow_decode.RECORD_SCHEMA`,
        or its ``columns`` only)."""
        if not self.data:
            return decode_records(b"", columns=columns)
        return decode_records(self.data, sizes=self.sizes, columns=columns)


def _pull_request(
    mq: MessageQueue,
    offset: int,
    max_messages: int,
    max_bytes: int | None,
    group: str | None,
    expression: str,
    expression_type: str,
    suspend_ms: int,
) -> Command:
    """PULL_MESSAGE of ``mq`` at ``offset`` (see :meth:`RemotingClient.pull`)."""
    sys_flag = PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms > 0 else 0)
    return Command(
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
            "expressionType": expression_type,
            # a rocketlite broker answers with the records' sizes; others ignore it
            "rocketliteSizes": "true",
            **({"maxMsgBytes": str(max_bytes)} if max_bytes else {}),
        },
    )


class PendingPull:
    """A pull :meth:`RemotingClient.start_pulls` sent without waiting for its answer."""

    def __init__(self, client: RemotingClient, mq: MessageQueue, offset: int, request: Command):
        self.mq = mq
        self.offset = offset
        self._client = client
        self._request = request
        self._connection: RemotingConnection | None = None
        self._future: Future[Command] | None = None
        self._broker_id = MASTER_ID
        self._timeout_s = 0.0

    def sent(
        self,
        connection: RemotingConnection,
        request: Command,
        future: Future[Command],
        broker_id: int,
        timeout_s: float,
    ) -> None:
        """The request went out on ``connection`` (as ``request``, signed and numbered) to
        replica ``broker_id``; its answer comes to ``future``."""
        self._connection, self._request, self._future = connection, request, future
        self._broker_id, self._timeout_s = broker_id, timeout_s

    def result(self) -> PullAnswer:
        """The pull's answer, as :meth:`RemotingClient.pull` gives it. A replica that did
        not answer in the client's request timeout, or whose connection failed, is passed
        over for a while and the pull made again through :meth:`RemotingClient.pull`."""
        client, future, connection = self._client, self._future, self._connection
        if future is not None and connection is not None:
            try:
                answer = future.result(self._timeout_s)
            except FutureTimeout:
                connection.forget(self._request)
                client._mark_down(connection.address)
            except RocketliteError as exc:
                if not exc.retriable:
                    raise
                client._mark_down(connection.address)
            else:
                return client._pull_answer(self.mq, self.offset, answer, self._broker_id)
        ext = self._request.ext
        return client.pull(
            self.mq,
            self.offset,
            max_messages=int(ext["maxMsgNums"]),
            max_bytes=int(ext["maxMsgBytes"]) if "maxMsgBytes" in ext else None,
            group=ext["consumerGroup"],
            expression=ext["subscription"],
            expression_type=ext["expressionType"],
        )

    def cancel(self) -> None:
        """Drop the answer, wherever it is."""
        if self._connection is not None:
            self._connection.forget(self._request)
        self._future = self._connection = None


def parse_route(topic: str, body: bytes | bytearray | memoryview) -> Route:
    """A TopicRouteData body (standard JSON or fastjson's) as a :class:`Route`: every
    replica of every broker group. A group without a master is read from its slaves but
    not written (RocketMQ's clients do the same)."""
    data = fastjson.loads(body)
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"the route of {topic!r} is not a JSON object")
    replicas: dict[str, dict[int, str]] = {}
    for broker in data.get("brokerDatas") or []:
        addrs = broker.get("brokerAddrs") or {}
        replicas[broker["brokerName"]] = {
            int(broker_id): address for broker_id, address in sorted(addrs.items()) if address
        }
    readable, writable = [], []
    for queue_data in data.get("queueDatas") or []:
        name = queue_data["brokerName"]
        group = replicas.setdefault(name, {})  # queues but no address: read as unreachable
        perm = int(queue_data.get("perm", 6))
        if perm & PERM_READ:
            readable += [MessageQueue(topic, name, i) for i in range(queue_data["readQueueNums"])]
        if perm & PERM_WRITE and MASTER_ID in group:
            writable += [MessageQueue(topic, name, i) for i in range(queue_data["writeQueueNums"])]
    addresses = {name: group[MASTER_ID] for name, group in replicas.items() if MASTER_ID in group}
    return Route(topic, addresses, sorted(readable), sorted(writable), replicas)


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
        #: broker name -> broker id -> address, learnt from routes (or handed over)
        self._replicas: dict[str, dict[int, str]] = {}
        #: per queue, the broker id its last pull answer suggested (Java's
        #: pullFromWhichNodeTable); the master when absent
        self._suggested: dict[MessageQueue, int] = {}
        #: address -> monotonic time until which reads pass it over (it just failed)
        self._down: dict[str, float] = {}
        #: topic -> monotonic time of its last route asked because a read needed it
        self._route_asked: dict[str, float] = {}
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
            for name, replicas in route.replicas.items():
                self._replicas[name] = dict(replicas)
            self._route_asked[topic] = time.monotonic()
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
        expression_type: str = TAG,
        suspend_ms: int = 0,
    ) -> PullAnswer:
        """Records of ``mq`` from ``offset`` (``expression`` filtered by the broker: tags,
        or a SQL92 selector with ``expression_type`` "SQL92"), at most ``max_messages`` and
        about ``max_bytes`` (the broker's cap when None); with ``suspend_ms`` the broker
        holds an empty pull that long for new messages.

        A selector the broker cannot compile raises RemotingError with code 23
        (SUBSCRIPTION_PARSE_FAILED, the broker's reason in the message); a broker that does
        not filter by SQL92, FilterNotSupportedError."""
        request = _pull_request(
            mq, offset, max_messages, max_bytes, group, expression, expression_type, suspend_ms
        )
        suggested = self.suggested(mq)
        answer, broker_id = self._read_call(
            mq, request, f"pull of {mq}", suggested, extra_s=suspend_ms / 1000
        )
        return self._pull_answer(mq, offset, answer, broker_id)

    def start_pulls(
        self,
        mq: MessageQueue,
        starts: Sequence[tuple[int, int]],
        *,
        max_bytes: int | None = None,
        group: str | None = None,
        expression: str = "*",
        expression_type: str = TAG,
    ) -> list[PendingPull]:
        """:meth:`pull` of ``mq`` at each ``(offset, max_messages)`` of ``starts``, written
        to the replica a read goes to now in one go, without waiting: a reader keeps several
        pulls in flight this way (RocketMQ's brokers answer at most 32 messages a pull by
        default) with no thread per pull. Each answer is taken with
        :meth:`PendingPull.result`; one whose replica failed is pulled again through
        :meth:`pull` (the replica rules and retries)."""
        requests = [
            _pull_request(mq, offset, size, max_bytes, group, expression, expression_type, 0)
            for offset, size in starts
        ]
        pendings = [
            PendingPull(self, mq, offset, request)
            for (offset, _), request in zip(starts, requests, strict=True)
        ]
        try:
            node = self._read_node(mq, self.suggested(mq))
        except RocketliteError:  # raised again by pull() when the answer is asked for
            node = None
        if node is None or not requests:
            return pendings  # each is pulled through pull() when its answer is asked for
        broker_id, address = node
        connection = self._connection(address)
        signed = [self._signed(request) for request in requests]
        try:
            futures = connection.submit_many(signed)
        except RocketliteError as exc:
            if not exc.retriable:
                raise
            self._mark_down(address)
            return pendings
        for pending, request, future in zip(pendings, signed, futures, strict=True):
            pending.sent(connection, request, future, broker_id, self.config.request_timeout_s)
        return pendings

    def _pull_answer(
        self, mq: MessageQueue, offset: int, answer: Command, broker_id: int
    ) -> PullAnswer:
        """A pull's answer from replica ``broker_id`` as a :class:`PullAnswer` (errors as
        :meth:`pull` raises them); remembers the replica it suggests."""
        status = _PULL_STATUS.get(answer.code)  # type: ignore[call-overload]
        if answer.code == ResponseCode.TOPIC_NOT_EXIST and broker_id != MASTER_ID:
            # a slave takes topic configs from its master now and then (RocketMQ: every
            # 10 s): it may not know a new topic yet, which says nothing of the topic
            raise UnavailableError(
                f"pull of {mq}: the slave (broker id {broker_id}) of broker group "
                f"{mq.broker_name!r} does not know the topic yet ({answer.remark})"
            )
        if status is None:
            if answer.code == ResponseCode.SYSTEM_ERROR and (answer.remark or "").startswith(
                FILTER_NOT_SUPPORTED
            ):  # not worth a retry: the broker was started so
                raise FilterNotSupportedError(f"pull of {mq}: {answer.remark}")
            raise_for(answer, f"pull of {mq} from broker id {broker_id}")
            raise RemotingError(answer.code, f"pull of {mq}: unexpected answer {answer.code}")
        ext = answer.ext
        suggestion = int(ext.get("suggestWhichBrokerId") or MASTER_ID)
        with self._lock:
            self._suggested[mq] = suggestion
        found = status == PullStatus.FOUND
        sizes = ext.get("rocketliteSizes") if found else None
        return PullAnswer(
            status,
            int(ext.get("nextBeginOffset", offset)),
            int(ext.get("minOffset", 0)),
            int(ext.get("maxOffset", 0)),
            answer.body if found else b"",
            None if sizes is None else decode_sizes(sizes),
            broker_id,
            suggestion,
        )

    def suggested(self, mq: MessageQueue) -> int:
        """The broker id ``mq``'s last pull answer suggested reading from (the master's, 0,
        before any)."""
        with self._lock:
            return self._suggested.get(mq, MASTER_ID)

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
        for name in sorted(self.route(topic).replicas):
            request = Command(RequestCode.QUERY_MESSAGE, ext)
            answer, _ = self._read_call(MessageQueue(topic, name, 0), request, what)
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
        answer, _ = self._read_call(mq, request, f"offset of {group} on {mq}")
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        raise_for(answer, f"offset of group {group!r} on {mq}")
        return int(answer.ext["offset"])

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as ``group``'s next offset of ``mq`` (what mqadmin shows), on
        the group's master: UnavailableError, at once, while the route names no master or
        the master was just seen down (its slaves copy the master's offsets)."""
        request = Command(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": str(mq.queue_id),
                "commitOffset": str(offset),
            },
        )
        what = f"commit of {group} on {mq}"
        with self._lock:
            self._expire_down()
            address = commit_node(self._replicas.get(mq.broker_name) or {}, self._down)
        if address is None:
            raise UnavailableError(
                f"{what}: the master of broker group {mq.broker_name!r} is down or not in "
                "the route; offsets are committed to the master only"
            )
        try:
            answer = self._call(address, request, what)
        except RocketliteError as exc:
            if exc.retriable:
                self._mark_down(address)
            raise
        raise_for(answer, what)

    def _offset(self, code: int, mq: MessageQueue, what: str, **ext: str) -> int:
        request = Command(code, {"topic": mq.topic, "queueId": str(mq.queue_id), **ext})
        answer, broker_id = self._read_call(mq, request, f"{what} of {mq}")
        raise_for(answer, f"{what} of {mq} from broker id {broker_id}")
        return int(answer.ext["offset"])

    def queue_offsets(self, mq: MessageQueue) -> tuple[int, int, int]:
        """``(min offset, max offset, broker id)`` of ``mq``, asked of one replica when it
        stays up (the broker id is the one that gave the max: 0 is the master)."""
        what = f"offsets of {mq}"
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
        low, low_id = self._read_call(mq, Command(RequestCode.GET_MIN_OFFSET, ext), what)
        raise_for(low, f"min offset of {mq} from broker id {low_id}")
        request = Command(RequestCode.GET_MAX_OFFSET, ext)
        high, broker_id = self._read_call(mq, request, what, suggested=low_id)
        raise_for(high, f"max offset of {mq} from broker id {broker_id}")
        return int(low.ext["offset"]), int(high.ext["offset"]), broker_id

    # -- which replica ------------------------------------------------------------------------

    def _read_call(
        self,
        mq: MessageQueue,
        request: Command,
        what: str,
        suggested: int = MASTER_ID,
        extra_s: float = 0.0,
    ) -> tuple[Command, int]:
        """``request`` answered by a live replica of ``mq``'s broker group (see
        :mod:`~rmq_spark.client.remoting.replicas`), with the id of the one that answered.
        A replica that fails is passed over for a while and the route asked again; when no
        replica answers, the client's retry delays are waited out between rounds, then
        UnavailableError names the group and its replicas. NotFoundError when a fresh
        route no longer names the group."""
        timeout_s = self.config.request_timeout_s + extra_s
        delays = self.config.retry.delays_s()
        errors: list[str] = []
        asked = False
        while True:
            node = self._read_node(mq, suggested)
            if node is None and not asked:
                asked = True
                self._ask_route_for(mq)
                node = self._read_node(mq, suggested)
            if node is not None:
                broker_id, address = node
                try:
                    return self._connection(address).call(self._signed(request), timeout_s), (
                        broker_id
                    )
                except RocketliteError as exc:
                    if not exc.retriable:
                        raise
                    errors.append(f"broker id {broker_id} at {address}: {exc}")
                    self._mark_down(address)
                    if not asked:
                        asked = True
                        self._ask_route_for(mq)
                    continue
            delay = next(delays, None)
            if delay is None:
                raise UnavailableError(
                    f"{what}: no replica of broker group {mq.broker_name!r} answered "
                    f"({'; '.join(errors[-4:]) or self._replicas_text(mq.broker_name)}); "
                    "is the group's master or a slave running?"
                )
            time.sleep(delay)
            with self._lock:  # every replica is tried again after the pause
                for address in (self._replicas.get(mq.broker_name) or {}).values():
                    self._down.pop(address, None)
            asked = False

    def _read_node(self, mq: MessageQueue, suggested: int) -> tuple[int, str] | None:
        with self._lock:
            self._expire_down()
            replicas = self._replicas.get(mq.broker_name)
            asked_at = self._route_asked.get(mq.topic)
        if replicas is None or (MASTER_ID not in replicas and _stale(asked_at)):
            # unknown group, or read from slaves: has the master come back?
            self._ask_route_for(mq)
            with self._lock:
                replicas = self._replicas.get(mq.broker_name)
        with self._lock:
            return read_node(replicas or {}, suggested, self._down)

    def _ask_route_for(self, mq: MessageQueue) -> None:
        """Ask the name servers for ``mq``'s topic again (the replicas of its group);
        NotFoundError when the answer no longer names the group, or the topic is gone."""
        try:
            route = self.route(mq.topic)
        except NotFoundError as exc:
            raise BrokerGroupGoneError(
                f"broker group {mq.broker_name!r} is no longer in the route of topic "
                f"{mq.topic!r}: {exc}"
            ) from None
        except RocketliteError as exc:
            if not exc.retriable:
                raise
            with self._lock:  # the name servers are down: go on with what is known
                self._route_asked[mq.topic] = time.monotonic()
            return
        if mq.broker_name not in route.replicas:
            raise BrokerGroupGoneError(
                f"broker group {mq.broker_name!r} is no longer in the route of topic "
                f"{mq.topic!r} (the name server names {sorted(route.replicas) or 'none'}); "
                "were all of its brokers stopped?"
            )

    def _mark_down(self, address: str) -> None:
        with self._lock:
            self._down[address] = time.monotonic() + DOWN_S

    def _expire_down(self) -> None:
        now = time.monotonic()
        for address in [a for a, until in self._down.items() if until <= now]:
            del self._down[address]

    def _replicas_text(self, broker_name: str) -> str:
        replicas = self.replicas_of(broker_name)
        if not replicas:
            return "the route names no address of it"
        return ", ".join(f"id {i} at {a}" for i, a in sorted(replicas.items()))

    def replicas_of(self, broker_name: str) -> dict[int, str]:
        """Broker id -> address of every replica of a group the routes named."""
        with self._lock:
            return dict(self._replicas.get(broker_name) or {})

    def learn_replicas(self, broker_name: str, replicas: dict[int, str]) -> None:
        """Use ``replicas`` for ``broker_name`` without asking a name server (a Spark task
        gets the replicas the driver's routes gave)."""
        with self._lock:
            self._replicas[broker_name] = dict(replicas)

    def _broker_call(
        self, mq: MessageQueue, request: Command, what: str, extra_s: float = 0.0
    ) -> Command:
        address = self.address_of(mq)
        return self._call(address, request, what, extra_s)

    def broker_address(self, broker_name: str) -> str | None:
        """The address of a group's master some route named, or None."""
        with self._lock:
            return (self._replicas.get(broker_name) or {}).get(MASTER_ID)

    def read_address(self, broker_name: str) -> str | None:
        """Where a read of the group goes now (its master, or a live slave), or None."""
        with self._lock:
            self._expire_down()
            node = read_node(self._replicas.get(broker_name) or {}, MASTER_ID, self._down)
        return None if node is None else node[1]

    def learn_broker(self, broker_name: str, address: str) -> None:
        """Use ``address`` as ``broker_name``'s master without asking a name server (a
        Spark task gets the addresses the driver's routes gave)."""
        with self._lock:
            self._replicas.setdefault(broker_name, {})[MASTER_ID] = address

    def address_of(self, mq: MessageQueue) -> str:
        """The master's address of ``mq``'s group (where writes go)."""
        address = self.broker_address(mq.broker_name)
        if address is None:
            address = self.route(mq.topic).addresses.get(mq.broker_name)
        if address is None:
            raise NotFoundError(
                f"no route names a master of broker {mq.broker_name!r} for topic "
                f"{mq.topic!r}; is it registered with the name server?"
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


def _stale(asked_at: float | None) -> bool:
    return asked_at is None or time.monotonic() - asked_at >= ROUTE_RECHECK_S
