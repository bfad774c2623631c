"""What a send puts in each SendMessages request: pure functions of the messages and limits.

A send becomes one or more requests (chunks): a batch as columns (bodies and properties
back to back, far cheaper per message on both sides), else one Message proto each, split so
that no request is over ``max_batch_bytes`` and, once the broker's commit-log segment size
is known, so that the records of one request fit in one segment (a broker refuses a batch
that does not: it never splits one).
"""

from __future__ import annotations

from collections.abc import Sequence

from rmq_spark.client.message import (
    ColumnsChunk,
    Message,
    encode_columns,
    split_by_size,
)
from rmq_spark.client.plain_batch import PlainBatch
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

__all__ = ["Chunk", "encode_requests", "fit_segment"]

#: what one SendMessages request carries: Message protos, or a batch in columns
Chunk = Sequence[messaging_pb2.Message] | ColumnsChunk
#: what a stored record takes besides its body, properties and topic name, counted high: the
#: 91-byte header, the UNIQ_KEY and delay properties the broker adds, and some margin
RECORD_OVERHEAD_BYTES = 256
#: a segment ends with an 8-byte marker that no batch may use
SEGMENT_END_MARKER_BYTES = 8


def encode_requests(
    messages: list[Message] | PlainBatch, now_ms: int, max_batch_bytes: int, columns_min_batch: int
) -> list[Chunk]:
    """The requests' contents: columns for a batch of at least ``columns_min_batch``
    messages (0: never), else (or when a message needs the per-message form to be refused
    with the usual error) one Message each; none over ``max_batch_bytes``."""
    if isinstance(messages, PlainBatch) and (plain := messages.encode(now_ms, max_batch_bytes)):
        return list(plain)
    if columns_min_batch and len(messages) >= columns_min_batch:
        columns = encode_columns(messages, now_ms, max_batch_bytes)
        if columns is not None:
            return list(columns)
    encoded = [m.to_pb(now_ms) for m in messages]
    return list(split_by_size(encoded, max_batch_bytes))


def fit_segment(chunk: Chunk, segment_bytes: int, topic: str) -> list[Chunk]:
    """``chunk`` as requests whose records fit in a commit-log segment of ``segment_bytes``
    (0: unknown, the chunk as it is)."""
    if not segment_bytes:
        return [chunk]
    budget = segment_bytes - SEGMENT_END_MARKER_BYTES
    per_message = RECORD_OVERHEAD_BYTES + 2 * len(topic.encode())
    if isinstance(chunk, ColumnsChunk):
        columns = chunk.columns
        count = len(chunk.messages)
        if len(columns.bodies) + len(columns.properties) + per_message * count <= budget:
            return [chunk]
        parts = encode_columns(chunk.messages, chunk.now_ms, budget, per_message)
        assert parts is not None, "these messages were encoded in columns before"
        return list(parts)
    if sum(m.ByteSize() for m in chunk) + per_message * len(chunk) <= budget:
        return [chunk]
    return list(split_by_size(chunk, budget, per_message))
