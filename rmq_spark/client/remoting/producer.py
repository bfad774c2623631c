"""A producer for RocketMQ clusters over the remoting protocol: rocketlite's ``Message`` and
``SendResult``, queues picked as the gRPC ``Producer`` picks them (round robin, or by
sharding key), sent with SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE to the broker the route names.

>>> with RemotingProducer("10.0.0.5:9876") as producer:                     # doctest: +SKIP
...     producer.send("orders", Message(b'{"id": 1}', tags="Paid", keys="order-1"))

A send that fails with an error worth retrying (the broker busy or unreachable) is retried
on another broker's queue, at most ``retries`` more times, as RocketMQ's producer does
(``retryTimesWhenSendFailed``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from rmq_spark.client.connection import ClientConfig
from rmq_spark.client.message import Message, SendResult, to_message
from rmq_spark.client.remoting.client import RemotingClient, Route, SendAnswer
from rmq_spark.client.selector import RoundRobinSelector, select_by_sharding_key
from rmq_spark.codec import properties as props
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError
from rmq_spark.names import validate_group, validate_topic
from rmq_spark.structs import MessageQueue

#: how long a topic's route is used before it is asked for again
ROUTE_TTL_S = 30.0
#: RocketMQ's default topic, whose route says which brokers create topics on first use,
#: and how many queues a producer uses of it (defaultTopicQueueNums)
AUTO_CREATE_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUES = 4
DEFAULT_RETRIES = 2


class RemotingProducer:
    def __init__(
        self,
        name_server: str,
        group: str = "rocketlite-producer",
        config: ClientConfig | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self.group = validate_group(group)
        if not isinstance(retries, int) or retries < 0:
            raise InvalidArgumentError(f"retries={retries!r} must be a whole number >= 0")
        self.retries = retries
        self.client = RemotingClient(name_server, config)
        self._selector = RoundRobinSelector()
        self._routes: dict[str, tuple[float, Route]] = {}
        self._lock = threading.Lock()

    def send(
        self,
        topic: str,
        message: Message | bytes | str,
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Store one message; the same ``sharding_key`` always goes to the same queue (in
        order), ``queue`` names one outright."""
        return self.send_batch(topic, [message], sharding_key=sharding_key, queue=queue)[0]

    def send_batch(
        self,
        topic: str,
        messages: Sequence[Message | bytes | str],
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> list[SendResult]:
        """Store ``messages`` in one queue, in order, with one request."""
        topic = validate_topic(topic)
        batch = [to_message(m) for m in messages]
        if not batch:
            raise InvalidArgumentError("messages is empty; send at least one message")
        fields = [_properties(m) for m in batch]
        bodies = [m.body for m in batch]
        avoid: set[str] = set()
        for attempt in range(self.retries + 1):
            target = queue or self._pick(topic, sharding_key, avoid)
            try:
                answer = self.client.send(target, bodies, fields, producer_group=self.group)
            except RocketliteError as exc:
                if not exc.retriable or queue is not None or attempt == self.retries:
                    raise
                avoid.add(target.broker_name)
                self._forget(topic)
                continue
            return _results(answer)
        raise AssertionError("unreachable")

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues in route order; for a topic that does not exist yet,
        the queues a first send creates it with (TBW102's route, as Java's producer)."""
        return list(self._route(validate_topic(topic)).writable)

    def _pick(self, topic: str, sharding_key: str | None, avoid: set[str]) -> MessageQueue:
        queues = self._route(topic).writable
        if not queues:
            raise InvalidArgumentError(f"topic {topic!r} has no writable queue in its route")
        if sharding_key is not None:
            return select_by_sharding_key(queues, sharding_key)
        return self._selector.select(queues, avoid)

    def _route(self, topic: str) -> Route:
        now = time.monotonic()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL_S:
            return cached[1]
        try:
            route = self.client.route(topic)
        except NotFoundError:
            route = self._auto_create_route(topic)
        with self._lock:
            self._routes[topic] = (now, route)
        return route

    def _auto_create_route(self, topic: str) -> Route:
        """RocketMQ's producers send to a topic that does not exist yet through the route of
        TBW102 (the brokers that may create topics), on at most 4 of its queues per broker;
        the broker creates the topic on the first send. NotFoundError names the topic when
        no broker may."""
        try:
            default = self.client.route(AUTO_CREATE_TOPIC)
        except NotFoundError:
            raise NotFoundError(
                f"topic {topic!r} does not exist and no broker creates topics on first use; "
                "create it first (mqadmin updateTopic, or rocketlite topic create)"
            ) from None
        queues = [
            MessageQueue(topic, mq.broker_name, mq.queue_id)
            for mq in default.writable
            if mq.queue_id < DEFAULT_TOPIC_QUEUES
        ]
        return Route(topic, default.addresses, queues, queues)

    def _forget(self, topic: str) -> None:
        with self._lock:
            self._routes.pop(topic, None)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemotingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _properties(message: Message) -> dict[str, str]:
    fields = dict(message.properties)
    if message.tags:
        fields[props.TAGS] = message.tags
    if message.keys:
        fields[props.KEYS] = " ".join(message.keys)
    fields[props.UNIQ_KEY] = message.unique_key
    return fields


def _results(answer: SendAnswer) -> list[SendResult]:
    mq = answer.queue
    return [
        SendResult(msg_id, offset_id, mq, answer.queue_offset + i)
        for i, (msg_id, offset_id) in enumerate(
            zip(answer.msg_ids, answer.offset_msg_ids, strict=True)
        )
    ]
