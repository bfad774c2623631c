"""Vectorised decoding of concatenated commit-log records into one ``pyarrow.RecordBatch``.

:mod:`rmq_spark.codec.record` is the readable reference (one record at a time); this package
decodes a whole buffer with numpy and pyarrow kernels, without a Python loop per message on
the hot path. Its parts, each with its own techniques:

* :mod:`.source`: the buffer as numpy bytes and Arrow buffers; fixed-size fields copied with
  one fancy index, variable-size fields (body, topic, properties) as ``binary_view`` arrays
  pointing into the buffer, then copied by a cast in C++;
* :mod:`.positions` and :mod:`.tail`: where records are, and the cross-checks of every length
  field that name the first corrupt record;
* :mod:`.headers`: the fixed-size fields, native-endian;
* :mod:`.hosts`: bornHost, storeHost and msgId, formatting each distinct host once;
* :mod:`.property_map`: the properties map and TAGS/KEYS, from one scan for separators.

Python loops remain only where they are inherent or rare: walking the TOTALSIZE chain when
the caller does not know where records start, formatting each distinct host, the optional
CRC check, and fallbacks that reproduce the reference exactly for irregular data (invalid
UTF-8, properties not shaped ``name\\x01value\\x02``).

>>> from rmq_spark.codec.record import Record, encode_record
>>> buf = encode_record(Record(topic="T", queue_id=1, body=b"hi", properties=b"TAGS\\x01a\\x02"))
>>> decode_records(buf).to_pylist()[0]["tags"]
'a'
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode.hosts import host_columns
from rmq_spark.codec.arrow_decode.positions import (
    FirstBad,
    RecordIndex,
    check_bounds,
    check_magic,
    known_positions,
    walk,
)
from rmq_spark.codec.arrow_decode.property_map import PROPERTIES_TYPE, properties_columns
from rmq_spark.codec.arrow_decode.source import (
    Source,
    numeric_array,
    repeat_string,
    to_strings,
)
from rmq_spark.codec.arrow_decode.tail import Tail, validate
from rmq_spark.codec.properties import UNIQ_KEY
from rmq_spark.codec.record import POS_MAGIC
from rmq_spark.errors import CorruptDataError

__all__ = [
    "PROPERTIES_TYPE",
    "RECORD_SCHEMA",
    "RecordIndex",
    "RecordParts",
    "decode_records",
    "index_records",
    "key_fields",
    "record_parts",
]

RECORD_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("commitLogOffset", pa.int64()),
        ("msgId", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("body", pa.binary()),
        ("properties", PROPERTIES_TYPE),
        ("bornTimestamp", pa.int64()),
        ("storeTimestamp", pa.int64()),
        ("bornHost", pa.string()),
        ("storeHost", pa.string()),
        ("reconsumeTimes", pa.int32()),
        ("sysFlag", pa.int32()),
        ("flag", pa.int32()),
    ]
)


def decode_records(
    buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer,
    starts: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    check_crc: bool = False,
) -> pa.RecordBatch:
    """Decode concatenated commit-log records into a batch with :data:`RECORD_SCHEMA`.

    ``starts``/``sizes`` are byte positions within ``buf`` and record sizes, when the caller
    knows them (the store does, from the consume queue): this skips walking the TOTALSIZE
    chain, and the records need not be contiguous. With only ``sizes``, records are taken to
    be back to back from position 0; with only ``starts``, sizes are read from TOTALSIZE.
    Every length field is cross-checked; the first bad record raises CorruptDataError with its
    byte position. ``check_crc`` also verifies each BODYCRC (slower: one zlib call a record).

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> buf = encode_record(Record(topic="T", queue_id=3, body=b"hello", queue_offset=7))
    >>> decode_records(buf).select(["topic", "queueOffset", "body"]).to_pylist()
    [{'topic': 'T', 'queueOffset': 7, 'body': b'hello'}]
    """
    src = Source(buf)
    if starts is None and sizes is None:
        starts, sizes = walk(src)
    else:
        starts, sizes = known_positions(src, starts, sizes)
    n = len(starts)
    if n == 0:
        return _empty_batch()
    heads, tail = validate(src, starts, sizes, crc=check_crc)
    body = src.values(starts + heads.header_size, heads.body_len, heads.body_head)
    if check_crc:
        _check_crc(body, heads.body_crc, starts)
    born_host, store_host, msg_id = host_columns(heads.hosts, n)
    props = src.values(tail.props_pos, tail.props_len, tail.props_head)
    properties, tags, keys = properties_columns(props)
    columns = [
        _topic_column(src, tail),
        numeric_array(heads.queue_id),
        numeric_array(heads.queue_offset),
        numeric_array(heads.physical_offset),
        msg_id,
        tags,
        keys,
        body,
        properties,
        numeric_array(heads.born_timestamp),
        numeric_array(heads.store_timestamp),
        born_host,
        store_host,
        numeric_array(heads.reconsume_times),
        numeric_array(heads.sysflag),
        numeric_array(heads.flag),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


@dataclass
class RecordParts:
    """What re-writing records elsewhere needs from them: the byte columns as stored (the
    properties undecoded), the tags, and the per-record header fields a copy keeps."""

    body: pa.Array  # binary
    properties: pa.Array  # binary: the encoded properties as stored
    tags: pa.Array  # string
    born_timestamp: np.ndarray
    born_host: pa.Array  # string
    flag: np.ndarray


def record_parts(
    buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer,
    starts: np.ndarray,
    sizes: np.ndarray,
) -> RecordParts:
    """The parts of the records at ``starts``/``sizes`` in ``buf`` that a copy needs, read
    as :func:`decode_records` reads them (every length field cross-checked)."""
    src = Source(buf)
    starts, sizes = known_positions(src, starts, sizes)
    if not len(starts):
        empty = pa.array([], pa.binary())
        return RecordParts(
            empty, empty, pa.array([], pa.string()), np.zeros(0, np.int64),
            pa.array([], pa.string()), np.zeros(0, np.int32),
        )  # fmt: skip
    heads, tail = validate(src, starts, sizes, crc=False)
    body = src.values(starts + heads.header_size, heads.body_len, heads.body_head)
    raw_props = src.values(tail.props_pos, tail.props_len, tail.props_head)
    _, tags, _ = properties_columns(raw_props)
    born_host, _, _ = host_columns(heads.hosts, len(starts))
    return RecordParts(
        body=body,
        properties=raw_props,
        tags=tags,
        born_timestamp=np.asarray(heads.born_timestamp, dtype=np.int64),
        born_host=born_host,
        flag=np.asarray(heads.flag, dtype=np.int32),
    )


@dataclass
class KeyFields:
    """What the message index needs of records: where they are, when they were stored, their
    sysflag, topic, KEYS and UNIQ_KEY (null where absent)."""

    physical_offset: np.ndarray
    store_timestamp: np.ndarray
    sysflag: np.ndarray
    topic: pa.Array  # string
    keys: pa.Array  # string
    uniq_key: pa.Array  # string


def key_fields(
    buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer,
    starts: np.ndarray,
    sizes: np.ndarray,
) -> KeyFields:
    """The :class:`KeyFields` of the records at ``starts``/``sizes`` in ``buf``, read as
    :func:`decode_records` reads them, without copying bodies."""
    src = Source(buf)
    starts, sizes = known_positions(src, starts, sizes)
    if not len(starts):
        none = pa.array([], pa.string())
        empty = np.zeros(0, np.int64)
        return KeyFields(empty, empty, empty.astype(np.int32), none, none, none)
    heads, tail = validate(src, starts, sizes, crc=False)
    props = src.values(tail.props_pos, tail.props_len, tail.props_head)
    properties, _, keys = properties_columns(props)
    return KeyFields(
        physical_offset=np.asarray(heads.physical_offset, dtype=np.int64),
        store_timestamp=np.asarray(heads.store_timestamp, dtype=np.int64),
        sysflag=np.asarray(heads.sysflag, dtype=np.int32),
        topic=_topic_column(src, tail),
        keys=keys,
        uniq_key=pc.map_lookup(properties, pa.scalar(UNIQ_KEY), "first"),
    )


def index_records(buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer) -> RecordIndex:
    """Find every record of a buffer of concatenated records by walking TOTALSIZE.

    Raises CorruptDataError naming the first record whose size or magic code is wrong.

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> one = encode_record(Record(topic="T", queue_id=0, body=b"x"))
    >>> index_records(one + one).starts.tolist()
    [0, 93]
    """
    src = Source(buf)
    starts, sizes = walk(src)
    first_bad = FirstBad(starts)
    check_bounds(first_bad, sizes, len(src))
    ok = first_bad.ok
    magic = src.gather(starts[:ok] + POS_MAGIC, np.dtype(">u4")).astype(np.uint32)
    check_magic(first_bad, magic)
    first_bad.raise_if_bad()
    return RecordIndex(starts, sizes)


def _topic_column(src: Source, tail: Tail) -> pa.Array:
    if tail.topic is not None and _is_utf8(tail.topic):
        return repeat_string(tail.topic, len(tail.topic_len))  # one topic for the batch
    raw = src.values(tail.topic_pos, tail.topic_len, tail.topic_head)
    return to_strings(raw)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _check_crc(body: pa.Array, stored: np.ndarray, starts: np.ndarray) -> None:
    offsets = np.frombuffer(body.buffers()[1], np.int32, len(body) + 1, body.offset * 4)
    data = memoryview(body.buffers()[2] or b"")
    bounds = offsets.tolist()
    for i, expected in enumerate(stored.tolist()):
        actual = zlib.crc32(data[bounds[i] : bounds[i + 1]]) & 0x7FFFFFFF
        if actual != expected:
            raise CorruptDataError(
                f"record {i} at byte {int(starts[i])}: body CRC is {actual} but the record "
                f"says {expected}; the body was altered after it was written"
            )


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in RECORD_SCHEMA], schema=RECORD_SCHEMA
    )
