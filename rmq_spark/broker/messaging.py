"""MessagingService: writes and reads of the message log (docs/protocol.md, "Messaging").

The servicer checks requests, calls the store or :class:`~rmq_spark.broker.core.Broker`, and
builds answers; the conversions live in the small functions below it.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import unquote

import numpy as np

from rmq_spark.broker import checks, retry
from rmq_spark.broker.core import Broker
from rmq_spark.broker.status import grpc_boundary
from rmq_spark.codec import properties as props
from rmq_spark.codec.record import (
    FIXED_WITHOUT_HOSTS,
    IPV4_HOST,
    POS_PHYSICALOFFSET,
    encode_host,
    parse_host,
    parse_offset_msg_id,
)
from rmq_spark.codec.subscription import parse_subscription
from rmq_spark.codec.taghash import java_string_hash
from rmq_spark.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from rmq_spark.names import validate_group
from rmq_spark.proto_gen.rocketlite.v1 import messaging_pb2, messaging_pb2_grpc
from rmq_spark.store.message_store import GetResult
from rmq_spark.store.topics import TopicConfig
from rmq_spark.structs import Permission, PullStatus
from rmq_spark.wire import pull_status_to_pb

#: property names a sender may not set: they have their own fields or belong to the broker
RESERVED_PROPERTIES = frozenset(
    {
        props.TAGS,
        props.KEYS,
        props.UNIQ_KEY,
        props.DELAY,
        props.WAIT,
        props.RETRY_TOPIC,
        props.REAL_TOPIC,
        props.REAL_QID,
        props.RECONSUME_TIME,
        props.MAX_RECONSUME_TIMES,
        props.ORIGIN_MESSAGE_ID,
    }
)
DEFAULT_PULL_MESSAGES = 32  # RocketMQ's pullBatchSize default
DEFAULT_PULL_BYTES = 4 << 20
UNKNOWN_BORN_HOST = "127.0.0.1:0"
MIN_RECORD_BYTES = FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST  # empty body, topic and properties


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)

    @grpc_boundary
    def SendMessages(self, request, context):
        broker = self._broker
        topic = checks.sendable_topic(request.topic)
        batch = _SendBatch.from_request(request, len(broker.config.delay_levels_ms))
        msg_ids = batch.fill_unique_ids(self._unique_ids)
        encoded = batch.encode_properties(msg_ids)
        config = broker.topic_for_write(topic)
        _check_writable(config)
        queue_id = self._select_queue(request, config)
        fields = {
            "born_host": born_host(context.peer()),
            "born_timestamps": batch.born_timestamps,
            "flags": batch.flags,
        }
        if batch.delay_level:
            result = broker.delays.submit(
                topic, queue_id, batch.bodies, encoded, batch.tags, batch.delay_level, **fields
            )
        else:
            result = broker.put_messages(
                topic, queue_id, batch.bodies, encoded, batch.tags, **fields
            )
        return _send_response(
            broker, topic, queue_id, msg_ids, result, delayed=bool(batch.delay_level)
        )

    @grpc_boundary
    def PullMessages(self, request, context):
        store = self._broker.store
        pull = _PullArgs.from_request(request, self._broker)
        if pull.commit_offset is not None:
            store.offsets.commit(
                pull.group, pull.topic, {pull.queue_id: pull.commit_offset}, increase_only=True
            )
        result = pull.read(store, pull.offset)
        if result.status == PullStatus.NO_NEW_MSG and pull.suspend_ms > 0:
            result = self._hold(pull, result, context)
        return _pull_response(result)

    @grpc_boundary
    def QueryOffsets(self, request, context):
        broker = self._broker
        if not request.queries:
            raise InvalidArgumentError("queries is empty; list at least one queue")
        checked = []
        for i, query in enumerate(request.queries):
            with checks.item(f"queries[{i}]"):
                mq, _ = checks.check_queue(broker, query.queue)
                timestamp = query.timestamp_ms if query.HasField("timestamp_ms") else None
                if timestamp is not None:
                    checks.non_negative(timestamp, "timestamp_ms")
            checked.append((mq, timestamp))
        return messaging_pb2.QueryOffsetsResponse(
            offsets=[_queue_offsets(broker, mq, timestamp) for mq, timestamp in checked]
        )

    @grpc_boundary
    def ViewMessage(self, request, context):
        physical = _physical_offset(self._broker, request.message)
        return messaging_pb2.ViewMessageResponse(record=_read_record(self._broker, physical))

    @grpc_boundary
    def ConsumerSendBack(self, request, context):
        return retry.send_back(self._broker, request, context)

    # -- helpers that need the servicer's state ---------------------------------------------

    def _select_queue(self, request, config: TopicConfig) -> int:
        count = config.write_queue_nums
        selector = request.WhichOneof("queue_selector")
        if selector == "queue_id":
            if not 0 <= request.queue_id < count:
                raise InvalidArgumentError(
                    f"queue_id={request.queue_id} is out of range for topic {config.name!r}: "
                    f"it has {count} write queues (0..{count - 1})"
                )
            return request.queue_id
        if selector == "sharding_key":
            if not request.sharding_key:
                raise InvalidArgumentError(
                    "sharding_key is empty; give a key, a queue_id, or neither (round robin)"
                )
            return abs(java_string_hash(request.sharding_key)) % count
        return self._round_robin.next(config.name) % count

    def _hold(self, pull: _PullArgs, result: GetResult, context) -> GetResult:
        """Long polling: wait for a message that passes the filter, up to the suspend time.

        Arrivals that the tag filter rejects do not end the wait (RocketMQ's hold service
        does the same); the answer then moves next_begin_offset past them.
        """
        broker = self._broker
        store, notifier = broker.store, broker.notifier
        topic, queue_id = pull.topic, pull.queue_id
        # A call the client cancels must stop holding a server thread at once.
        if not context.add_callback(lambda: notifier.notify(topic, queue_id)):
            return result
        deadline = time.monotonic() + pull.suspend_ms / 1000
        offset = pull.offset
        while True:

            def arrived(offset=offset) -> bool:
                return store.max_offset(topic, queue_id) > offset or not context.is_active()

            ready = notifier.wait(topic, queue_id, deadline - time.monotonic(), arrived)
            if not ready or not context.is_active():
                return result
            result = pull.read(store, offset)
            if result.status != PullStatus.NO_MATCHED_MSG:
                return result
            offset = result.next_begin_offset


# -- SendMessages ---------------------------------------------------------------------------


@dataclass
class _SendBatch:
    """The messages of a send request, checked, as the store's append takes them."""

    messages: list[messaging_pb2.Message]
    bodies: list[bytes]
    tags: list[str | None]
    born_timestamps: np.ndarray
    flags: list[int]
    delay_level: int

    @classmethod
    def from_request(cls, request, delay_levels: int) -> _SendBatch:
        # One list of wrappers for every pass below: each pass over the repeated field
        # itself would build a new Python object per message.
        messages = list(request.messages)
        if not messages:
            raise InvalidArgumentError("messages is empty; a send needs at least one message")
        if not 0 <= request.delay_level <= delay_levels:
            raise InvalidArgumentError(
                f"delay_level={request.delay_level} is out of range: use 0 (no delay) or "
                f"1..{delay_levels}"
            )
        born = np.fromiter((m.born_timestamp_ms for m in messages), np.int64, len(messages))
        if (born < 0).any():
            i = int(np.argmax(born < 0))
            raise InvalidArgumentError(
                f"messages[{i}]: born_timestamp_ms={int(born[i])} is negative; use epoch "
                "milliseconds, or 0 for the broker's receive time"
            )
        born[born == 0] = time.time_ns() // 1_000_000
        return cls(
            messages=messages,
            bodies=[m.body for m in messages],
            tags=[m.tags or None for m in messages],
            born_timestamps=born,
            flags=[m.flag for m in messages],
            delay_level=request.delay_level,
        )

    def fill_unique_ids(self, generator: UniqueIdGenerator) -> list[str]:
        """Each message's UNIQ_KEY: its own, or one the broker makes."""
        given = [m.unique_key for m in self.messages]
        missing = given.count("")
        if not missing:
            return given
        made = iter(generator.next_ids(missing))
        return [key or next(made) for key in given]

    def encode_properties(self, msg_ids: Sequence[str]) -> list[bytes]:
        """Each message's encoded properties, checked (see :func:`fast_properties`)."""
        encoded = []
        for i, (message, msg_id) in enumerate(zip(self.messages, msg_ids, strict=True)):
            data = fast_properties(message, msg_id)
            if data is None:  # something is wrong: the reference path says what
                with checks.item(f"messages[{i}]"):
                    data = message_properties(message, msg_id)
            encoded.append(data)
        return encoded


def fast_properties(message: messaging_pb2.Message, unique_key: str) -> bytes | None:
    """What :func:`message_properties` gives, or None where it would raise.

    The send path's hot loop: it builds the text in one go and checks separators by
    counting them (each property adds exactly one of each), about five times faster than
    checking field by field.
    """
    parts = []
    count = 1
    if message.tags:
        parts.append(f"{props.TAGS}\x01{message.tags}\x02")
        count += 1
    keys = message.keys
    if keys:
        joined = " ".join(keys)
        if "" in keys or joined.count(" ") != len(keys) - 1:
            return None
        parts.append(f"{props.KEYS}\x01{joined}\x02")
        count += 1
    parts.append(f"{props.UNIQ_KEY}\x01{unique_key}\x02")
    user = message.properties
    if user:
        if "" in user or not RESERVED_PROPERTIES.isdisjoint(user):
            return None
        parts.extend(f"{name}\x01{value}\x02" for name, value in user.items())
        count += len(user)
    text = "".join(parts)
    if text.count("\x01") != count or text.count("\x02") != count:
        return None
    data = text.encode()  # protobuf strings are valid UTF-8, so this cannot fail
    return data if len(data) <= props.MAX_PROPERTIES_BYTES else None


def message_properties(message: messaging_pb2.Message, unique_key: str) -> bytes:
    """The encoded properties of one message: its fields as system properties plus its own."""
    reserved = RESERVED_PROPERTIES.intersection(message.properties)
    if reserved:
        raise InvalidArgumentError(
            f"property name(s) {', '.join(sorted(reserved))} are reserved; use the message's "
            "tags / keys / unique_key fields (or the request's delay_level) instead"
        )
    fields: dict[str, str] = {}
    if message.tags:
        fields[props.TAGS] = message.tags
    if message.keys:
        bad = [key for key in message.keys if not key or " " in key]
        if bad:
            raise InvalidArgumentError(
                f"key {bad[0]!r} is empty or contains a space; keys are stored space "
                "separated, so each must be a non-empty word"
            )
        fields[props.KEYS] = " ".join(message.keys)
    fields[props.UNIQ_KEY] = unique_key
    fields.update(message.properties)
    return props.encode_properties(fields)


def _check_writable(config: TopicConfig) -> None:
    # The store checks this too, but a delayed batch is first written to the schedule topic.
    if not config.is_writable:
        raise PermissionDeniedError(
            f"topic {config.name!r} is not writable (perm {config.perm}); update it with "
            "perm 6 to allow writes"
        )


def _send_response(
    broker: Broker, topic: str, queue_id: int, msg_ids: list[str], result, *, delayed: bool
) -> messaging_pb2.SendMessagesResponse:
    response = messaging_pb2.SendMessagesResponse(
        queue=checks.queue_pb(broker, topic, queue_id), store_timestamp_ms=result.store_timestamp
    )
    add = response.entries.add  # twice as fast as building entries and passing a list
    pairs = zip(msg_ids, offset_msg_ids(broker.store_host, result.physical_offsets), strict=True)
    if delayed:
        for msg_id, offset_id in pairs:
            add(msg_id=msg_id, offset_msg_id=offset_id, queue_id=queue_id)
    else:
        first = result.first_queue_offset
        for i, (msg_id, offset_id) in enumerate(pairs):
            add(msg_id=msg_id, offset_msg_id=offset_id, queue_id=queue_id, queue_offset=first + i)
    return response


def offset_msg_ids(store_host: str, physical_offsets: np.ndarray) -> list[str]:
    """:func:`rmq_spark.codec.record.offset_msg_id` for many offsets of one store host."""
    address, _ = encode_host(store_host)
    prefix = address.hex().upper()
    return [f"{prefix}{offset:016X}" for offset in physical_offsets.tolist()]


def born_host(peer: str) -> str:
    """The sender's address from gRPC's peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``);
    other transports (unix sockets) give :data:`UNKNOWN_BORN_HOST`."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        address = unquote(address)  # older gRPC versions percent-encode the brackets
        try:
            parse_host(address)
        except InvalidArgumentError:
            return UNKNOWN_BORN_HOST
        return address
    return UNKNOWN_BORN_HOST


class RoundRobin:
    """One counter per topic, like a RocketMQ producer's sendWhichQueue, but on the broker."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def next(self, topic: str) -> int:
        with self._lock:
            counter = self._counters.get(topic)
            if counter is None:
                counter = self._counters[topic] = itertools.count()
            return next(counter)


class UniqueIdGenerator:
    """Client-style message ids (UNIQ_KEY): 32 upper-case hex characters, unique.

    Layout, like RocketMQ's MessageClientIDSetter: a fixed prefix of the store IP (4 bytes),
    the process id (2 bytes) and 2 random bytes, then the time in seconds (4 bytes) and a
    counter (4 bytes) that starts at a random value and wraps.
    """

    def __init__(self, store_host: str) -> None:
        address, _ = encode_host(store_host)
        ip = address[:-4][-4:]  # the IPv4 address, or the last 4 bytes of an IPv6 one
        prefix = ip + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.randbytes(2)
        self._prefix = prefix.hex().upper()
        self._counter = random.getrandbits(32)
        self._lock = threading.Lock()

    def next_ids(self, count: int) -> list[str]:
        with self._lock:
            start = self._counter
            self._counter = (start + count) & 0xFFFFFFFF
        head = f"{self._prefix}{int(time.time()) & 0xFFFFFFFF:08X}"
        return [f"{head}{(start + i) & 0xFFFFFFFF:08X}" for i in range(count)]


# -- PullMessages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _PullArgs:
    """A pull request, checked, with defaults and caps applied."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int
    tag_codes: list[int] | None
    suspend_ms: int
    commit_offset: int | None

    @classmethod
    def from_request(cls, request, broker: Broker) -> _PullArgs:
        config = broker.config
        mq, topic_config = checks.check_queue(broker, request.queue)
        assert topic_config is not None
        _check_readable(broker, topic_config, mq.queue_id)
        group = validate_group(request.consumer_group) if request.consumer_group else ""
        commit_offset = None
        if request.HasField("commit_offset"):
            commit_offset = checks.non_negative(request.commit_offset, "commit_offset")
            if not group:
                raise InvalidArgumentError(
                    "commit_offset is set but consumer_group is empty; name the group whose "
                    "offset to commit"
                )
        return cls(
            group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            offset=checks.non_negative(request.queue_offset, "queue_offset"),
            max_messages=checks.bounded(
                request.max_messages,
                "max_messages",
                DEFAULT_PULL_MESSAGES,
                config.max_pull_messages,
            ),
            max_bytes=checks.bounded(
                request.max_bytes, "max_bytes", DEFAULT_PULL_BYTES, config.max_pull_bytes
            ),
            tag_codes=parse_subscription(request.subscription_expression).tag_codes,
            suspend_ms=min(
                checks.non_negative(request.suspend_timeout_ms, "suspend_timeout_ms"),
                config.max_suspend_timeout_ms,
            ),
            commit_offset=commit_offset,
        )

    def read(self, store, offset: int) -> GetResult:
        return store.get_messages(
            self.topic, self.queue_id, offset, self.max_messages, self.max_bytes, self.tag_codes
        )


def _check_readable(broker: Broker, config: TopicConfig, queue_id: int) -> None:
    if not broker.config.broker_perm & Permission.READ:
        raise PermissionDeniedError(
            f"broker {broker.name!r} is write-only (perm {broker.config.broker_perm}); "
            "read from another broker"
        )
    if not config.is_readable:
        raise PermissionDeniedError(
            f"topic {config.name!r} is not readable (perm {config.perm}); update it with "
            "perm 6 to allow reads"
        )
    if queue_id >= config.read_queue_nums:
        raise NotFoundError(
            f"topic {config.name!r} has {config.read_queue_nums} read queues "
            f"(0..{config.read_queue_nums - 1}); queue {queue_id} is not readable"
        )


def _pull_response(result: GetResult) -> messaging_pb2.PullMessagesResponse:
    response = messaging_pb2.PullMessagesResponse(
        status=cast(messaging_pb2.PullStatus, pull_status_to_pb(result.status)),
        next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )
    if result.sizes is not None and result.queue_offsets is not None and len(result.sizes):
        response.records = result.data
        response.record_sizes.extend(result.sizes.tolist())
        response.queue_offsets.extend(result.queue_offsets.tolist())
    return response


# -- QueryOffsets and ViewMessage -----------------------------------------------------------


def _queue_offsets(broker: Broker, mq, timestamp: int | None) -> messaging_pb2.QueueOffsets:
    store = broker.store
    answer = messaging_pb2.QueueOffsets(
        queue=checks.queue_pb(broker, mq.topic, mq.queue_id),
        min_offset=store.min_offset(mq.topic, mq.queue_id),
        max_offset=store.max_offset(mq.topic, mq.queue_id),
    )
    if timestamp is not None:
        answer.timestamp_offset = store.offset_by_timestamp(mq.topic, mq.queue_id, timestamp)
    return answer


def _physical_offset(broker: Broker, ref) -> int:
    """The physical offset a MessageRef names, on this broker."""
    kind = ref.WhichOneof("ref")
    if kind == "physical_offset":
        return checks.non_negative(ref.physical_offset, "physical_offset")
    if kind != "offset_msg_id":
        raise InvalidArgumentError("message names no record; set offset_msg_id or physical_offset")
    host, physical = parse_offset_msg_id(ref.offset_msg_id)
    if encode_host(host) != encode_host(broker.store_host):  # packed: one spelling per address
        raise NotFoundError(
            f"offset message id {ref.offset_msg_id} names store host {host}, but this broker "
            f"({broker.name!r}) stores as {broker.store_host}; ask that broker"
        )
    return checks.non_negative(physical, "physical offset of offset_msg_id")


def _read_record(broker: Broker, physical: int) -> bytes:
    record = broker.store.read_record(physical)
    # A record always carries its own position; anything else is bytes inside another one.
    stored = int.from_bytes(record[POS_PHYSICALOFFSET : POS_PHYSICALOFFSET + 8], "big", signed=True)
    if len(record) < MIN_RECORD_BYTES or stored != physical:
        raise NotFoundError(f"no message starts at physical offset {physical}")
    return record
