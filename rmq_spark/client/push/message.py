"""The message a push consumer's listener receives (RocketMQ's MessageExt).

A pull brings a few hundred records as one Arrow batch. Turning every record into a
Python object with all its fields costs more than decoding the batch, and a listener often
reads only the body, or nothing. So a :class:`ReceivedMessage` made from a pull holds the
pull's shared :class:`PulledColumns` and its row; a field is read from that column, which
is converted to a Python list (all rows at once) the first time any message of the pull
asks for it. The push machinery itself reads offsets and sizes as numpy arrays
(:meth:`PulledColumns.offsets`), never through the messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.properties import RETRY_TOPIC, UNIQ_KEY
from rmq_spark.structs import MessageQueue

__all__ = ["PulledColumns", "ReceivedMessage", "messages_from_batch", "messages_of"]


def _map_values(batch: pa.RecordBatch, key: str) -> pa.Array:
    """Each row's value of property ``key`` (null where absent); the last one wins, as in a
    dict built from the properties."""
    return pc.map_lookup(batch.column("properties"), pa.scalar(key), "last")


def _topics(batch: pa.RecordBatch) -> list:
    # a redelivery from the retry topic reports the topic it was first sent to
    return pc.coalesce(_map_values(batch, RETRY_TOPIC), batch.column("topic")).to_pylist()


def _msg_ids(batch: pa.RecordBatch) -> list:
    # the client id (UNIQ_KEY), else the offset message id
    unique = _map_values(batch, UNIQ_KEY)
    usable = pc.fill_null(pc.not_equal(unique, ""), False)
    return pc.if_else(usable, unique, batch.column("msgId")).to_pylist()


def _properties(batch: pa.RecordBatch) -> list:
    return [dict(p) if p else {} for p in batch.column("properties").to_pylist()]


def _column(name: str) -> Callable[[pa.RecordBatch], list]:
    return lambda batch: batch.column(name).to_pylist()


#: field -> how its Python values are made from the pull batch, all rows at once
_BUILDERS: dict[str, Callable[[pa.RecordBatch], list]] = {
    "topic": _topics,
    "queue_offset": _column("queueOffset"),
    "msg_id": _msg_ids,
    "offset_msg_id": _column("msgId"),
    "tags": _column("tags"),
    "keys": _column("keys"),
    "body": _column("body"),
    "properties": _properties,
    "born_timestamp_ms": _column("bornTimestamp"),
    "store_timestamp_ms": _column("storeTimestamp"),
    "born_host": _column("bornHost"),
    "store_host": _column("storeHost"),
    "reconsume_times": _column("reconsumeTimes"),
    "commit_log_offset": _column("commitLogOffset"),
    "flag": _column("flag"),
}


class PulledColumns:
    """The fields of the messages of one pull, one Python list per field, each made on
    first use. ``message_queue`` is the queue they were read from."""

    def __init__(self, batch: pa.RecordBatch | None, message_queue: MessageQueue) -> None:
        self._batch = batch
        self._build_lock = threading.Lock()
        self.message_queue = message_queue

    def __getattr__(self, name: str) -> list:
        # called only for a field not made yet (made ones are plain instance attributes)
        build = _BUILDERS.get(name)
        if build is None or self._batch is None:
            raise AttributeError(name)
        with self._build_lock:  # two threads must not each make (and write to) a copy
            made = self.__dict__.get(name)
            if made is None:
                made = build(self._batch)
                setattr(self, name, made)
        return made

    @property
    def num_rows(self) -> int:
        return 0 if self._batch is None else self._batch.num_rows

    def offsets(self) -> np.ndarray:
        """The queue offsets, int64."""
        return _int64(self._batch, "queueOffset")  # type: ignore[arg-type]

    def body_sizes(self) -> np.ndarray:
        """The body sizes in bytes, int64."""
        body = self._batch.column("body")  # type: ignore[union-attr]
        if body.type == pa.binary() or body.type == pa.large_binary():
            # the differences of the value offsets (n + 1 of them from the array's start)
            width = np.int32 if body.type == pa.binary() else np.int64
            ends = np.frombuffer(body.buffers()[1], dtype=width)
            return np.diff(ends[body.offset : body.offset + len(body) + 1]).astype(np.int64)
        lengths = pc.fill_null(pc.binary_length(body), 0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64)


def _int64(batch: pa.RecordBatch, name: str) -> np.ndarray:
    return batch.column(name).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _field(name: str, doc: str) -> property:
    read = attrgetter(name)

    def get(self: ReceivedMessage) -> Any:
        return read(self._columns)[self._row]

    def set_(self: ReceivedMessage, value: Any) -> None:
        read(self._columns)[self._row] = value

    return property(get, set_, doc=doc)


class ReceivedMessage:
    """One delivered message.

    ``topic`` is the topic the consumer subscribed to, also for a message redelivered from
    the group's retry topic; ``message_queue`` is the queue it was read from (the retry
    queue for a redelivery). ``msg_id`` is the client message id (UNIQ_KEY), which stays the
    same across redeliveries and retries: de-duplicate on it. ``reconsume_times`` counts the
    earlier failed deliveries.

    Made with all its fields (in the order below), or by :func:`messages_from_batch` from
    a pull, reading its fields from the pull's columns when asked. Fields may be assigned.
    """

    __slots__ = ("_columns", "_row")
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    _columns: PulledColumns
    _row: int

    def __init__(
        self,
        topic: str,
        message_queue: MessageQueue,
        queue_offset: int,
        msg_id: str,
        offset_msg_id: str,
        tags: str | None,
        keys: str | None,
        body: bytes,
        properties: dict[str, str],
        born_timestamp_ms: int,
        store_timestamp_ms: int,
        born_host: str,
        store_host: str,
        reconsume_times: int,
        commit_log_offset: int,
        flag: int,
    ) -> None:
        columns = PulledColumns(None, message_queue)
        values = (
            topic,
            queue_offset,
            msg_id,
            offset_msg_id,
            tags,
            keys,
            body,
            properties,
            born_timestamp_ms,
            store_timestamp_ms,
            born_host,
            store_host,
            reconsume_times,
            commit_log_offset,
            flag,
        )
        for name, value in zip(_BUILDERS, values, strict=True):
            setattr(columns, name, [value])
        self._columns = columns
        self._row = 0

    topic = _field("topic", "The subscribed topic (the original one for a redelivery).")
    queue_offset = _field("queue_offset", "Position in :attr:`message_queue`.")
    msg_id = _field("msg_id", "Client message id (UNIQ_KEY), else :attr:`offset_msg_id`.")
    offset_msg_id = _field("offset_msg_id", "Store host + commit-log position, as hex.")
    tags = _field("tags", "The message's tag, or None.")
    keys = _field("keys", "The message's keys, space separated, or None.")
    body = _field("body", "The payload.")
    properties = _field("properties", "All properties, system ones included.")
    born_timestamp_ms = _field("born_timestamp_ms", "Creation time, producer's clock.")
    store_timestamp_ms = _field("store_timestamp_ms", "When the broker stored it.")
    born_host = _field("born_host", "Producer address, host:port.")
    store_host = _field("store_host", "Broker address, host:port.")
    reconsume_times = _field("reconsume_times", "Earlier failed deliveries.")
    commit_log_offset = _field("commit_log_offset", "Position in the broker's commit log.")
    flag = _field("flag", "The application flag the producer set.")

    @property
    def message_queue(self) -> MessageQueue:
        """The queue it was read from (the retry queue for a redelivery)."""
        return self._columns.message_queue

    @message_queue.setter
    def message_queue(self, mq: MessageQueue) -> None:
        if self._columns.num_rows:  # made from a pull: the queue is shared by its rows
            self._detach()
        self._columns.message_queue = mq

    @property
    def is_retry(self) -> bool:
        """True for a redelivery read from the group's retry topic."""
        return self.message_queue.topic != self.topic

    def _values(self) -> tuple:
        columns, row = self._columns, self._row
        return (columns.message_queue, *(getattr(columns, name)[row] for name in _BUILDERS))

    def _detach(self) -> None:
        """Give this message columns of its own."""
        mq, topic, *rest = self._values()
        ReceivedMessage.__init__(self, topic, mq, *rest)

    def __reduce__(self) -> tuple:
        # pickled (and copied) with its own fields, not the pull's columns and lock
        mq, topic, *rest = self._values()
        return (ReceivedMessage, (topic, mq, *rest))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        columns, row = self._columns, self._row
        shown = [f"{name}={getattr(columns, name)[row]!r}" for name in _BUILDERS]
        shown.insert(1, f"message_queue={columns.message_queue!r}")
        del shown[8]  # properties: long, and in no RocketMQ client's summary either
        return f"ReceivedMessage({', '.join(shown)})"


_new = object.__new__


def messages_from_batch(batch: pa.RecordBatch, mq: MessageQueue) -> list[ReceivedMessage]:
    """The rows of a decoded pull batch of ``mq`` as :class:`ReceivedMessage` objects that
    read their fields from the batch when asked (see :class:`PulledColumns`)."""
    return messages_of(PulledColumns(batch, mq))


def messages_of(columns: PulledColumns) -> list[ReceivedMessage]:
    """One :class:`ReceivedMessage` per row of ``columns``."""
    messages: list[ReceivedMessage] = []
    append = messages.append
    cls = ReceivedMessage
    for row in range(columns.num_rows):
        m = _new(cls)
        m._columns = columns
        m._row = row
        append(m)
    return messages
