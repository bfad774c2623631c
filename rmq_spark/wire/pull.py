"""PullMessagesResponse on the wire: serialised by the broker, read back by clients.

A pull answer carries a batch of commit-log records plus their index, the size and the
queue offset of each record, as raw little-endian integers (``record_sizes_i32le``,
``queue_offsets_i64le``): the broker writes them straight from its numpy arrays and a
client reads them with ``np.frombuffer``, with no per-message work at either end.

The broker builds the serialised answer itself (:func:`encode_pull_response`) so that the
records it read are copied once, into the bytes gRPC sends; the result is exactly the
serialisation protobuf gives for the same message. Clients parse it as a normal message and
read the index with :func:`pull_index`, which checks it against the records;
:func:`decode_pull_response` also decodes the records and checks their queue offsets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import CorruptDataError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

__all__ = [
    "QUEUE_OFFSET_DTYPE",
    "SIZE_DTYPE",
    "decode_pull_response",
    "encode_pull_response",
    "field_prefix",
    "pull_index",
    "varint",
]

#: element types of the index fields
SIZE_DTYPE = np.dtype("<i4")
QUEUE_OFFSET_DTYPE = np.dtype("<i8")

_Response = messaging_pb2.PullMessagesResponse
_RECORDS = _Response.RECORDS_FIELD_NUMBER
_SIZES = _Response.RECORD_SIZES_I32LE_FIELD_NUMBER
_QUEUE_OFFSETS = _Response.QUEUE_OFFSETS_I64LE_FIELD_NUMBER
_LENGTH_DELIMITED = 2  # protobuf wire type of bytes fields


def encode_pull_response(
    status: int,
    next_begin_offset: int,
    min_offset: int,
    max_offset: int,
    records: bytes | memoryview = b"",
    sizes: np.ndarray | None = None,
    queue_offsets: np.ndarray | None = None,
) -> bytes:
    """A serialised PullMessagesResponse (``status`` is a ``PullStatus`` wire value).

    The scalar fields are serialised by protobuf; the bytes fields follow in field order,
    each as tag, length, bytes, so the records are copied once, into the result.
    ``sizes`` and ``queue_offsets`` index ``records`` (one entry per record).
    """
    head = _Response(
        status=status,  # type: ignore[arg-type]
        next_begin_offset=next_begin_offset,
        min_offset=min_offset,
        max_offset=max_offset,
    ).SerializeToString()
    count = 0 if sizes is None else len(sizes)
    offset_count = 0 if queue_offsets is None else len(queue_offsets)
    if count != offset_count:
        raise ValueError(
            f"{count} record sizes but {offset_count} queue offsets; give one of each per record"
        )
    if not count:
        if len(records):
            raise ValueError(f"{len(records)} bytes of records without their sizes")
        return head
    assert sizes is not None and queue_offsets is not None
    size_bytes = sizes.astype(SIZE_DTYPE, copy=False).tobytes()
    offset_bytes = queue_offsets.astype(QUEUE_OFFSET_DTYPE, copy=False).tobytes()
    return b"".join(
        (
            head,
            field_prefix(_RECORDS, len(records)),
            records,
            field_prefix(_SIZES, len(size_bytes)),
            size_bytes,
            field_prefix(_QUEUE_OFFSETS, len(offset_bytes)),
            offset_bytes,
        )
    )


def field_prefix(number: int, length: int) -> bytes:
    """The tag and length that open a length-delimited (bytes) protobuf field.

    >>> field_prefix(5, 300).hex()
    '2aac02'
    """
    return varint(number << 3 | _LENGTH_DELIMITED) + varint(length)


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf base-128 varint: 7 bits a byte, low bits first.

    >>> varint(1).hex(), varint(300).hex()
    ('01', 'ac02')
    """
    if value < 0:
        raise ValueError(f"varint({value}): only values >= 0 are encoded here")
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pull_index(
    mq: MessageQueue, response: messaging_pb2.PullMessagesResponse, record_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, queue offsets) of the records of an answer, as int64 arrays, checked: whole
    integers, one size and one offset per record, sizes that add up to the records.

    Both are empty for an answer without an index (records then carry their own sizes).
    Raises CorruptDataError naming the queue when the index does not fit the records.
    ``record_bytes`` is ``len(response.records)`` when the caller has it (reading the field
    copies it).
    """
    if record_bytes is None:
        record_bytes = len(response.records)
    raw_sizes, raw_offsets = response.record_sizes_i32le, response.queue_offsets_i64le
    if len(raw_sizes) % SIZE_DTYPE.itemsize or len(raw_offsets) % QUEUE_OFFSET_DTYPE.itemsize:
        raise CorruptDataError(
            f"pull of {mq.describe()}: the index fields hold {len(raw_sizes)} bytes of sizes and "
            f"{len(raw_offsets)} bytes of queue offsets, not whole 4- and 8-byte integers; "
            "the broker sent inconsistent data"
        )
    sizes = np.frombuffer(raw_sizes, dtype=SIZE_DTYPE).astype(np.int64)
    offsets = np.frombuffer(raw_offsets, dtype=QUEUE_OFFSET_DTYPE).astype(np.int64)
    if len(sizes) != len(offsets):
        raise CorruptDataError(
            f"pull of {mq.describe()}: the answer indexes {len(sizes)} record sizes but "
            f"{len(offsets)} queue offsets; the broker sent inconsistent data"
        )
    if len(sizes) and (int(sizes.sum()) != record_bytes or int(sizes.min()) <= 0):
        raise CorruptDataError(
            f"pull of {mq.describe()}: the {len(sizes)} record sizes of the answer add up to "
            f"{int(sizes.sum())} bytes (smallest {int(sizes.min())}), but it holds "
            f"{record_bytes} bytes of records; the broker sent inconsistent data"
        )
    return sizes, offsets


def decode_pull_response(
    mq: MessageQueue,
    response: messaging_pb2.PullMessagesResponse,
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """The records of a FOUND answer from ``mq`` as one Arrow batch (RECORD_SCHEMA, or its
    ``columns`` only: see :func:`~rmq_spark.codec.arrow_decode.decode_records`).

    The index is checked (:func:`pull_index`), and the queue offset inside each record must
    be the one the index gives; anything else raises CorruptDataError naming the queue.
    """
    records = response.records
    sizes, expected = pull_index(mq, response, len(records))
    decoded = columns
    if columns is not None and len(expected) and "queueOffset" not in columns:
        decoded = [*columns, "queueOffset"]  # to check against the index, then dropped
    # An answer without the index: walk the TOTALSIZE chain instead.
    batch = decode_records(records, sizes=sizes if len(sizes) else None, columns=decoded)
    if len(expected):
        got = batch.column("queueOffset").to_numpy(zero_copy_only=False)
        if not np.array_equal(expected, got):
            bad = int(np.flatnonzero(expected != got)[0])
            raise CorruptDataError(
                f"pull of {mq.describe()}: record {bad} has queue offset {int(got[bad])} but the "
                f"answer's index says {int(expected[bad])}; the broker sent inconsistent data"
            )
    if decoded is not columns:
        batch = batch.drop_columns(["queueOffset"])
    return batch
