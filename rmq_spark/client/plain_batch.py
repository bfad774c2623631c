"""A batch of plain messages (a body and at most a tag each) encoded in columns without a
:class:`~rmq_spark.client.message.Message` per message.

``send_batch`` mostly gets bodies, or ``(body, tag)`` pairs: nothing in them needs a
Message object except the checks, which hold for the whole batch once its distinct tags
pass them. :class:`PlainBatch` takes such a batch as it is, gives every message its
client message id at once (so a retry keeps them), and lays the columns out with a few
C-level calls whatever the batch size. It is still a sequence of Messages, made only when
asked (a broker that does not take columns, a batch split to fit a segment).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, overload

from rmq_spark.client.message import (
    ColumnsChunk,
    Message,
    encode_columns,
    new_unique_keys,
)
from rmq_spark.codec.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, TAGS, UNIQ_KEY
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

#: what a plain message's property blob holds after its tag: the UNIQ_KEY property
_KEY_NAME = UNIQ_KEY + NAME_VALUE_SEPARATOR
_END = PROPERTY_SEPARATOR
#: a columnar chunk's bytes besides bodies and properties (as encode_columns counts them)
_COLUMN_OVERHEAD_BYTES = 32
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


class PlainBatch(Sequence[Message]):
    """Plain messages: ``bodies`` (bytes), ``tags`` (str or None each) and their ids."""

    def __init__(self, bodies: list[bytes], tags: list[str | None]) -> None:
        self.bodies = bodies
        self.tags = tags
        self.unique_keys = new_unique_keys(len(bodies))

    @classmethod
    def of(cls, items: Sequence[Any], min_count: int = 1) -> PlainBatch | None:
        """The items as a PlainBatch when each is a bytes body or a ``(body, tag)`` tuple
        with a bytes body (all of one kind) and there are at least ``min_count`` (> 0) of
        them; None for anything else, which takes the general path (and its checks)."""
        if not isinstance(items, list | tuple) or not 0 < min_count <= len(items):
            return None
        kinds = set(map(type, items))
        if kinds == {bytes}:
            return cls(list(items), [None] * len(items))
        if kinds != {tuple} or set(map(len, items)) != {2}:
            return None
        bodies = list(map(_first, items))
        tags = list(map(_second, items))
        if set(map(type, bodies)) != {bytes}:
            return None
        distinct = dict.fromkeys(tags)
        for tag in distinct:
            if tag is not None:
                Message(b"", tag)  # the tag checks of a Message, once per distinct tag
        if "" in distinct:  # no tag, as None means (a Message keeps None for both)
            tags = [tag or None for tag in tags]
        return cls(bodies, tags)

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return Message(self.bodies[index], self.tags[index], unique_key=self.unique_keys[index])

    def encode(self, now_ms: int, max_bytes: int) -> list[ColumnsChunk] | None:
        """The batch as columns, like :func:`~rmq_spark.client.message.encode_columns`
        makes them of the same messages; None when they would need the per-message
        encoding (then the caller takes that path, which refuses them clearly)."""
        n = len(self.bodies)
        distinct = list(dict.fromkeys(self.tags))
        heads = {
            tag: f"{TAGS}{NAME_VALUE_SEPARATOR}{tag}{_END}{_KEY_NAME}" if tag else _KEY_NAME
            for tag in distinct
        }
        keys = self.unique_keys
        if len(distinct) == 1:
            head = heads[distinct[0]]
            text = head + (_END + head).join(keys) + _END
            sizes = [len(head) + 33] * n  # ids are 32 ASCII characters
        else:
            texts = list(
                map("".join, zip(map(heads.__getitem__, self.tags), keys, [_END] * n, strict=True))
            )
            text = "".join(texts)
            sizes = list(map(len, texts))
        if not text.isascii():  # a tag outside ASCII: lengths in bytes differ
            return encode_columns(self, now_ms, max_bytes)
        body_sizes = list(map(len, self.bodies))
        total = sum(body_sizes) + len(text) + _COLUMN_OVERHEAD_BYTES * n
        if total > max_bytes:  # split as the general path splits
            return encode_columns(self, now_ms, max_bytes)
        columns = messaging_pb2.MessageColumns(
            bodies=b"".join(self.bodies),
            body_sizes=body_sizes,
            properties=text.encode(),
            properties_sizes=sizes,
            born_timestamp_ms=now_ms,
            tags=[tag or "" for tag in distinct],
        )
        if len(distinct) > 1:
            index = {tag: i for i, tag in enumerate(distinct)}
            columns.tag_indexes.extend(map(index.__getitem__, self.tags))
        return [ColumnsChunk(columns, keys, self, now_ms)]
