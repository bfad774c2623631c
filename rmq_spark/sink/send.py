"""A Spark task's side of the sink: its rows sent to their queues, staged under one
transaction per broker when exactly once (see :mod:`rmq_spark.sink.commit` for the driver's
side), and the commit message that tells the driver what was written.

Rows keep their order per queue: a task sends one queue's rows in order, one request after
the other, so rows with one ``shardingKey`` arrive in the order the task had them.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from rmq_spark.client.cluster import Cluster
from rmq_spark.client.remoting import RemotingProducer
from rmq_spark.client.remoting.transactions import HalfRef, HalfSender
from rmq_spark.client.route import TopicRoute
from rmq_spark.clock import now_ms
from rmq_spark.codec.properties import DELAY, decode_properties
from rmq_spark.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from rmq_spark.sink import rows as rowlib
from rmq_spark.sink.options import SinkOptions
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, messaging_pb2

__all__ = ["SinkCommit", "TaskWriter", "new_transaction_id", "producer_group"]

PRODUCER_GROUP = "rocketlite-spark-sink"
#: one request carries at most about this many bytes of bodies and properties
MAX_REQUEST_BYTES = 8 << 20
#: RocketMQ's 18 delay levels (1s .. 2h); a broker with other levels refuses what it lacks
DELAY_LEVELS = 18
#: the property each half message carries (exactly once through ``nameServer``): its
#: micro-batch, which a check of it is answered by
BATCH_PROPERTY = "rocketliteSinkBatch"


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: per broker, its transaction and how many messages it staged
    there (exactly once), plus totals for the query's progress."""

    parts: dict[str, tuple[str, int]] = field(default_factory=dict)
    rows: int = 0
    bytes: int = 0
    #: through ``nameServer``, exactly once: the half messages sent, and where their
    #: brokers are
    halves: list[HalfRef] = field(default_factory=list)
    brokers: dict[str, str] = field(default_factory=dict)


def producer_group(sink_id: str) -> str:
    """The producer group of an exactly-once sink's half messages through ``nameServer``:
    the brokers send their checks to the live producer of this group.

    >>> producer_group("q-0123")
    'rocketlite-sink-d54399a17a5eb0dc'
    """
    return "rocketlite-sink-" + hashlib.sha256(sink_id.encode()).hexdigest()[:16]


def new_transaction_id(sink_id: str, batch: str | None, partition: int, attempt: int) -> str:
    """A transaction id for one task attempt: unique, and telling where it came from."""
    suffix = f".b{batch or 0}.p{partition}.a{attempt}.{secrets.token_hex(4)}"
    return sink_id[: 127 - len(suffix)] + suffix


class TaskWriter:
    """Writes one task's Arrow batches; :meth:`finish` returns its :class:`SinkCommit`."""

    def __init__(
        self,
        options: SinkOptions,
        plan: rowlib.ColumnPlan,
        sink_id: str,
        transaction_id: str,
        partition: int,
        batch: str | None = None,
    ) -> None:
        self.options = options
        self.batch = batch or "0"
        self.plan = plan
        self.sink_id = sink_id
        self.transaction_id = transaction_id
        self.partition = partition
        self.commit = SinkCommit()
        self._rows = 0
        self._sequence: dict[str, int] = {}
        self._limits: dict[str, int] = {}
        # One send in flight while the next is encoded; one at a time keeps queue order.
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="rocketlite-sink-send")
        self._in_flight: tuple[Future, Callable[[], None]] | None = None
        self._remoting: RemotingProducer | None = None
        self._halves: HalfSender | None = None
        self._cluster: Cluster | None = None
        if options.name_server is not None:
            self._remoting = RemotingProducer(
                options.name_server, PRODUCER_GROUP, options.client_config()
            )
            if options.exactly_once:
                self._halves = HalfSender(self._remoting.client, producer_group(sink_id))
        else:
            self._cluster = Cluster(options.endpoints, options.client_config())

    def write(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        rows = np.arange(self._rows, self._rows + n)
        self._rows += n
        if self.plan.has("topic"):
            rowlib.check_not_null(batch, "topic", rows, self.partition, "name the row's topic")
            topics = batch.column("topic")
            names = topics.to_numpy(zero_copy_only=False)
            for topic in topics.unique().to_pylist():
                mask = np.asarray(names == topic)
                self._write_topic(topic, batch.filter(pa.array(mask)), rows[mask])
        else:
            assert self.options.topic is not None
            self._write_topic(self.options.topic, batch, rows)

    def finish(self) -> SinkCommit:
        self._wait_in_flight()
        if self._halves is not None:
            assert self._remoting is not None
            with _transactions_allowed():
                self.commit.halves = self._halves.finish()
            for name in {h.broker for h in self.commit.halves}:
                address = self._remoting.client.broker_address(name)
                if address is not None:
                    self.commit.brokers[name] = address
        return self.commit

    def close(self) -> None:
        self._sender.shutdown(wait=True)
        if self._halves is not None:
            self._halves.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._remoting is not None:
            self._remoting.close()

    # -- per topic and queue ---------------------------------------------------------------

    def _write_topic(self, topic: str, batch: pa.RecordBatch, rows: np.ndarray) -> None:
        queues = self._writable(topic)
        index = rowlib.queue_indexes(
            batch,
            self.plan,
            len(queues),
            self.partition,
            self.options.send_batch_size,
            rows,
            self.partition,
        )
        levels = rowlib.delay_levels(batch, self.plan, DELAY_LEVELS, rows, self.partition)
        key = index * (DELAY_LEVELS + 1) + levels
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        for group in np.split(order, bounds):
            first = int(group[0])
            mq = queues[int(index[first])]
            level = int(levels[first])
            part = batch.take(pa.array(group)) if len(group) != batch.num_rows else batch
            encoded = rowlib.encode_rows(part, self.plan, rows[group], self.partition)
            self._check_sizes(mq, encoded, rows[group])
            body_at = _offsets(encoded.body_sizes)
            prop_at = _offsets(encoded.properties_sizes)
            for start, end in _requests(encoded, self.options.send_batch_size):
                bodies = encoded.bodies[body_at[start] : body_at[end]]
                if self._remoting is not None:
                    self._send_remoting(mq, encoded, start, end, level)
                else:
                    blobs = encoded.properties[prop_at[start] : prop_at[end]]
                    self._send_grpc(mq, encoded, bodies, blobs, start, end, level)
                self.commit.rows += end - start
                self.commit.bytes += len(bodies)

    def _writable(self, topic: str) -> list[MessageQueue]:
        if self._remoting is not None:
            queues = self._remoting.writable_queues(topic)
        else:
            assert self._cluster is not None
            try:
                route: TopicRoute = self._cluster.route(topic)
            except NotFoundError:  # a topic column's new topic: made as a first send would
                _create_as_on_first_send(self._cluster, topic)
                route = self._cluster.route(topic)
            queues = list(route.writable)
        if not queues:
            raise PermissionDeniedError(
                f"topic {topic!r} has no writable queue; check the topic's and brokers' permissions"
            )
        return queues

    def _check_sizes(self, mq: MessageQueue, encoded: rowlib.Encoded, rows: np.ndarray) -> None:
        limit = self._body_limit(mq.broker_name)
        if not limit:
            return
        over = np.flatnonzero(encoded.body_sizes > limit)
        if len(over):
            raise rowlib.RowError(
                f"{rowlib.where(rows, int(over[0]), self.partition)} has a body of "
                f"{int(encoded.body_sizes[over[0]])} bytes; broker {mq.broker_name} takes at "
                f"most {limit} bytes per message"
            )

    def _body_limit(self, broker_name: str) -> int:
        if self._cluster is None:
            return 0  # RocketMQ's broker says it itself (maxMessageSize)
        limit = self._limits.get(broker_name)
        if limit is None:
            conn = self._cluster.connection(self._cluster.endpoint_of(broker_name))
            info = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
            limit = self._limits[broker_name] = info.limits.max_message_bytes
        return limit

    def _send_grpc(
        self,
        mq: MessageQueue,
        encoded: rowlib.Encoded,
        bodies: bytes,
        blobs: bytes,
        start: int,
        end: int,
        level: int,
    ) -> None:
        assert self._cluster is not None
        columns = messaging_pb2.MessageColumns(
            bodies=bodies,
            body_sizes=encoded.body_sizes[start:end].tolist(),
            properties=blobs,
            properties_sizes=encoded.properties_sizes[start:end].tolist(),
            tags=encoded.tags,
            born_timestamp_ms=now_ms(),
        )
        if encoded.tag_indexes is not None and len(encoded.tags) > 1:
            columns.tag_indexes.extend(encoded.tag_indexes[start:end].tolist())
        request = messaging_pb2.SendMessagesRequest(
            topic=mq.topic,
            queue_id=mq.queue_id,
            columns=columns,
            delay_level=level,
            producer_group=PRODUCER_GROUP,
        )
        if self.options.exactly_once:
            sequence = self._sequence.get(mq.broker_name, 0)
            request.stage.sink_id = self.sink_id
            request.stage.transaction_id = self.transaction_id
            request.stage.sequence = sequence
        conn = self._cluster.connection(self._cluster.endpoint_of(mq.broker_name))

        def call() -> None:
            try:
                conn.call(conn.messaging.SendMessages, request)
            except NotFoundError as exc:
                raise NotFoundError(f"writing to topic {mq.topic!r}: {exc}") from None

        def sent() -> None:
            if self.options.exactly_once:
                txn, count = self.commit.parts.get(mq.broker_name, (self.transaction_id, 0))
                self.commit.parts[mq.broker_name] = (txn, count + end - start)

        if self.options.exactly_once:
            self._sequence[mq.broker_name] = sequence + 1
        self._wait_in_flight()
        self._in_flight = (self._sender.submit(call), sent)

    def _wait_in_flight(self) -> None:
        if self._in_flight is not None:
            future, sent = self._in_flight
            self._in_flight = None
            future.result()
            sent()

    def _send_remoting(
        self, mq: MessageQueue, encoded: rowlib.Encoded, start: int, end: int, level: int
    ) -> None:
        assert self._remoting is not None
        body_at = _offsets(encoded.body_sizes)
        prop_at = _offsets(encoded.properties_sizes)
        bodies, fields = [], []
        for i in range(start, end):
            bodies.append(encoded.bodies[body_at[i] : body_at[i + 1]])
            item = decode_properties(encoded.properties[prop_at[i] : prop_at[i + 1]])
            if level:
                item[DELAY] = str(level)
            fields.append(item)
        if self._halves is not None:
            for item in fields:
                item[BATCH_PROPERTY] = self.batch
            with _transactions_allowed():
                self._halves.send_many(mq, bodies, fields)
            return
        self._remoting.client.send(mq, bodies, fields, producer_group=PRODUCER_GROUP)


@contextlib.contextmanager
def _transactions_allowed() -> Iterator[None]:
    """A broker that refuses transactional messages (RocketMQ's rejectTransactionMessage)
    refuses the half messages of exactly-once writes: say what to do about it."""
    try:
        yield
    except PermissionDeniedError as exc:
        raise PermissionDeniedError(
            f"{exc}. Exactly-once writes through nameServer send RocketMQ transactional "
            "messages: allow them on the brokers (rejectTransactionMessage=false) and grant "
            "Pub on the topic, or set exactlyOnce=false for at-least-once writes"
        ) from None


def _offsets(sizes: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def _requests(encoded: rowlib.Encoded, max_rows: int) -> Iterable[tuple[int, int]]:
    """Row ranges of at most ``max_rows`` rows and about MAX_REQUEST_BYTES each."""
    weight = _offsets(encoded.body_sizes + encoded.properties_sizes)
    start, n = 0, encoded.count
    while start < n:
        by_bytes = int(np.searchsorted(weight, weight[start] + MAX_REQUEST_BYTES, "right")) - 1
        end = min(n, start + max_rows, max(by_bytes, start + 1))
        yield start, end
        start = end


def check_writable_topic(options: SinkOptions) -> None:
    """On the driver, before any task runs: the option topic exists (or a broker creates
    topics on first use) and has a writable queue. InvalidArgumentError names it if not."""
    if options.topic is None:
        return
    if options.name_server is not None:
        return  # RocketMQ's producers create topics on first send where the broker allows
    cluster = Cluster(options.endpoints, options.client_config())
    try:
        try:
            route = cluster.route(options.topic)
        except NotFoundError:
            _create_as_on_first_send(cluster, options.topic)
            return
        if not route.writable:
            raise InvalidArgumentError(
                f"topic {options.topic!r} has no writable queue; update its permissions"
            )
    finally:
        cluster.close()


def _create_as_on_first_send(cluster: Cluster, topic: str) -> None:
    """Create ``topic`` on the brokers that would create it on a first send, with their
    default queue count (the sink must know a topic's queues before it sends); refuse when
    no broker creates topics."""
    infos = cluster.discover_brokers()
    creating = {ep: info for ep, info in infos.items() if info.auto_create_topics}
    if not creating:
        raise InvalidArgumentError(
            f"topic {topic!r} does not exist and the brokers do not create topics on first "
            f"use; create it first: rocketlite topic create {topic}"
        )
    for endpoint, info in creating.items():
        queues = info.default_topic_queues or 4
        request = admin_pb2.CreateTopicRequest(
            topic=topic, read_queue_nums=queues, write_queue_nums=queues
        )
        conn = cluster.connection(endpoint)
        try:
            conn.call(conn.admin.CreateTopic, request)
        except AlreadyExistsError:
            pass  # made meanwhile (by another writer's first send)
    cluster.routes.invalidate(topic)
