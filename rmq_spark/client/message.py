"""What a producer sends (:class:`Message`) and what it gets back (:class:`SendResult`).

Messages get their client message id (RocketMQ's ``UNIQ_KEY``) when they are created, not
when they are sent, so a message retried on another broker keeps one id: consumers
deduplicate on it.
"""

from __future__ import annotations

import calendar
import itertools
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from rmq_spark.clock import now_ms
from rmq_spark.codec.hex_ids import hex_ids
from rmq_spark.codec.properties import (
    MAX_PROPERTIES_BYTES,
    RESERVED_PROPERTIES,
    empty_value_message,
)
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

__all__ = [
    "ColumnsChunk",
    "Message",
    "SendResult",
    "encode_columns",
    "new_unique_key",
    "new_unique_keys",
    "split_by_size",
    "to_message",
]


class _UniqueKeys:
    """RocketMQ's MessageClientIDSetter layout, 16 bytes as 32 upper-case hex characters.

    ip (4) + pid (2) + random instance tag (4; RocketMQ uses a class-loader hash) + ms since
    the start of the month (4) + a counter (2). The first 10 bytes are fixed per process, so
    ids from one producer share a prefix and sort roughly by time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(random.randrange(1 << 16))
        self._prefix = ""  # the fixed 10 bytes as hex; made on first use (it looks up the IP)
        self._pid = -1
        self._month_ms = (0, 0)  # start and end of the current month, epoch milliseconds
        # (epoch ms, id up to the counter) of the latest millisecond: one tuple, replaced
        # whole, so threads never see a time with another millisecond's text
        self._head = (-1, "")

    def next(self) -> str:
        ms = now_ms()
        cached_ms, head = self._head
        if ms != cached_ms:
            head = self._new_head(ms)
        # next() on itertools.count is atomic in CPython: no lock on this hot path.
        return head + "%04X" % (next(self._counter) & 0xFFFF)

    def next_many(self, count: int) -> list[str]:
        """``count`` ids, as ``count`` calls of :meth:`next` give; a millisecond's head
        serves at most :data:`_IDS_PER_HEAD` of them, so the 16-bit counter never wraps
        onto an id of the same millisecond within one call."""
        keys: list[str] = []
        last_ms = -1
        while len(keys) < count:
            ms = now_ms()
            if ms == last_ms:  # this millisecond gave its share: wait for the next one
                time.sleep(0.0002)
                continue
            cached_ms, head = self._head
            if ms != cached_ms:
                head = self._new_head(ms)
            take = min(count - len(keys), _IDS_PER_HEAD)
            counters = np.fromiter(itertools.islice(self._counter, take), np.int64, take)
            keys += hex_ids(head, counters & 0xFFFF, 4)
            last_ms = ms
        return keys

    def _new_head(self, ms: int) -> str:
        pid = os.getpid()
        if pid != self._pid:  # a forked child (e.g. a Spark worker) gets its own prefix
            with self._lock:
                fixed = _local_ipv4() + struct.pack(">HI", pid & 0xFFFF, random.getrandbits(32))
                self._prefix = fixed.hex().upper()
                self._pid = pid
        start, end = self._month_ms
        if not start <= ms < end:
            month = time.gmtime(ms // 1000)
            start = calendar.timegm((month.tm_year, month.tm_mon, 1, 0, 0, 0)) * 1000
            following = (month.tm_year + month.tm_mon // 12, month.tm_mon % 12 + 1, 1, 0, 0, 0)
            self._month_ms = (start, calendar.timegm(following) * 1000)
        head = f"{self._prefix}{(ms - start) & 0xFFFFFFFF:08X}"
        self._head = (ms, head)
        return head


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


#: ids one call of _UniqueKeys.next_many takes from one millisecond's head
_IDS_PER_HEAD = 1 << 15
_UNIQUE_KEYS = _UniqueKeys()


def new_unique_key() -> str:
    """A fresh client message id: 32 upper-case hex characters, unique per process and time.

    >>> len(new_unique_key()), new_unique_key() != new_unique_key()
    (32, True)
    """
    return _UNIQUE_KEYS.next()


def new_unique_keys(count: int) -> list[str]:
    """``count`` fresh client message ids at once, as ``count`` calls of
    :func:`new_unique_key` would make them, for a fraction of the cost.

    >>> keys = new_unique_keys(3)
    >>> len(set(keys)), len(keys[0])
    (3, 32)
    """
    return _UNIQUE_KEYS.next_many(count)


def _normalize_keys(keys: str | Iterable[str] | None) -> tuple[str, ...]:
    if keys is None:
        return ()
    # RocketMQ stores KEYS space separated, so "k1 k2" is two keys either way.
    items = keys.split() if isinstance(keys, str) else list(keys)
    for key in items:
        # str.split() drops whitespace and empty strings: it returns [key] for a good key.
        if not isinstance(key, str) or key.split() != [key]:
            raise InvalidArgumentError(
                f"message key {key!r} must be a non-empty string without spaces "
                "(keys are stored space separated)"
            )
    return tuple(items)


def _as_body(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    raise InvalidArgumentError(
        f"message body must be bytes (or str, sent as UTF-8), got {type(body).__name__}"
    )


@dataclass(init=False)
class Message:
    """One message to send.

    ``body`` may be bytes or str (sent as UTF-8); ``keys`` a list or one space-separated
    string; ``properties`` are user properties (system names such as TAGS or UNIQ_KEY are
    refused by the broker); ``unique_key`` is generated if not given and kept across send
    retries. Fields hold the normalized values.

    >>> m = Message(b"hello", tags="TagA", keys="order-1 user-7")
    >>> m.keys, len(m.unique_key)
    (('order-1', 'user-7'), 32)
    """

    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    properties: dict[str, str]
    unique_key: str
    #: application flag, stored in the record's FLAG field
    flag: int
    #: creation time, producer's clock; 0 = stamped when sent
    born_timestamp_ms: int

    def __init__(
        self,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        unique_key: str = "",
        flag: int = 0,
        born_timestamp_ms: int = 0,
    ) -> None:
        if tags is not None:
            if not isinstance(tags, str):
                raise InvalidArgumentError(f"message tags {tags!r} must be a string or None")
            if tags and ("||" in tags or tags.strip() != tags):
                raise InvalidArgumentError(
                    f"message tag {tags!r} must not contain '||' or surrounding spaces "
                    "(subscriptions could never match it)"
                )
        # Messages are made per message sent: the common cases skip the helper calls.
        self.body = body if type(body) is bytes else _as_body(body)
        self.tags = tags or None
        self.keys = _normalize_keys(keys) if keys is not None else ()
        self.properties = dict(properties) if properties else {}
        if "" in self.properties.values():
            raise InvalidArgumentError(empty_value_message(self.properties))
        self.unique_key = unique_key or _UNIQUE_KEYS.next()
        self.flag = flag
        self.born_timestamp_ms = born_timestamp_ms

    def to_pb(self, now_ms: int) -> messaging_pb2.Message:
        return messaging_pb2.Message(
            body=self.body,
            tags=self.tags or "",
            keys=self.keys,
            properties=self.properties,
            born_timestamp_ms=self.born_timestamp_ms or now_ms,
            flag=self.flag,
            unique_key=self.unique_key,
        )


def to_message(item: Message | bytes | str | Sequence[Any] | Mapping[str, Any]) -> Message:
    """Accept a Message, a body, a ``(body, tags, keys, properties)`` tuple or a dict.

    >>> to_message((b"x", "TagA")).tags
    'TagA'
    """
    if type(item) is tuple and 1 <= len(item) <= 4:  # the common case, before ABC checks
        return Message(*item)
    if isinstance(item, Message):
        return item
    if isinstance(item, bytes | bytearray | memoryview | str):
        return Message(item)
    if isinstance(item, Mapping):
        return Message(**item)
    if isinstance(item, Sequence) and 1 <= len(item) <= 4:
        return Message(*item)
    raise InvalidArgumentError(
        f"cannot make a message of {type(item).__name__} {item!r:.80}; pass a Message, "
        "bytes, or a (body, tags, keys, properties) tuple"
    )


class SendResult(NamedTuple):
    """Where one message was stored.

    ``msg_id`` is the client message id (UNIQ_KEY); ``offset_msg_id`` names the stored
    record (store host + commit-log position); ``queue_offset`` is None for a delayed message
    until it is delivered.
    """

    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int | None
    store_timestamp_ms: int = 0


def split_by_size(
    messages: Sequence[messaging_pb2.Message], max_bytes: int, per_message_bytes: int = 6
) -> Iterator[Sequence[messaging_pb2.Message]]:
    """Split encoded messages into runs whose encoded size stays under ``max_bytes``.

    A message larger than ``max_bytes`` alone makes a run of its own (the broker then refuses
    it with a clear error rather than the client guessing its limit). Each message counts
    ``per_message_bytes`` besides its encoding (default: its field tag and length prefix).

    >>> small = [messaging_pb2.Message(body=b"x" * 10)] * 5
    >>> [len(run) for run in split_by_size(small, 40)]
    [2, 2, 1]
    """
    start, size = 0, 0
    for i, message in enumerate(messages):
        item = message.ByteSize() + per_message_bytes
        if i > start and size + item > max_bytes:
            yield messages[start:i]
            start, size = i, 0
        size += item
    if start < len(messages):
        yield messages[start:]


# -- columnar batches -----------------------------------------------------------------------

#: ``TAGS\x01{tag}\x02`` per tag seen lately ("" for no tag): the start of a property blob
_TAG_HEADS: dict[str | None, str] = {None: "", "": ""}
_MAX_TAG_HEADS = 4096
#: a columnar chunk's bytes besides bodies and properties: sizes, index, time, flag
_COLUMN_OVERHEAD_BYTES = 32


@dataclass
class ColumnsChunk:
    """Part of a batch encoded as one ``MessageColumns``, with what the results need."""

    columns: messaging_pb2.MessageColumns
    unique_keys: list[str]
    messages: Sequence[Message]  # to re-encode one by one for a broker without columns
    now_ms: int


def _tag_head(tag: str) -> str:
    if len(_TAG_HEADS) > _MAX_TAG_HEADS:  # many distinct tags: keep the cache bounded
        _TAG_HEADS.clear()
        _TAG_HEADS.update({None: "", "": ""})
    head = _TAG_HEADS[tag] = f"TAGS\x01{tag}\x02"
    return head


def _plain_properties(properties: Mapping[str, str]) -> bool:
    """True when user properties are non-empty strings with names the broker accepts."""
    return RESERVED_PROPERTIES.isdisjoint(properties) and all(
        type(name) is str and name and type(value) is str for name, value in properties.items()
    )


def encode_columns(
    messages: Sequence[Message],
    now_ms: int,
    max_bytes: int,
    per_message_bytes: int = _COLUMN_OVERHEAD_BYTES,
) -> list[ColumnsChunk] | None:
    """The messages as ``MessageColumns`` of at most about ``max_bytes`` each, in order;
    each message counts ``per_message_bytes`` besides its body and properties.

    Each message's properties are encoded as the broker stores them (TAGS, KEYS, UNIQ_KEY,
    then user properties): the same bytes the per-message ``Message`` encoding makes the
    broker write. None when a message needs that per-message encoding instead: reserved or
    non-string user properties, separator bytes in a value, properties over 32767 bytes, a
    lost unique key. The broker then refuses it with the usual error.
    """
    heads = _TAG_HEADS
    texts: list[str] = []
    append = texts.append
    extra = 0  # properties besides TAGS and UNIQ_KEY
    for message in messages:
        tag = message.tags
        head = heads.get(tag)
        if head is None:
            head = _tag_head(tag)  # type: ignore[arg-type]  # None is always cached
        keys = message.keys
        if keys:
            extra += 1
            text = f"{head}KEYS\x01{' '.join(keys)}\x02UNIQ_KEY\x01{message.unique_key}\x02"
        else:
            text = f"{head}UNIQ_KEY\x01{message.unique_key}\x02"
        user = message.properties
        if user:
            if not _plain_properties(user):
                return None
            extra += len(user)
            text += "".join([f"{name}\x01{value}\x02" for name, value in user.items()])
        append(text)
    n = len(texts)
    tags = [message.tags for message in messages]
    unique_keys = [message.unique_key for message in messages]
    joined = "".join(texts)
    expected = n + extra + n - tags.count(None) - tags.count("")
    if "" in unique_keys or not joined.count("\x01") == joined.count("\x02") == expected:
        return None
    try:
        properties = joined.encode()
    except UnicodeEncodeError:
        return None
    if len(properties) == len(joined):  # ASCII: characters are bytes
        properties_sizes = list(map(len, texts))
    else:
        properties_sizes = [len(text.encode()) for text in texts]
    if max(properties_sizes) > MAX_PROPERTIES_BYTES:
        return None
    bodies = [message.body for message in messages]
    body_sizes = list(map(len, bodies))
    borns = [message.born_timestamp_ms for message in messages]
    born_all = 0 if any(borns) else now_ms
    flags = [message.flag for message in messages]
    distinct = list(dict.fromkeys(tags))
    chunks = []
    for start, stop in _chunk_bounds(body_sizes, properties_sizes, max_bytes, per_message_bytes):
        columns = messaging_pb2.MessageColumns(
            body_sizes=body_sizes[start:stop],
            properties_sizes=properties_sizes[start:stop],
            born_timestamp_ms=born_all,
        )
        whole = start == 0 and stop == n
        columns.bodies = b"".join(bodies if whole else bodies[start:stop])
        if whole:
            columns.properties = properties
        else:
            offset = sum(properties_sizes[:start])
            columns.properties = properties[offset : offset + sum(properties_sizes[start:stop])]
        part_tags = tags if whole else tags[start:stop]
        values = distinct if whole else list(dict.fromkeys(part_tags))
        columns.tags.extend([value or "" for value in values])
        if len(values) > 1:
            index = {value: i for i, value in enumerate(values)}
            columns.tag_indexes.extend(map(index.__getitem__, part_tags))
        if not born_all:
            columns.born_timestamps_ms.extend([born or now_ms for born in borns[start:stop]])
        if any(flags[start:stop]):
            columns.flags.extend(flags[start:stop])
        chunks.append(
            ColumnsChunk(
                columns,
                unique_keys if whole else unique_keys[start:stop],
                messages[start:stop],
                now_ms,
            )
        )
    return chunks


def _chunk_bounds(
    body_sizes: list[int], properties_sizes: list[int], max_bytes: int, per_message_bytes: int
) -> list[tuple[int, int]]:
    """Runs of messages whose encoded size stays under ``max_bytes`` (one message at least)."""
    n = len(body_sizes)
    if sum(body_sizes) + sum(properties_sizes) + per_message_bytes * n <= max_bytes:
        return [(0, n)]
    bounds = []
    start, size = 0, 0
    for i, item in enumerate(map(sum, zip(body_sizes, properties_sizes, strict=True))):
        item += per_message_bytes
        if i > start and size + item > max_bytes:
            bounds.append((start, i))
            start, size = i, 0
        size += item
    bounds.append((start, n))
    return bounds
