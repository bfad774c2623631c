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

import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode.headers import Headers
from rmq_spark.codec.arrow_decode.hosts import HOST_COLUMNS, host_columns
from rmq_spark.codec.arrow_decode.positions import (
    FirstBad,
    RecordIndex,
    check_bounds,
    check_magic,
    known_positions,
    walk,
)
from rmq_spark.codec.arrow_decode.property_map import (
    PROPERTIES_TYPE,
    properties_columns,
    tags_and_keys,
)
from rmq_spark.codec.arrow_decode.source import (
    Source,
    numeric_array,
    repeat_string,
    to_strings,
)
from rmq_spark.codec.arrow_decode.tail import Tail, validate
from rmq_spark.codec.properties import UNIQ_KEY
from rmq_spark.codec.record import POS_MAGIC
from rmq_spark.errors import CorruptDataError, InvalidArgumentError

__all__ = [
    "PROPERTIES_TYPE",
    "RECORD_SCHEMA",
    "RecordIndex",
    "RecordParts",
    "decode_records",
    "index_records",
    "key_fields",
    "record_parts",
    "stored_properties",
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
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """Decode concatenated commit-log records into a batch with :data:`RECORD_SCHEMA`.

    ``starts``/``sizes`` are byte positions within ``buf`` and record sizes, when the caller
    knows them (the store does, from the consume queue): this skips walking the TOTALSIZE
    chain, and the records need not be contiguous. With only ``sizes``, records are taken to
    be back to back from position 0; with only ``starts``, sizes are read from TOTALSIZE.
    Every length field is cross-checked; the first bad record raises CorruptDataError with its
    byte position. ``check_crc`` also verifies each BODYCRC (slower: one zlib call a record).

    ``columns`` (names of :data:`RECORD_SCHEMA`) makes only those, in that order: the batch
    is ``decode_records(buf).select(columns)``, without the work of the others (copying
    bodies, splitting properties, formatting hosts). The records are checked all the same.

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> buf = encode_record(Record(topic="T", queue_id=3, body=b"hello", queue_offset=7))
    >>> decode_records(buf, columns=["topic", "queueOffset", "body"]).to_pylist()
    [{'topic': 'T', 'queueOffset': 7, 'body': b'hello'}]
    """
    names = _column_names(columns)
    src = Source(buf)
    if starts is None and sizes is None:
        starts, sizes = walk(src)
    else:
        starts, sizes = known_positions(src, starts, sizes)
    if len(starts) == 0:
        return _empty_batch(names)
    heads, tail = validate(src, starts, sizes, crc=check_crc)
    made = _make_columns(src, starts, heads, tail, frozenset(names), check_crc)
    return pa.RecordBatch.from_arrays([made[name] for name in names], schema=_schema_of(names))


#: RECORD_SCHEMA columns copied from a header field, and the field
_HEADER_COLUMNS = {
    "queueId": "queue_id",
    "queueOffset": "queue_offset",
    "commitLogOffset": "physical_offset",
    "bornTimestamp": "born_timestamp",
    "storeTimestamp": "store_timestamp",
    "reconsumeTimes": "reconsume_times",
    "sysFlag": "sysflag",
    "flag": "flag",
}
_PROPERTY_COLUMNS = ("properties", "tags", "keys")


def _make_columns(
    src: Source,
    starts: np.ndarray,
    heads: Headers,
    tail: Tail,
    wanted: frozenset[str],
    check_crc: bool,
) -> dict[str, pa.Array]:
    """The ``wanted`` columns of validated records."""
    made = {
        name: numeric_array(getattr(heads, field))
        for name, field in _HEADER_COLUMNS.items()
        if name in wanted
    }
    if "topic" in wanted:
        made["topic"] = _topic_column(src, tail)
    if "body" in wanted or check_crc:
        body = src.values(starts + heads.header_size, heads.body_len, heads.body_head)
        if check_crc:
            if heads.body_crc is None:
                raise RuntimeError("validate(crc=True) did not read the BODYCRC fields")
            _check_crc(body, heads.body_crc, starts)
        made["body"] = body
    hosts = tuple(name for name in HOST_COLUMNS if name in wanted)
    if hosts:
        made.update(host_columns(heads.hosts, len(starts), hosts))
    if wanted.intersection(_PROPERTY_COLUMNS):
        props = src.values(tail.props_pos, tail.props_len, tail.props_head)
        if "properties" in wanted:
            made["properties"], made["tags"], made["keys"] = properties_columns(props)
        else:
            made["tags"], made["keys"] = tags_and_keys(props)
    return made


def _column_names(columns: Sequence[str] | None) -> tuple[str, ...]:
    if columns is None:
        return _ALL_COLUMNS
    names = tuple(columns)
    unknown = [name for name in names if name not in _ALL_COLUMNS]
    if unknown:
        raise InvalidArgumentError(
            f"no record column {unknown[0]!r}; the columns are {', '.join(_ALL_COLUMNS)}"
        )
    return names


_ALL_COLUMNS = tuple(RECORD_SCHEMA.names)


@functools.lru_cache(maxsize=256)
def _schema_of(names: tuple[str, ...]) -> pa.Schema:
    if names == _ALL_COLUMNS:
        return RECORD_SCHEMA
    return pa.schema([RECORD_SCHEMA.field(name) for name in names])


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
    born_host = host_columns(heads.hosts, len(starts), ("bornHost",))["bornHost"]
    return RecordParts(
        body=body,
        properties=raw_props,
        tags=tags,
        born_timestamp=np.asarray(heads.born_timestamp, dtype=np.int64),
        born_host=born_host,
        flag=np.asarray(heads.flag, dtype=np.int32),
    )


def stored_properties(
    buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer,
    starts: np.ndarray,
    sizes: np.ndarray,
) -> pa.Array:
    """The properties of the records at ``starts``/``sizes`` in ``buf`` as stored
    (``name\\x01value\\x02...``), one binary value a record, read as
    :func:`decode_records` reads them (every length field cross-checked)."""
    src = Source(buf)
    starts, sizes = known_positions(src, starts, sizes)
    if not len(starts):
        return pa.array([], pa.binary())
    _, tail = validate(src, starts, sizes, crc=False)
    return src.values(tail.props_pos, tail.props_len, tail.props_head)


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


def _empty_batch(names: tuple[str, ...]) -> pa.RecordBatch:
    schema = _schema_of(names)
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
