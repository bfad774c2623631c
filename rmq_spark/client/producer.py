"""The producer: sends messages to the queues of a topic across every broker.

Queue choice (one queue per call, so a batch stays together):

* ``queue=MessageQueue(...)`` or ``queue=<queue id>`` (topic on one broker only): that queue;
* ``sharding_key="order-42"``: ``abs(java_string_hash(key)) % n`` over the sorted writable
  queues of the merged route (RocketMQ's SelectMessageQueueByHash), stable while they do not
  change;
* otherwise round robin over the sorted writable queues of the merged route. Only these sends
  move to another broker when one fails (RocketMQ's ``retryTimesWhenSendFailed``), and a
  broker that failed with a retriable error (unreachable, or no answer in time) is skipped
  for a while.

Sends are at least once: a send that failed because the connection broke may have been
stored, and is then stored again by the retry (with the same message id).

With ``ProducerConfig(auto_batch=True)``, round-robin single sends that arrive while a
batch of their topic waits for its answer go together as one request
(:mod:`rmq_spark.client.auto_batch`).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rmq_spark import clock
from rmq_spark.client.auto_batch import Accumulator
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import NO_RETRY, Connection, RetryPolicy
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.client.message import (
    ColumnsChunk,
    Message,
    SendResult,
    split_by_size,
    to_message,
)
from rmq_spark.client.plain_batch import PlainBatch
from rmq_spark.client.producer_config import ProducerConfig
from rmq_spark.client.selector import RoundRobinSelector, select_by_sharding_key
from rmq_spark.client.send_chunks import Chunk, encode_requests, fit_segment
from rmq_spark.codec.record import offset_msg_ids
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RocketliteError,
)
from rmq_spark.names import validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, messaging_pb2
from rmq_spark.wire.v1 import mq_from_pb

log = logging.getLogger("rmq_spark.client")

__all__ = ["Producer", "ProducerConfig"]


def fails_over(error: RocketliteError) -> bool:
    """Whether a round-robin send that failed with ``error`` tries another broker: after a
    retriable error (``error.retriable``), or a refusal that a stale route may explain (the
    topic is gone from that broker, or it no longer takes writes), as RocketMQ's producer.
    """
    return error.retriable or isinstance(error, PermissionDeniedError | NotFoundError)


QueueArg = MessageQueue | int | None
#: how a broker that predates MessageColumns refuses a columnar send (it sees no messages)
_NO_COLUMNS_ERROR = "messages is empty"
_new_result = functools.partial(tuple.__new__, SendResult)


class Producer:
    """Sends messages to topics on a set of brokers. Safe to share between threads.

    >>> with Producer("127.0.0.1:10911") as producer:          # doctest: +SKIP
    ...     result = producer.send("orders", b"hello", tags="TagA", keys=["order-1"])
    ...     result.message_queue, result.queue_offset
    (MessageQueue(topic='orders', broker_name='broker-a', queue_id=2), 0)
    """

    def __init__(
        self,
        endpoints: str | Iterable[str] | Endpoints,
        group: str = "DEFAULT_PRODUCER",
        config: ProducerConfig | None = None,
    ) -> None:
        self.group = validate_group(group)
        self.config = config or ProducerConfig()
        self._cluster = Cluster(endpoints, self.config)
        self._selector = RoundRobinSelector()
        self._faulty_until: dict[str, float] = {}
        self._no_columns: set[str] = set()  # endpoints of brokers without MessageColumns
        self._segment_bytes: dict[str, int] = {}  # by endpoint; 0: the broker does not say
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False  # close() has begun: no new sends
        self._closed = False  # the connections are closed
        self._accumulator = (
            Accumulator(
                self._send_held,
                max_delay_ms=self.config.batch_max_delay_ms,
                max_bytes=self.config.batch_max_bytes,
                total_max_bytes=self.config.total_batch_max_bytes,
                senders=self.config.async_workers,
            )
            if self.config.auto_batch
            else None
        )

    # --- public API ----------------------------------------------------------------------

    def send(
        self,
        topic: str,
        body: bytes | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        queue: QueueArg = None,
        sharding_key: str | None = None,
        delay_level: int = 0,
    ) -> SendResult:
        """Send one message; returns where it was stored.

        ``queue`` forces a queue (a MessageQueue, or a queue id when the topic is on one
        broker); ``sharding_key`` keeps messages with one key in one queue, in order;
        ``delay_level`` 1..18 delivers it later (1s 5s 10s 30s 1m ... 2h).
        """
        message = Message(body, tags, keys, properties)
        held = self._hold(topic, message, queue, sharding_key, delay_level, inline=True)
        if held is not None:
            return held.result()
        return self._send(topic, [message], queue, sharding_key, delay_level)[0]

    def send_batch(
        self,
        topic: str,
        messages: Sequence[Message | bytes | str | tuple],
        *,
        queue: QueueArg = None,
        sharding_key: str | None = None,
        delay_level: int = 0,
    ) -> list[SendResult]:
        """Send many messages to one queue, at consecutive offsets, in order.

        Items are Messages, bodies, or ``(body, tags, keys, properties)`` tuples. A batch
        over ``max_batch_bytes``, or whose records would not fit in one of the broker's
        commit-log segments, goes as several requests to the same queue: each request is
        atomic on the broker, the whole batch is not.
        """
        plain = PlainBatch.of(messages, self.config.columns_min_batch)
        items = plain if plain is not None else [to_message(m) for m in messages]
        if not items:
            raise InvalidArgumentError(f"send_batch to topic {topic!r} got no messages")
        return self._send(topic, items, queue, sharding_key, delay_level)

    def send_async(
        self,
        topic: str,
        body: bytes | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        queue: QueueArg = None,
        sharding_key: str | None = None,
        delay_level: int = 0,
        callback: Callable[[Future[SendResult]], Any] | None = None,
    ) -> Future[SendResult]:
        """Like :meth:`send`, on a small thread pool; ``callback(future)`` runs when done.
        With ``auto_batch``, a round-robin send joins its topic's next batch instead
        (:mod:`rmq_spark.client.auto_batch`).

        >>> producer.send_async("orders", b"x").result(timeout=5)  # doctest: +SKIP
        """
        self._check_open()
        # Build the message now so a bad argument raises here, not inside the future.
        message = Message(body, tags, keys, properties)
        held = self._hold(topic, message, queue, sharding_key, delay_level)
        if held is not None:
            if callback is not None:
                held.add_done_callback(callback)
            return held
        with self._lock:
            self._check_open()  # again: close() may have begun since
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.config.async_workers, thread_name_prefix="rmq-producer-async"
                )
            executor = self._executor
        future = executor.submit(
            lambda: self._send(topic, [message], queue, sharding_key, delay_level)[0]
        )
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        """The sorted writable queues of the topic's merged route (the round-robin order)."""
        return list(self._cluster.route(topic).writable)

    def close(self) -> None:
        """Wait for pending async sends, then close the connections."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            executor, self._executor = self._executor, None
        # What was accepted goes out while the connections are still open.
        if self._accumulator is not None:
            self._accumulator.close()
        if executor is not None:
            executor.shutdown(wait=True)
        self._closed = True
        self._cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- sending -------------------------------------------------------------------------

    def _hold(
        self,
        topic: str,
        message: Message,
        queue: QueueArg,
        sharding_key: str | None,
        delay_level: int,
        inline: bool = False,
    ) -> Future[SendResult] | None:
        """With auto_batch, hold a round-robin send for its topic's next batch; None when
        it goes on its own (auto_batch off, a queue, sharding key or delay, or full).
        ``inline``: a send that waits goes out in this thread when nothing else is pending."""
        own_request = queue is not None or sharding_key is not None or delay_level != 0
        if self._accumulator is None or own_request:
            return None
        self._check_open()
        validate_topic(topic, allow_system=True)  # a bad name fails here, not in the batch
        return self._accumulator.add(topic, message, inline=inline)

    def _send_held(self, topic: str, messages: list[Message]) -> list[SendResult]:
        return self._send(topic, messages, None, None, 0)

    def _send(
        self,
        topic: str,
        messages: list[Message] | PlainBatch,
        queue: QueueArg,
        sharding_key: str | None,
        delay_level: int,
    ) -> list[SendResult]:
        self._check_open(accepted=True)
        validate_topic(topic, allow_system=True)
        if queue is not None and sharding_key is not None:
            raise InvalidArgumentError(
                f"send to topic {topic!r}: give queue={queue!r} or "
                f"sharding_key={sharding_key!r}, not both"
            )
        if not isinstance(delay_level, int) or delay_level < 0:
            raise InvalidArgumentError(
                f"delay_level={delay_level!r} must be 0 (now) or a level 1..18"
            )
        now_ms = clock.now_ms()
        config = self.config
        chunks = encode_requests(messages, now_ms, config.max_batch_bytes, config.columns_min_batch)
        target = self._fixed_queue(topic, queue, sharding_key)
        if target is None:
            target, results = self._send_round_robin(topic, chunks[0], delay_level)
        else:
            results = self._send_to(target, chunks[0], delay_level, self.config.retry)
        for chunk in chunks[1:]:
            results += self._send_to(target, chunk, delay_level, self.config.retry)
        return results

    def _fixed_queue(
        self, topic: str, queue: QueueArg, sharding_key: str | None
    ) -> MessageQueue | None:
        if sharding_key is not None:
            return select_by_sharding_key(self._cluster.route(topic).writable, sharding_key)
        if queue is None:
            return None
        if isinstance(queue, MessageQueue):
            if queue.topic != topic or not queue.broker_name:
                raise InvalidArgumentError(
                    f"queue {queue!r} must name topic {topic!r} and its broker"
                )
            return queue
        if isinstance(queue, int) and not isinstance(queue, bool):
            brokers = sorted(self._cluster.route(topic).brokers)
            if len(brokers) != 1:
                raise InvalidArgumentError(
                    f"queue={queue} is ambiguous: topic {topic!r} is on brokers {brokers}; "
                    f"pass queue=MessageQueue({topic!r}, <broker>, {queue})"
                )
            return MessageQueue(topic, brokers[0], queue)
        raise InvalidArgumentError(
            f"queue={queue!r} must be a MessageQueue, a queue id or None (round robin)"
        )

    def _send_round_robin(
        self, topic: str, chunk: Chunk, delay_level: int
    ) -> tuple[MessageQueue, list[SendResult]]:
        attempts = 1 + self.config.retry_times_when_send_failed
        avoid = self._faulty_brokers()
        tried: list[str] = []
        last: RocketliteError | None = None
        for attempt in range(attempts):
            # A broker that refused (permission, unknown topic) may mean a stale route.
            stale = last is not None and not last.retriable
            route = self._cluster.routes.refresh(topic) if stale else self._cluster.route(topic)
            if not route.writable:
                raise PermissionDeniedError(
                    f"topic {topic!r} has no writable queue on any broker "
                    f"({', '.join(route.brokers)}); check the topic and broker permissions"
                )
            mq = self._selector.select(route.writable, avoid)
            single_broker = len(route.brokers) == 1
            # With one broker there is nowhere to fail over to: retry it with backoff instead.
            retry = self.config.retry if single_broker else NO_RETRY
            try:
                return mq, self._send_to(mq, chunk, delay_level, retry)
            except RocketliteError as exc:
                if single_broker or not fails_over(exc):
                    raise
                tried.append(mq.broker_name)
                if attempt == attempts - 1:
                    raise type(exc)(
                        f"send to topic {topic!r} failed {attempts} times (brokers tried: "
                        f"{', '.join(tried)}); last error: {exc}"
                    ) from exc
                last = exc
            avoid = avoid | {mq.broker_name}
            if last.retriable:  # unreachable or slow: leave it out of round robin a while
                self._mark_faulty(mq.broker_name)
            log.warning(
                "send to %s failed (%s); retrying on another broker (%d/%d)",
                mq,
                last,
                attempt + 1,
                attempts - 1,
            )
        raise AssertionError("unreachable")

    def _send_to(
        self, mq: MessageQueue, chunk: Chunk, delay_level: int, retry: RetryPolicy
    ) -> list[SendResult]:
        endpoint = self._cluster.endpoint_of(mq.broker_name)
        conn = self._cluster.connection(endpoint)
        results: list[SendResult] = []
        for part in fit_segment(chunk, self._segment_bytes_of(conn, endpoint), mq.topic):
            results += self._send_part(conn, endpoint, mq, part, delay_level, retry)
        return results

    def _segment_bytes_of(self, conn: Connection, endpoint: str) -> int:
        known = self._segment_bytes.get(endpoint)
        if known is None:
            try:
                info = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
            except RocketliteError:
                return 0  # the send itself will say what is wrong; ask again next time
            known = info.limits.commitlog_segment_bytes
            with self._lock:
                self._segment_bytes[endpoint] = known
        return known

    def _send_part(
        self,
        conn: Connection,
        endpoint: str,
        mq: MessageQueue,
        chunk: Chunk,
        delay_level: int,
        retry: RetryPolicy,
    ) -> list[SendResult]:
        if not isinstance(chunk, ColumnsChunk):
            return self._send_messages(conn, mq, chunk, delay_level, retry)
        if endpoint not in self._no_columns:
            try:
                return self._send_columns(conn, mq, chunk, delay_level, retry)
            except InvalidArgumentError as exc:
                if _NO_COLUMNS_ERROR not in str(exc):
                    raise
                # It refused before storing anything: send this broker Messages from now on.
                log.info("broker %s does not take columnar sends; sending messages", endpoint)
                with self._lock:
                    self._no_columns.add(endpoint)
        encoded = [m.to_pb(chunk.now_ms) for m in chunk.messages]
        results: list[SendResult] = []
        for part in split_by_size(encoded, self.config.max_batch_bytes):
            results += self._send_messages(conn, mq, part, delay_level, retry)
        return results

    def _send_columns(
        self,
        conn: Connection,
        mq: MessageQueue,
        chunk: ColumnsChunk,
        delay_level: int,
        retry: RetryPolicy,
    ) -> list[SendResult]:
        request = messaging_pb2.SendMessagesRequest(
            topic=mq.topic,
            queue_id=mq.queue_id,
            columns=chunk.columns,
            delay_level=delay_level,
            producer_group=self.group,
        )
        response = conn.call(conn.messaging.SendMessages, request, retry=retry)
        answer = response.columns_result
        keys = chunk.unique_keys
        if not response.HasField("columns_result") or len(answer.physical_offsets) != len(keys):
            raise RocketliteError(
                f"broker {mq.broker_name} answered a send of {len(keys)} messages in columns "
                f"with {len(answer.physical_offsets)} offsets; is it a compatible broker?"
            )
        queue = MessageQueue(
            mq.topic, response.queue.broker_name or mq.broker_name, response.queue.queue_id
        )
        prefix = answer.offset_msg_id_prefix
        offset_ids = offset_msg_ids(prefix, answer.physical_offsets)
        if answer.HasField("first_queue_offset"):
            first = answer.first_queue_offset
            queue_offsets: Iterable[int | None] = range(first, first + len(keys))
        else:  # delayed: no queue offset until delivered
            queue_offsets = itertools.repeat(None)
        stamp = itertools.repeat(response.store_timestamp_ms)
        return list(
            map(_new_result, zip(keys, offset_ids, itertools.repeat(queue), queue_offsets, stamp))
        )

    def _send_messages(
        self,
        conn: Connection,
        mq: MessageQueue,
        chunk: Sequence[messaging_pb2.Message],
        delay_level: int,
        retry: RetryPolicy,
    ) -> list[SendResult]:
        request = messaging_pb2.SendMessagesRequest(
            topic=mq.topic,
            queue_id=mq.queue_id,
            messages=chunk,
            delay_level=delay_level,
            producer_group=self.group,
        )
        response = conn.call(conn.messaging.SendMessages, request, retry=retry)
        queue = mq_from_pb(response.queue)
        return [
            SendResult(
                entry.msg_id,
                entry.offset_msg_id,
                MessageQueue(mq.topic, queue.broker_name or mq.broker_name, entry.queue_id),
                entry.queue_offset if entry.HasField("queue_offset") else None,
                response.store_timestamp_ms,
            )
            for entry in response.entries
        ]

    # --- broker fault avoidance ----------------------------------------------------------

    def _faulty_brokers(self) -> set[str]:
        now = time.monotonic()
        with self._lock:
            return {name for name, until in self._faulty_until.items() if until > now}

    def _mark_faulty(self, broker_name: str) -> None:
        until = time.monotonic() + self.config.unavailable_broker_backoff_ms / 1000
        with self._lock:
            self._faulty_until[broker_name] = until

    def _check_open(self, accepted: bool = False) -> None:
        """Refuse new sends once close() has begun; a send ``accepted`` before (a pending
        async or held one) runs until the connections close."""
        if self._closed or (self._closing and not accepted):
            raise RocketliteError("the producer is closed; create a new Producer")
