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

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.structs import MessageQueue

__all__ = ["Message", "SendResult", "new_unique_key", "split_by_size", "to_message"]


class _UniqueKeys:
    """RocketMQ's MessageClientIDSetter layout, 16 bytes as 32 upper-case hex characters.

    ip (4) + pid (2) + random instance tag (4; RocketMQ uses a class-loader hash) + ms since
    the start of the month (4) + a counter (2). The first 10 bytes are fixed per process, so
    ids from one producer share a prefix and sort roughly by time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(random.randrange(1 << 16))
        self._prefix = b""
        self._pid = -1

    def _fixed_prefix(self) -> bytes:
        pid = os.getpid()
        if pid != self._pid:  # a forked child (e.g. a Spark worker) gets its own prefix
            self._pid = pid
            self._prefix = _local_ipv4() + struct.pack(">HI", pid & 0xFFFF, random.getrandbits(32))
        return self._prefix

    def next(self) -> str:
        now = time.time()
        month = time.gmtime(now)
        month_start = calendar.timegm((month.tm_year, month.tm_mon, 1, 0, 0, 0))
        elapsed_ms = int((now - month_start) * 1000) & 0xFFFFFFFF
        with self._lock:
            prefix = self._fixed_prefix()
            counter = next(self._counter) & 0xFFFF
        return (prefix + struct.pack(">IH", elapsed_ms, counter)).hex().upper()


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


_UNIQUE_KEYS = _UniqueKeys()


def new_unique_key() -> str:
    """A fresh client message id: 32 upper-case hex characters, unique per process and time.

    >>> len(new_unique_key()), new_unique_key() != new_unique_key()
    (32, True)
    """
    return _UNIQUE_KEYS.next()


def _normalize_keys(keys: str | Iterable[str] | None) -> tuple[str, ...]:
    if keys is None:
        return ()
    # RocketMQ stores KEYS space separated, so "k1 k2" is two keys either way.
    items = keys.split() if isinstance(keys, str) else list(keys)
    for key in items:
        if not isinstance(key, str) or not key or any(c.isspace() for c in key):
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
        if tags is not None and not isinstance(tags, str):
            raise InvalidArgumentError(f"message tags {tags!r} must be a string or None")
        if tags and ("||" in tags or tags.strip() != tags):
            raise InvalidArgumentError(
                f"message tag {tags!r} must not contain '||' or surrounding spaces "
                "(subscriptions could never match it)"
            )
        self.body = _as_body(body)
        self.tags = tags or None
        self.keys = _normalize_keys(keys)
        self.properties = dict(properties or {})
        self.unique_key = unique_key or new_unique_key()
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
    messages: Sequence[messaging_pb2.Message], max_bytes: int
) -> Iterator[Sequence[messaging_pb2.Message]]:
    """Split encoded messages into runs whose encoded size stays under ``max_bytes``.

    A message larger than ``max_bytes`` alone makes a run of its own (the broker then refuses
    it with a clear error rather than the client guessing its limit).

    >>> small = [messaging_pb2.Message(body=b"x" * 10)] * 5
    >>> [len(run) for run in split_by_size(small, 40)]
    [2, 2, 1]
    """
    start, size = 0, 0
    for i, message in enumerate(messages):
        # Field tag + length prefix of each repeated entry: at most 6 bytes.
        item = message.ByteSize() + 6
        if i > start and size + item > max_bytes:
            yield messages[start:i]
            start, size = i, 0
        size += item
    if start < len(messages):
        yield messages[start:]
