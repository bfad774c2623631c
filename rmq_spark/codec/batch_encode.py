"""Encode a batch of messages of one topic and queue into commit-log records, vectorised.

Encoding is split in two so a store can do the expensive part outside its write lock:

* :func:`prepare_batch` validates the messages, computes body CRCs, record sizes and the
  fixed header fields that do not depend on where the batch lands;
* :func:`finish_batch` stamps queue offsets, physical offsets and the store timestamp into
  the headers and lays the records out back to back.

Large batches are assembled with one Arrow kernel (``binary_join_element_wise``) over
columns (header, body, topic, properties length, properties), so no Python code runs per
message except ``len`` and ``zlib.crc32`` through ``map``. Small batches use ``struct``,
which is cheaper than the fixed cost of the Arrow calls.

Bodies and properties may come as :class:`~rmq_spark.codec.byte_column.ByteColumn` (a
columnar send's buffers, kept whole): their lengths are then read off the offsets, and
Arrow takes the buffers as they are; only the body CRCs need one bytes object per body.
"""

from __future__ import annotations

import numbers
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec import record as rec
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.properties import MAX_PROPERTIES_BYTES
from rmq_spark.errors import InvalidArgumentError

# Below this many messages the per-message struct path is faster than the Arrow path.
SMALL_BATCH = 48

_BYTES_TYPES = frozenset((bytes, bytearray, memoryview))

# The first pa.scalar() call imports pyarrow's pandas shim (~200 ms); pay it at import time
# rather than inside the store's write lock on the first large batch.


@dataclass
class PreparedBatch:
    """A validated batch whose records only lack offsets and the store timestamp."""

    topic: str
    queue_id: int
    headers: np.ndarray  # structured, one row per message, big-endian
    bodies: list[bytes] | ByteColumn
    properties: list[bytes] | ByteColumn
    topic_part: bytes  # topic length prefix + topic bytes, the same for every record
    sizes: np.ndarray  # int64 record sizes
    prop_lens: np.ndarray  # int64 encoded properties lengths

    @property
    def count(self) -> int:
        return len(self.bodies)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())


#: a value of every message of a batch, or one for all of them (None: the default)
PerMessage = Sequence[int] | np.ndarray | int | None


def _per_message(name: str, values: PerMessage, n: int, default: int) -> np.ndarray | int:
    if values is None:
        return default
    if isinstance(values, int | numbers.Integral):  # int named too: mypy's int is not Integral
        return int(values)
    if len(values) != n:
        raise InvalidArgumentError(f"{name} has {len(values)} values for {n} messages")
    return np.asarray(values, dtype=np.int64)


def prepare_batch(
    topic: str,
    queue_id: int,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | None = None,
    *,
    born_host: str = "127.0.0.1:0",
    store_host: str = "127.0.0.1:0",
    born_timestamps: PerMessage = None,
    flags: PerMessage = None,
    reconsume_times: PerMessage = None,
    sysflag: int = 0,
    prepared_tx_offset: int = 0,
    body_crcs: np.ndarray | None = None,
) -> PreparedBatch:
    """Validate and pre-encode ``bodies`` (with encoded ``properties``) for one queue.
    ``body_crcs``: the bodies' BODYCRC values when the caller has them (saves a pass)."""
    n = len(bodies)
    if n == 0:
        raise InvalidArgumentError("a batch needs at least one message")
    props: list[bytes] | ByteColumn
    if isinstance(properties, ByteColumn):
        props = properties
        prop_lens = props.lengths()
    else:
        props = list(properties) if properties is not None else [b""] * n
        prop_lens = np.fromiter(map(len, props), dtype=np.int64, count=len(props))
    if len(props) != n:
        raise InvalidArgumentError(f"{len(props)} property blobs for {n} message bodies")
    if isinstance(bodies, ByteColumn):
        body_lens = bodies.lengths()
        body_items = bodies.to_list()  # zlib.crc32 takes one buffer a call
    else:
        bodies = body_items = bodies if isinstance(bodies, list) else list(bodies)
        if not _BYTES_TYPES.issuperset(map(type, bodies)):
            bad = next(i for i, b in enumerate(bodies) if type(b) not in _BYTES_TYPES)
            raise InvalidArgumentError(
                f"message {bad}: body must be bytes, got {type(bodies[bad]).__name__}"
            )
        body_lens = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    if n and prop_lens.max() > MAX_PROPERTIES_BYTES:
        bad = int(np.argmax(prop_lens))
        raise InvalidArgumentError(
            f"message {bad}: properties take {int(prop_lens[bad])} bytes encoded; "
            f"the limit is {MAX_PROPERTIES_BYTES}"
        )
    topic_bytes = topic.encode("utf-8")
    rec.check_topic_length(len(topic_bytes))
    v2 = len(topic_bytes) > rec.MAX_V1_TOPIC_BYTES
    born, born_v6 = rec.encode_host(born_host)
    store, store_v6 = rec.encode_host(store_host)
    sysflag &= ~(rec.SYSFLAG_BORNHOST_V6 | rec.SYSFLAG_STOREHOST_V6)
    sysflag |= (rec.SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (
        rec.SYSFLAG_STOREHOST_V6 if store_v6 else 0
    )
    headers = np.zeros(n, dtype=rec.header_dtype(len(born), len(store)))
    fixed = headers.dtype.itemsize
    sizes = fixed + body_lens + (2 if v2 else 1) + len(topic_bytes) + 2 + prop_lens
    headers["total_size"] = sizes
    headers["magic"] = rec.MAGIC_V2 if v2 else rec.MAGIC_V1
    if body_crcs is None:
        crcs = np.fromiter(map(zlib.crc32, body_items), dtype=np.int64, count=n)
        body_crcs = crcs & 0x7FFFFFFF
    headers["body_crc"] = body_crcs
    headers["queue_id"] = queue_id
    headers["flag"] = _per_message("flags", flags, n, 0)
    headers["sysflag"] = sysflag
    headers["born_timestamp"] = _per_message("born_timestamps", born_timestamps, n, 0)
    headers["born_host"] = born
    headers["store_host"] = store
    headers["reconsume_times"] = _per_message("reconsume_times", reconsume_times, n, 0)
    headers["prepared_tx_offset"] = prepared_tx_offset
    headers["body_len"] = body_lens
    topic_part = (struct.pack(">H", len(topic_bytes)) if v2 else bytes([len(topic_bytes)])) + (
        topic_bytes
    )
    return PreparedBatch(topic, queue_id, headers, bodies, props, topic_part, sizes, prop_lens)


def finish_batch(
    batch: PreparedBatch,
    first_queue_offset: int,
    physical_offsets: np.ndarray,
    store_timestamp: int,
) -> memoryview:
    """Stamp offsets and the store time, and return the records laid out back to back."""
    headers = batch.headers
    n = batch.count
    headers["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n)
    headers["physical_offset"] = physical_offsets
    headers["store_timestamp"] = store_timestamp
    if n < SMALL_BATCH:
        return memoryview(_join_small(batch))
    return _join_arrow(batch)


@dataclass
class EncodedBatch:
    """Records laid out back to back, all but their offsets and store time: :func:`stamp`
    writes those in place when the batch is written (:func:`set_prepared_offset` may set
    the prepared transaction offset before)."""

    data: np.ndarray  # uint8, writable
    starts: np.ndarray  # int64 start of each record in data
    sizes: np.ndarray  # int64 record sizes
    fields: dict[str, int]  # byte position within a record of each field written later

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return len(self.data)


_LATER = ("queue_offset", "physical_offset", "store_timestamp", "prepared_tx_offset")
_LANES = np.arange(16)


def encode_unstamped(batch: PreparedBatch) -> EncodedBatch:
    """Lay the records of ``batch`` out now, to be stamped and written later."""
    n = batch.count
    laid = _join_small(batch) if n < SMALL_BATCH else _join_arrow(batch)
    data = np.frombuffer(bytearray(laid), dtype=np.uint8)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(batch.sizes[:-1], out=starts[1:])
    layout = batch.headers.dtype.fields
    assert layout is not None  # a structured dtype
    fields = {name: layout[name][1] for name in _LATER}
    assert fields["physical_offset"] == fields["queue_offset"] + 8  # RocketMQ's layout
    return EncodedBatch(data, starts, batch.sizes, fields)


def _put(batch: EncodedBatch, field: str, values: np.ndarray, width: int) -> None:
    """Big-endian ``values`` (``width`` bytes per record) at ``field`` of every record."""
    where = (batch.starts + batch.fields[field])[:, None] + _LANES[:width]
    batch.data[where] = values.view(np.uint8).reshape(batch.count, width)


def set_prepared_offset(batch: EncodedBatch, prepared_tx_offset: int) -> None:
    _put(batch, "prepared_tx_offset", np.full(batch.count, prepared_tx_offset, ">i8"), 8)


def stamp(
    batch: EncodedBatch,
    first_queue_offset: int,
    physical_offsets: np.ndarray,
    store_timestamp: int,
) -> memoryview:
    """Write the queue and physical offsets and the store time into every record of
    ``batch`` (big-endian, in place); returns the records."""
    n = batch.count
    offsets = np.empty((n, 2), dtype=">i8")  # QUEUEOFFSET then PHYSICALOFFSET
    offsets[:, 0] = np.arange(first_queue_offset, first_queue_offset + n)
    offsets[:, 1] = physical_offsets
    _put(batch, "queue_offset", offsets, 16)
    _put(batch, "store_timestamp", np.full(n, store_timestamp, ">i8"), 8)
    return memoryview(batch.data.data)


def warm_up() -> None:
    """Run the Arrow path once: its first call imports pyarrow's compute wrappers (~0.3 s),
    which a store should pay when it opens, not inside its write lock."""
    batch = prepare_batch("warmup", 0, [b""] * SMALL_BATCH)
    finish_batch(batch, 0, np.zeros(SMALL_BATCH, dtype=np.int64), 0)


def _join_small(batch: PreparedBatch) -> bytes:
    width = batch.headers.dtype.itemsize
    parts: list[bytes | memoryview] = []
    view = memoryview(batch.headers.tobytes())
    for i, (body, props) in enumerate(zip(batch.bodies, batch.properties, strict=True)):
        parts.append(view[i * width : (i + 1) * width])
        parts.append(body)
        parts.append(batch.topic_part)
        parts.append(len(props).to_bytes(2, "big"))
        parts.append(props)
    return b"".join(parts)


def _binary_column(values: list[bytes] | ByteColumn, lengths: np.ndarray | None = None) -> pa.Array:
    if isinstance(values, ByteColumn):
        return values.to_arrow()
    n = len(values)
    if lengths is None:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = pa.py_buffer(b"".join(values))
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), data]
    )


def _fixed_column(block: bytes, width: int, n: int) -> pa.Array:
    """Equal-width values as a large_binary column, without a cast (which would copy)."""
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(block)]
    )


def _join_arrow(batch: PreparedBatch) -> memoryview:
    n = batch.count
    headers = batch.headers
    joined = pc.binary_join_element_wise(
        _fixed_column(headers.tobytes(), headers.dtype.itemsize, n),
        _binary_column(batch.bodies, headers["body_len"].astype(np.int64)),
        pa.scalar(batch.topic_part, pa.large_binary()),
        _fixed_column(batch.prop_lens.astype(">u2").tobytes(), 2, n),
        _binary_column(batch.properties, batch.prop_lens),
        pa.scalar(b"", pa.large_binary()),
    )
    # Rows were joined in order into one contiguous data buffer: that buffer is the batch.
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=0)
    data = joined.buffers()[2]
    return memoryview(data)[int(offsets[0]) : int(offsets[n])]
