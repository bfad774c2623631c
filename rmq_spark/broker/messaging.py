"""MessagingService: writes and reads of the message log (docs/protocol.md, "Messaging").

The servicer checks requests, calls the store or :class:`~rmq_spark.broker.core.Broker`, and
builds answers; the conversions live in the small functions below it.
"""

from __future__ import annotations

import asyncio
import functools
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
from rmq_spark.broker.status import Workers, blocking, waiting
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
RESERVED_PROPERTIES = props.RESERVED_PROPERTIES
DEFAULT_PULL_MESSAGES = 32  # RocketMQ's pullBatchSize default
DEFAULT_PULL_BYTES = 4 << 20
UNKNOWN_BORN_HOST = "127.0.0.1:0"
MIN_RECORD_BYTES = FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST  # empty body, topic and properties


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)

    @blocking
    def SendMessages(self, request, context):
        broker = self._broker
        topic = checks.sendable_topic(request.topic)
        delay_levels = len(broker.config.delay_levels_ms)
        columnar = request.HasField("columns")
        batch: _SendBatch | ColumnBatch
        if columnar:
            if request.messages:
                raise InvalidArgumentError(
                    f"the request has both messages ({len(request.messages)}) and columns; "
                    "send a batch as one or the other"
                )
            batch = ColumnBatch.from_request(request, delay_levels, broker.config.max_message_bytes)
            encoded = batch.properties
        else:
            batch = _SendBatch.from_request(request, delay_levels)
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
        if columnar:
            return self._columns_response(topic, queue_id, result, delayed=bool(batch.delay_level))
        return _send_response(
            broker, topic, queue_id, msg_ids, result, delayed=bool(batch.delay_level)
        )

    @waiting
    async def PullMessages(self, request, context):
        pull, result = await self._workers.run(self._pull_once, request)
        if result.status == PullStatus.NO_NEW_MSG and pull.suspend_ms > 0:
            result = await self._hold(pull, result)
        if result.count:
            return await self._workers.run(_pull_response, result)
        return _pull_response(result)

    def _pull_once(self, request) -> tuple[_PullArgs, GetResult]:
        store = self._broker.store
        pull = _PullArgs.from_request(request, self._broker)
        if pull.commit_offset is not None:
            store.offsets.commit(
                pull.group, pull.topic, {pull.queue_id: pull.commit_offset}, increase_only=True
            )
        return pull, pull.read(store, pull.offset)

    @blocking
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

    @blocking
    def ViewMessage(self, request, context):
        physical = _physical_offset(self._broker, request.message)
        return messaging_pb2.ViewMessageResponse(record=_read_record(self._broker, physical))

    @blocking
    def ConsumerSendBack(self, request, context):
        return retry.send_back(self._broker, request, context)

    # -- helpers that need the servicer's state ---------------------------------------------

    def _columns_response(
        self, topic: str, queue_id: int, result, *, delayed: bool
    ) -> messaging_pb2.SendMessagesResponse:
        broker = self._broker
        response = messaging_pb2.SendMessagesResponse(
            queue=checks.queue_pb(broker, topic, queue_id),
            store_timestamp_ms=result.store_timestamp,
        )
        answer = response.columns_result
        if not delayed:
            answer.first_queue_offset = result.first_queue_offset
        answer.physical_offsets.extend(result.physical_offsets.tolist())
        answer.offset_msg_id_prefix = self._offset_msg_id_prefix
        return response

    @functools.cached_property
    def _offset_msg_id_prefix(self) -> str:
        address, _ = encode_host(self._broker.store_host)
        return address.hex().upper()

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

    async def _hold(self, pull: _PullArgs, result: GetResult) -> GetResult:
        """Long polling: wait for a message that passes the filter, up to the suspend time.

        The wait holds no thread: it is a future on the event loop, woken by the write path
        (a cancelled call simply stops waiting). Arrivals that the tag filter rejects do not
        end the wait (RocketMQ's hold service does the same); the answer then moves
        next_begin_offset past them.
        """
        store, notifier = self._broker.store, self._broker.notifier
        topic, queue_id = pull.topic, pull.queue_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + pull.suspend_ms / 1000
        offset = pull.offset
        while True:

            def arrived(offset=offset) -> bool:
                return store.max_offset(topic, queue_id) > offset

            if not await notifier.wait(topic, queue_id, deadline - loop.time(), arrived):
                return result
            result = await self._workers.run(pull.read, store, offset)
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
        _check_delay_level(request.delay_level, delay_levels)
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


def _check_delay_level(level: int, levels: int) -> None:
    if not 0 <= level <= levels:
        raise InvalidArgumentError(
            f"delay_level={level} is out of range: use 0 (no delay) or 1..{levels}"
        )


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


# -- SendMessages with columns ------------------------------------------------------------

#: batches from this many messages have their property blobs checked with numpy
VECTOR_CHECK_MIN = 48
#: system properties a columnar sender writes into its property blobs itself
SENDER_PROPERTIES = (props.TAGS, props.KEYS, props.UNIQ_KEY)
#: the other reserved names: the broker's own, refused in a columnar send
BROKER_PROPERTIES = RESERVED_PROPERTIES.difference(SENDER_PROPERTIES)


def _name_code(name: str) -> int:
    """The first 8 bytes of a property name as a little-endian integer, zero padded."""
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little")


#: ``_NAME_MASKS[k]`` keeps the first k bytes of a little-endian 8-byte word (k = 0..8)
_NAME_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_TAGS_CODE = np.uint64(_name_code(props.TAGS))
_KEYS_CODE = np.uint64(_name_code(props.KEYS))
_UNIQ_KEY_CODE = np.uint64(_name_code(props.UNIQ_KEY))
_BROKER_CODES = np.array(sorted(map(_name_code, BROKER_PROPERTIES)), dtype=np.uint64)


@dataclass
class ColumnBatch:
    """The messages of a send request in columns, checked, as the store's append takes them.

    Nothing here runs Python code per message except cutting the two byte columns into
    per-message slices (the store takes a sequence of bodies and one of property blobs):
    sizes, limits, tags and the property blobs are checked with numpy over whole columns
    (:func:`suspect_property_blobs`), and only messages that fail those checks are looked
    at one by one (:func:`check_property_blob`), to name the message and say what is wrong.
    """

    bodies: list[bytes]
    properties: list[bytes]
    tags: list[str | None]
    born_timestamps: np.ndarray | int
    flags: np.ndarray | int
    delay_level: int

    @classmethod
    def from_request(cls, request, delay_levels: int, max_body_bytes: int) -> ColumnBatch:
        _check_delay_level(request.delay_level, delay_levels)
        columns = request.columns
        body_sizes = np.asarray(columns.body_sizes, dtype=np.int64)
        n = len(body_sizes)
        if n == 0:
            raise InvalidArgumentError(
                "columns.body_sizes is empty; a send needs at least one message"
            )
        prop_sizes = np.asarray(columns.properties_sizes, dtype=np.int64)
        if len(prop_sizes) != n:
            raise InvalidArgumentError(
                f"columns.properties_sizes has {len(prop_sizes)} sizes for {n} messages "
                "(columns.body_sizes); give one per message"
            )
        bodies = columns.bodies
        blobs = columns.properties
        body_ends = _column_ends("body_sizes", body_sizes, len(bodies), "bodies", max_body_bytes)
        prop_ends = _column_ends(
            "properties_sizes", prop_sizes, len(blobs), "properties", props.MAX_PROPERTIES_BYTES
        )
        tag_values, tag_indexes = _column_tags(columns, n)
        check_property_columns(blobs, prop_sizes, prop_ends, tag_values, tag_indexes)
        if tag_indexes is None:
            tags = [tag_values[0] or None if tag_values else None] * n
        else:
            table = [value or None for value in tag_values]
            tags = list(map(table.__getitem__, tag_indexes.tolist()))
        return cls(
            bodies=_cut(bodies, body_ends),
            properties=_cut(blobs, prop_ends),
            tags=tags,
            born_timestamps=_column_born(columns, n),
            flags=_optional_column("flags", columns.flags, n, np.int32),
            delay_level=request.delay_level,
        )


def _column_ends(field: str, sizes: np.ndarray, total: int, data_field: str, limit: int):
    """End offsets of the items of a byte column, after checking the sizes against it."""
    if (sizes < 0).any():
        i = int(np.argmax(sizes < 0))
        raise InvalidArgumentError(f"columns.{field}[{i}]={int(sizes[i])} is negative")
    if (sizes > limit).any():
        i = int(np.argmax(sizes > limit))
        what = "body" if data_field == "bodies" else "properties"
        raise InvalidArgumentError(
            f"columns.{field}[{i}]={int(sizes[i])}: message {i}'s {what} exceed(s) the limit "
            f"of {limit} bytes"
        )
    ends = np.cumsum(sizes)
    if int(ends[-1]) != total:
        raise InvalidArgumentError(
            f"columns.{field} add up to {int(ends[-1])} bytes but columns.{data_field} has "
            f"{total}; the sizes must cover it exactly"
        )
    return ends


def _cut(data: bytes, ends: np.ndarray) -> list[bytes]:
    """``data`` cut at ``ends``: one bytes object per item (a list comprehension over
    slices is the cheapest way CPython has; a memoryview per item costs more)."""
    stops = ends.tolist()
    return [data[start:stop] for start, stop in zip([0, *stops[:-1]], stops, strict=True)]


def _column_tags(columns, n: int) -> tuple[list[str], np.ndarray | None]:
    """The distinct tags and each message's index into them (None: all use the first)."""
    values = list(columns.tags)
    if not columns.tag_indexes:
        if len(values) > 1:
            raise InvalidArgumentError(
                f"columns.tags has {len(values)} values but columns.tag_indexes is empty; "
                "give each message's index into tags (or send one tag value)"
            )
        return values, None
    indexes = np.asarray(columns.tag_indexes, dtype=np.int64)
    if len(indexes) != n:
        raise InvalidArgumentError(
            f"columns.tag_indexes has {len(indexes)} values for {n} messages; give one "
            "per message, or none when every message has the same tag"
        )
    bad = (indexes < 0) | (indexes >= len(values))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArgumentError(
            f"columns.tag_indexes[{i}]={int(indexes[i])} is out of range: columns.tags has "
            f"{len(values)} values"
        )
    return values, indexes


def _optional_column(field: str, values, n: int, dtype) -> np.ndarray | int:
    """A per-message number column: empty = 0 for every message."""
    if not values:
        return 0
    array = np.asarray(values, dtype=dtype)
    if len(array) != n:
        raise InvalidArgumentError(
            f"columns.{field} has {len(array)} values for {n} messages; give one per "
            "message, or none"
        )
    return array


def _column_born(columns, n: int) -> np.ndarray | int:
    now = time.time_ns() // 1_000_000
    if not columns.born_timestamps_ms:
        born = columns.born_timestamp_ms
        if born < 0:
            raise InvalidArgumentError(
                f"columns.born_timestamp_ms={born} is negative; use epoch milliseconds, or 0 "
                "for the broker's receive time"
            )
        return born or now
    array = _optional_column("born_timestamps_ms", columns.born_timestamps_ms, n, np.int64)
    assert isinstance(array, np.ndarray)
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise InvalidArgumentError(
            f"columns.born_timestamps_ms[{i}]={int(array[i])} is negative; use epoch "
            "milliseconds, or 0 for the broker's receive time"
        )
    array[array == 0] = now
    return array


def check_property_columns(
    data: bytes,
    sizes: np.ndarray,
    ends: np.ndarray,
    tag_values: Sequence[str],
    tag_indexes: np.ndarray | None,
) -> None:
    """Raise InvalidArgumentError naming the first message whose property blob is bad.

    The rules are :func:`check_property_blob`'s; this finds the suspects without a Python
    loop and runs that function on them only. Below :data:`VECTOR_CHECK_MIN` messages it
    runs it on every message: the ~35 numpy calls cost ~100 µs whatever the size, the
    function ~2 µs a message (measured).
    """
    if len(sizes) < VECTOR_CHECK_MIN:
        suspects = None  # fewer messages than numpy's fixed cost is worth: check each
    else:
        suspects = suspect_property_blobs(data, sizes, ends, tag_values, tag_indexes)
    malformed = suspects is None and len(sizes) >= VECTOR_CHECK_MIN
    if suspects is None:  # malformed somewhere: the exact check says where
        suspects = np.arange(len(sizes))
    starts = (ends - sizes).tolist()
    for i in suspects.tolist():
        if tag_indexes is not None:
            tag = tag_values[int(tag_indexes[i])]
        else:
            tag = tag_values[0] if tag_values else ""
        with checks.item(f"columns.properties of message {i}"):
            check_property_blob(data[starts[i] : starts[i] + int(sizes[i])], tag)
    if malformed:  # the two checks disagree: refuse rather than store what one refused
        raise InvalidArgumentError("columns.properties is malformed")


def check_property_blob(blob: bytes, tag: str) -> None:
    """The rules for one message's encoded properties in a columnar send (the reference)."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"properties are not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    if not text.endswith(props.PROPERTY_SEPARATOR):
        raise InvalidArgumentError(
            f"properties {text[:80]!r} do not end with \\x02; encode each property as "
            "name\\x01value\\x02 (every message needs at least UNIQ_KEY)"
        )
    system: dict[str, str] = {}
    for item in text[:-1].split(props.PROPERTY_SEPARATOR):
        name, separator, value = item.partition(props.NAME_VALUE_SEPARATOR)
        if not separator or props.NAME_VALUE_SEPARATOR in value:
            raise InvalidArgumentError(
                f"property {item[:80]!r} is not name\\x01value: it holds "
                f"{item.count(props.NAME_VALUE_SEPARATOR)} \\x01 separators"
            )
        if not name:
            raise InvalidArgumentError(f"property ={value[:80]!r} has an empty name")
        if name in BROKER_PROPERTIES:
            raise InvalidArgumentError(
                f"property name {name} is reserved: the broker sets it (use the request's "
                "delay_level for a delay)"
            )
        if name in SENDER_PROPERTIES:
            if name in system:
                raise InvalidArgumentError(f"property {name} is set twice")
            system[name] = value
    stored_tag = system.get(props.TAGS)
    if stored_tag != (tag or None):
        raise InvalidArgumentError(
            f"TAGS property {stored_tag!r} does not match the message's tag {tag!r} in "
            "columns.tags; set TAGS to the tag, or leave it out when the tag is empty"
        )
    if not system.get(props.UNIQ_KEY):
        raise InvalidArgumentError(
            "UNIQ_KEY is missing or empty: a message sent in columns carries its own "
            "client message id"
        )


def suspect_property_blobs(
    data: bytes,
    sizes: np.ndarray,
    ends: np.ndarray,
    tag_values: Sequence[str],
    tag_indexes: np.ndarray | None,
) -> np.ndarray | None:
    """Indexes of the messages that may break :func:`check_property_blob`'s rules, found
    with numpy over the whole column; None when the column is malformed somewhere.

    Conservative: every bad message is a suspect, a few good ones may be (a user property
    whose name shares the first 8 bytes and the length of a reserved one).
    """
    n = len(sizes)
    try:
        data.decode("utf-8")  # blobs end in \x02, so each is valid when the whole is
    except UnicodeDecodeError:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    # Every separator, in order: each property is name \x01 value \x02, so they alternate.
    marks = np.flatnonzero(buf <= 2)
    kinds = buf[marks]
    if not kinds.all():  # NUL bytes are text, not separators
        marks, kinds = marks[kinds != 0], kinds[kinds != 0]
    if len(kinds) % 2 or not ((kinds[0::2] == 1).all() and (kinds[1::2] == 2).all()):
        return None
    ones, twos = marks[0::2], marks[1::2]
    count = len(twos)
    filled = sizes > 0
    # Each blob must end with a \x02 (and so start at a property); at least UNIQ_KEY.
    if count == 0 or not filled.all() or (buf[ends - 1] != 2).any():
        return None
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = twos[:-1] + 1
    name_lens = ones - starts
    if not name_lens.all():
        return None
    # The first 8 bytes at each property start, as one little-endian word per property.
    padded = np.zeros(len(buf) + 8, dtype=np.uint8)
    padded[: len(buf)] = buf
    words = np.ndarray((len(buf),), dtype="<u8", buffer=padded, strides=(1,))
    codes = words[starts] & _NAME_MASKS[np.minimum(name_lens, 8)]
    owner = np.searchsorted(ends, starts, side="right")  # message of each property
    bad_props = np.isin(codes, _BROKER_CODES)
    is_uniq = (codes == _UNIQ_KEY_CODE) & (name_lens == 8)
    bad_props |= is_uniq & (twos == ones + 1)  # an empty UNIQ_KEY
    is_tags = (codes == _TAGS_CODE) & (name_lens == 4)
    is_keys = (codes == _KEYS_CODE) & (name_lens == 4)
    bad = np.bincount(owner[is_uniq], minlength=n) != 1
    bad |= np.bincount(owner[is_keys], minlength=n) > 1
    # TAGS: exactly one per tagged message, none elsewhere, and with the tag as its value.
    encoded_tags = [value.encode() for value in tag_values]
    tag_lens = np.array([len(value) for value in encoded_tags] or [0], dtype=np.int64)
    wanted = tag_lens[tag_indexes] if tag_indexes is not None else np.full(n, tag_lens[0])
    bad |= np.bincount(owner[is_tags], minlength=n) != (wanted > 0)
    tagged = owner[is_tags]
    value_starts = ones[is_tags] + 1
    value_lens = twos[is_tags] - value_starts
    same_len = value_lens == wanted[tagged]
    bad[tagged[~same_len]] = True
    tagged, value_starts = tagged[same_len], value_starts[same_len]
    value_lens = value_lens[same_len]
    if len(tagged):
        if tag_indexes is None:
            expected = np.frombuffer(encoded_tags[0] * len(tagged), dtype=np.uint8)
        else:
            picked = tag_indexes[tagged].tolist()
            expected = np.frombuffer(
                b"".join(map(encoded_tags.__getitem__, picked)), dtype=np.uint8
            )
        value_ends = np.cumsum(value_lens)
        positions = np.repeat(value_starts - (value_ends - value_lens), value_lens)
        positions += np.arange(len(positions))
        differ = np.flatnonzero(buf[positions] != expected)
        if len(differ):
            bad[tagged[np.searchsorted(value_ends, differ, side="right")]] = True
    if bad_props.any():
        bad[owner[bad_props]] = True
    return np.flatnonzero(bad)


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
