"""Vectorised decoding of concatenated commit-log records into one ``pyarrow.RecordBatch``.

:mod:`rmq_spark.codec.record` is the readable reference (one record at a time); this module
decodes a whole buffer with numpy and pyarrow kernels, without a Python loop per message on
the hot path. The techniques, and why they are fast:

* Fixed-size headers are copied with one numpy fancy index over a stride-1 view of the
  buffer (every byte offset is a row of a big-endian structured dtype), so each record costs
  one memcpy rather than one index per byte.
* Variable-size fields (body, topic, properties) become ``binary_view`` arrays whose 16-byte
  views point into the original buffer, built with numpy in one shot; ``cast(pa.binary())``
  then copies them in C++.
* Properties are split on their separator bytes with numpy and Arrow ``take``.

Python loops remain only where they are inherent or rare: walking the TOTALSIZE chain when
the caller does not know where records start, formatting each distinct IPv6 host, the
optional CRC check, and fallbacks that reproduce the reference exactly for irregular data
(invalid UTF-8, properties not shaped ``name\\x01value\\x02``).

Differences from the reference: a property name repeated within one record (producers never
write one) appears twice in the ``properties`` map when the fast path decodes it, while
``tags``/``keys`` take its last value as the reference does.

>>> from rmq_spark.codec.record import Record, encode_record
>>> buf = encode_record(Record(topic="T", queue_id=1, body=b"hi", properties=b"TAGS\\x01a\\x02"))
>>> decode_records(buf).to_pylist()[0]["tags"]
'a'
"""

from __future__ import annotations

import struct
import zlib
from array import array
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.properties import KEYS, TAGS, decode_properties
from rmq_spark.codec.record import (
    FIXED_WITHOUT_HOSTS,
    IPV4_HOST,
    IPV6_HOST,
    MAGIC_V1,
    MAGIC_V2,
    POS_MAGIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    decode_host,
    header_dtype,
)
from rmq_spark.errors import CorruptDataError, InvalidArgumentError

__all__ = ["RECORD_SCHEMA", "RecordIndex", "decode_records", "index_records"]

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())

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

MIN_RECORD_SIZE = FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST  # empty body, topic and properties
HEAD_BYTES = 12  # bytes a binary_view stores inline; also the first bytes we copy of a value

# binary_view offsets are int32, so a big buffer is exposed as several variadic buffers, one
# per 1 GiB step (each slice runs to the end, so a value starting in it always fits).
_BLOCK_SHIFT = 30
_BLOCK_MASK = (1 << _BLOCK_SHIFT) - 1


# --- buffer access -----------------------------------------------------------------------


class _Source:
    """The input buffer seen both as numpy bytes and as Arrow buffers for binary views."""

    def __init__(self, buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer) -> None:
        if isinstance(buf, np.ndarray) and (buf.dtype != np.uint8 or buf.ndim != 1):
            raise InvalidArgumentError(
                f"buffer array must be 1-D uint8, got {buf.ndim}-D {buf.dtype}; "
                "pass arr.view(np.uint8).ravel() of contiguous data"
            )
        self.buffer = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
        self.data = np.frombuffer(self.buffer, dtype=np.uint8)
        blocks = max(1, -(-len(self.data) >> _BLOCK_SHIFT))
        self.blocks = [self.buffer.slice(k << _BLOCK_SHIFT) for k in range(blocks)]

    def __len__(self) -> int:
        return len(self.data)

    def gather(self, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Copy ``dtype.itemsize`` bytes at each position into one contiguous structured array.

        Indexing a stride-1 view (every byte offset is a row) copies each row with a single
        memcpy. Bytes past the end of the buffer read as zero, so a short or lying record can
        never make us read out of bounds; validation rejects it afterwards.
        """
        width = dtype.itemsize
        fits = len(self.data) - width + 1  # positions whose whole row is inside the buffer
        if fits > 0:
            # Opaque void rows copy faster than a structured dtype (copied field by field).
            rows = np.ndarray((fits,), np.dtype((np.void, width)), buffer=self.data, strides=(1,))
            inside = pos < fits
            if inside.all():
                return rows[pos].view(dtype)
        else:
            inside = np.zeros(len(pos), dtype=bool)
        out = np.zeros(len(pos), dtype)
        if inside.any():
            out[inside] = rows[pos[inside]].view(dtype)
        tail_start = max(len(self.data) - width, 0)
        padded = np.zeros(2 * width, np.uint8)
        padded[: len(self.data) - tail_start] = self.data[tail_start:]
        padded_rows = np.ndarray((width + 1,), dtype, buffer=padded, strides=(1,))
        out[~inside] = padded_rows[np.clip(pos[~inside] - tail_start, 0, width)]
        return out

    def values(self, pos: np.ndarray, lengths: np.ndarray, head: np.ndarray) -> pa.Array:
        """A binary array of ``buffer[pos:pos+length]`` for every row.

        ``head`` holds the first 12 bytes at each position (an ``V12`` array, as gathered with
        the surrounding fields): the binary_view layout keeps short values inline and a 4-byte
        prefix of long ones, and numpy fills all the views at once.
        """
        n = len(pos)
        views = np.empty(n, _INLINE_VIEW)
        views["length"] = lengths
        views["head"] = head
        refs = views.view(_REF_VIEW)
        long = lengths > HEAD_BYTES
        if long.all():  # the usual case: no masking needed
            refs["buffer"] = pos >> _BLOCK_SHIFT
            refs["offset"] = pos & _BLOCK_MASK
        else:
            short = ~long
            raw = views.view(np.uint8).reshape(n, 16)
            raw[short, 4:] *= np.arange(HEAD_BYTES) < lengths[short, None]  # zero past the end
            refs["buffer"][long] = pos[long] >> _BLOCK_SHIFT
            refs["offset"][long] = pos[long] & _BLOCK_MASK
        array = pa.Array.from_buffers(
            pa.binary_view(), n, [None, pa.py_buffer(views), *self.blocks]
        )
        return array.cast(pa.binary())


_INLINE_VIEW = np.dtype([("length", "=i4"), ("head", "V12")])
_REF_VIEW = np.dtype([("length", "=i4"), ("prefix", "V4"), ("buffer", "=i4"), ("offset", "=i4")])


# --- header layouts ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """Where the fixed fields sit for one combination of born/store host address families."""

    born_v6: bool
    store_v6: bool

    @property
    def header_size(self) -> int:
        hosts = (IPV6_HOST if self.born_v6 else IPV4_HOST) + (
            IPV6_HOST if self.store_v6 else IPV4_HOST
        )
        return 72 + hosts

    @property
    def dtype(self) -> np.dtype:
        """Big-endian header fields plus the first 12 body bytes (the body's view head)."""
        born = IPV6_HOST if self.born_v6 else IPV4_HOST
        store = IPV6_HOST if self.store_v6 else IPV4_HOST
        return header_dtype(born, store, (("body_head", f"V{HEAD_BYTES}"),))


def _layout_of(variant: int) -> _Layout:
    return _Layout(born_v6=bool(variant & 1), store_v6=bool(variant & 2))


# SYSFLAG host bits, shifted down to 0..3, pick the layout; 0 (both IPv4) is the common case.
_HOST_BITS_SHIFT = 4
assert SYSFLAG_BORNHOST_V6 == 1 << _HOST_BITS_SHIFT
assert SYSFLAG_STOREHOST_V6 == 2 << _HOST_BITS_SHIFT


# Header fields copied out of every record, with their native dtypes.
_NUMERIC_FIELDS = {
    "total_size": np.int64,
    "magic": np.uint32,
    "body_crc": np.int32,
    "queue_id": np.int32,
    "flag": np.int32,
    "queue_offset": np.int64,
    "physical_offset": np.int64,
    "sysflag": np.int32,
    "born_timestamp": np.int64,
    "store_timestamp": np.int64,
    "reconsume_times": np.int32,
    "body_len": np.int64,
}
# Headers are copied this many records at a time, so the copy (~3 MB) is still in cache when
# its fields are byte-swapped out, rather than one whole-batch block written and read once.
_CHUNK_RECORDS = 1 << 15


@dataclass
class _HostBytes:
    """Raw host fields of one layout group, formatted into strings only once validated."""

    rows: np.ndarray | None  # records of the batch in this group; None: all of them
    born: np.ndarray  # (n, 8 or 20) address + port
    msg: np.ndarray  # (n, 16 or 28) store address + port + physical offset: the offset msg id


@dataclass
class _Headers:
    """Native-endian header fields of all records, in record order."""

    total_size: np.ndarray
    magic: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    sysflag: np.ndarray
    born_timestamp: np.ndarray
    store_timestamp: np.ndarray
    reconsume_times: np.ndarray
    body_len: np.ndarray
    header_size: np.ndarray
    body_head: np.ndarray  # V12: the first body bytes, for the body's views
    hosts: list[_HostBytes]


def _read_group(src: _Source, starts: np.ndarray, layout: _Layout) -> _Headers:
    n = len(starts)
    dtype = layout.dtype
    numeric = {name: np.empty(n, native) for name, native in _NUMERIC_FIELDS.items()}
    body_head = np.empty(n, dtype["body_head"])
    born = np.empty(n, dtype["born_host"])
    msg = np.empty(n, [("store", dtype["store_host"]), ("offset", ">i8")])
    for lo in range(0, n, _CHUNK_RECORDS):
        block = src.gather(starts[lo : lo + _CHUNK_RECORDS], dtype)
        part = slice(lo, lo + len(block))
        for name, column in numeric.items():
            column[part] = block[name]  # converts big-endian to native
        body_head[part] = block["body_head"]
        born[part] = block["born_host"]
        msg["store"][part] = block["store_host"]
        msg["offset"][part] = block["physical_offset"]  # stays big-endian: it is hex-printed
    return _Headers(
        **numeric,
        header_size=np.full(n, layout.header_size, np.int64),
        body_head=body_head,
        hosts=[_HostBytes(None, _byte_matrix(born), _byte_matrix(msg))],
    )


def _byte_matrix(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8).reshape(len(values), values.dtype.itemsize)


def _read_headers(src: _Source, starts: np.ndarray) -> _Headers:
    """Read every header as if both hosts were IPv4; re-read groups flagged otherwise."""
    heads = _read_group(src, starts, _layout_of(0))
    variant = (heads.sysflag >> _HOST_BITS_SHIFT) & 3
    if not variant.any():
        return heads
    groups = [(rows, v) for v in range(4) if (rows := np.flatnonzero(variant == v)).size]
    parts = [_read_group(src, starts[rows], _layout_of(v)) for rows, v in groups]
    inverse = _inverse_order([rows for rows, _ in groups], len(starts))
    merged = {
        name: np.concatenate([getattr(part, name) for part in parts])[inverse]
        for name in [*_NUMERIC_FIELDS, "header_size", "body_head"]
    }
    hosts = [
        _HostBytes(rows, p.hosts[0].born, p.hosts[0].msg)
        for (rows, _), p in zip(groups, parts, strict=True)
    ]
    return _Headers(**merged, hosts=hosts)


def _inverse_order(groups: list[np.ndarray], n: int) -> np.ndarray:
    """Where each record of the batch sits in the concatenation of ``groups`` (record rows)."""
    inverse = np.empty(n, np.int64)
    inverse[np.concatenate(groups)] = np.arange(n)
    return inverse


def _host_columns(hosts: list[_HostBytes], n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """bornHost, storeHost and msgId, per layout group, then put back in record order."""
    columns = []
    for group in hosts:
        born = _Distinct(group.born).host_strings()
        store = _Distinct(group.msg[:, :-8]).host_strings()
        columns.append((born, store, _hex_strings(group.msg)))
    if len(hosts) == 1:
        return columns[0]
    inverse = _inverse_order([g.rows for g in hosts if g.rows is not None], n)
    born, store, msg_id = (
        pa.concat_arrays(list(c)).take(inverse) for c in zip(*columns, strict=True)
    )
    return born, store, msg_id


# --- hosts and message ids ---------------------------------------------------------------


class _Distinct:
    """The distinct rows of an (n, 8) IPv4 or (n, 20) IPv6 address+port byte matrix.

    A batch holds few distinct hosts (one broker, a few producer connections), so each is
    formatted once and spread to its records.
    """

    def __init__(self, raw: np.ndarray) -> None:
        n, width = raw.shape
        words = raw.view(np.uint32)  # widths 8 and 20: compare 4 bytes at a time
        if n and (words == words[0]).all():  # one host for the whole batch: the broker, usually
            self.rows = raw[:1].copy()
            self.codes = pa.array(np.zeros(n, np.int32))
            return
        raw = np.ascontiguousarray(raw)
        if width == IPV4_HOST:  # hashing uint64s is faster than fixed-size binaries
            keys = pa.array(raw.view(np.uint64).ravel())
        else:
            keys = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), n, [None, pa.py_buffer(raw)]
            )
        encoded = keys.dictionary_encode()
        count = len(encoded.dictionary)
        distinct = np.frombuffer(encoded.dictionary.buffers()[1], np.uint8, count * width)
        self.rows = distinct.reshape(count, width)
        self.codes = encoded.indices  # int32 code of each record's host

    def host_strings(self) -> pa.Array:
        if self.rows.shape[1] != IPV4_HOST:  # IPv6 text has compression rules (::)
            texts = pa.array([decode_host(bytes(row)) for row in self.rows], pa.string())
        elif len(self.rows) > _FEW_HOSTS:
            texts = _format_ipv4(self.rows)
        else:  # a few hosts are quicker in Python than the fixed cost of kernels
            ipv4 = _IPV4.iter_unpack(self.rows.tobytes())
            texts = pa.array([f"{a}.{b}.{c}.{d}:{port}" for a, b, c, d, port in ipv4])
        if len(texts) == 1:
            return _repeat(texts[0].as_py().encode(), len(self.codes))
        return texts.take(self.codes)


_FEW_HOSTS = 64
_IPV4 = struct.Struct(">BBBBi")


def _format_ipv4(raw: np.ndarray) -> pa.Array:
    octets = [pc.cast(pa.array(raw[:, k]), pa.string()) for k in range(4)]
    port = np.ascontiguousarray(raw[:, 4:8]).view(">i4").ravel().astype(np.int32)
    address = pc.binary_join_element_wise(*octets, ".")
    return pc.binary_join_element_wise(address, pc.cast(pa.array(port), pa.string()), ":")


def _repeat(value: bytes, n: int) -> pa.Array:
    """A string array of ``n`` copies of ``value`` (one topic or host for the whole batch)."""
    if n * len(value) >= 1 << 31:
        raise InvalidArgumentError(f"{n} records are too many for one batch; decode fewer")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(value))
    data = np.tile(np.frombuffer(value, np.uint8), n)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _hex_table() -> np.ndarray:
    """Upper-case hex of every 2-byte pair, as native uint32 (4 ASCII chars) per uint16 key."""
    pair_hex = np.frombuffer("".join(f"{b:02X}" for b in range(256)).encode(), np.uint16)
    pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    return np.ascontiguousarray(pair_hex[pairs]).view(np.uint32).ravel()


_HEX_OF_PAIR = _hex_table()


def _hex_strings(raw: np.ndarray) -> pa.Array:
    """Upper-case hex text of each row of an (n, even width) byte matrix, as strings."""
    n, width = raw.shape
    text = _HEX_OF_PAIR[np.ascontiguousarray(raw).view(np.uint16)]  # 4 ASCII chars per uint32
    if n * 2 * width >= 1 << 31:
        raise InvalidArgumentError(f"{n} records are too many for one batch; decode fewer")
    bounds = np.arange(n + 1, dtype=np.int32) * np.int32(2 * width)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(bounds), pa.py_buffer(text)])


# --- finding records -----------------------------------------------------------------------


@dataclass(frozen=True)
class RecordIndex:
    """Where each record of a buffer starts and how long it is (int64 arrays)."""

    starts: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


_TOTALSIZE = struct.Struct(">i")


def _walk(src: _Source) -> tuple[np.ndarray, np.ndarray]:
    """Follow the TOTALSIZE chain; returns starts and sizes, unchecked.

    The chain is inherently sequential, so this is the one Python loop per record of the
    decoder, kept to a bare append and add. Every size is checked afterwards, vectorised;
    garbage sizes cannot loop forever because the loop is bounded by the most records the
    buffer could hold. When the chain does not end exactly at the end of the buffer, the last
    entry is the position where it broke, with size 0 (so validation reports it).
    """
    end = len(src)
    starts = array("q")
    append = starts.append
    unpack = _TOTALSIZE.unpack_from
    buf = memoryview(src.buffer)  # a memoryview unpacks ~1.5x faster than a pa.Buffer
    pos = 0
    try:
        for _ in range(end // MIN_RECORD_SIZE + 1):
            append(pos)
            pos += unpack(buf, pos)[0]
    except struct.error:  # fewer than 4 bytes at pos: the clean end, or a torn record
        pass
    positions = np.frombuffer(starts, dtype=np.int64) if starts else np.zeros(1, np.int64)
    sizes = np.diff(positions)
    if positions[-1] == end:
        return positions[:-1], sizes
    return positions, np.append(sizes, 0)


class _FirstBad:
    """Finds the first corrupt record across several checks.

    Each check only looks at records before the first bad one found so far, so the record
    reported is the first of the buffer whatever check catches it, and later checks never
    compute positions from fields of a record already known to be garbage.
    """

    def __init__(self, starts: np.ndarray) -> None:
        self.starts = starts
        self.ok = len(starts)  # records [0, ok) passed every check so far
        self.message = ""

    def check(self, bad: np.ndarray, describe) -> None:
        hits = np.flatnonzero(bad[: self.ok])
        if hits.size:
            self.ok = int(hits[0])
            self.message = describe(self.ok)

    def raise_if_bad(self) -> None:
        if self.ok < len(self.starts):
            raise CorruptDataError(
                f"record {self.ok} at byte {int(self.starts[self.ok])}: {self.message}; the "
                "buffer is corrupt or does not hold whole commit-log records from its start"
            )


def _check_bounds(first_bad: _FirstBad, sizes: np.ndarray, end: int) -> None:
    starts = first_bad.starts
    first_bad.check(
        (starts < 0) | (sizes < MIN_RECORD_SIZE) | (starts > end - sizes),
        lambda i: (
            f"size {int(sizes[i])} does not fit: need at least {MIN_RECORD_SIZE} bytes and "
            f"{end - int(starts[i])} are left in the buffer"
        ),
    )


def _check_magic(first_bad: _FirstBad, magic: np.ndarray) -> None:
    first_bad.check(
        (magic != MAGIC_V1) & (magic != MAGIC_V2),
        lambda i: (
            f"bad magic code 0x{int(magic[i]):08X} (expected 0x{MAGIC_V1:08X} or 0x{MAGIC_V2:08X})"
        ),
    )


def index_records(buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer) -> RecordIndex:
    """Find every record of a buffer of concatenated records by walking TOTALSIZE.

    Raises CorruptDataError naming the first record whose size or magic code is wrong.

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> one = encode_record(Record(topic="T", queue_id=0, body=b"x"))
    >>> index_records(one + one).starts.tolist()
    [0, 93]
    """
    src = _Source(buf)
    starts, sizes = _walk(src)
    first_bad = _FirstBad(starts)
    _check_bounds(first_bad, sizes, len(src))
    ok = first_bad.ok
    magic = src.gather(starts[:ok] + POS_MAGIC, np.dtype(">u4")).astype(np.uint32)
    _check_magic(first_bad, magic)
    first_bad.raise_if_bad()
    return RecordIndex(starts, sizes)


# --- the tail: topic and properties ------------------------------------------------------

_TOPIC_V1 = np.dtype([("topic_len", "u1"), ("topic_head", f"V{HEAD_BYTES}")])
_TOPIC_V2 = np.dtype([("topic_len", ">u2"), ("topic_head", f"V{HEAD_BYTES}")])
_PROPS = np.dtype([("props_len", ">u2"), ("props_head", f"V{HEAD_BYTES}")])


def _tail_dtype(length_field: str, topic_len: int) -> np.dtype:
    """Everything after the body when the topic length is known: its length field, the topic,
    the properties length and the first property bytes. ``topic_head`` overlaps ``topic``: it
    is the topic's view head (bytes past a short topic are masked when views are built)."""
    at = np.dtype(length_field).itemsize
    return np.dtype(
        {
            "names": ["topic_len", "topic", "topic_head", "props_len", "props_head"],
            "formats": [length_field, f"V{max(topic_len, 1)}", f"V{HEAD_BYTES}", ">u2", "V12"],
            "offsets": [0, at, at, at + topic_len, at + topic_len + 2],
            "itemsize": at + max(topic_len, 1) + 2 + HEAD_BYTES,
        }
    )


@dataclass
class _TailFields:
    topic_len: np.ndarray
    topic_head: np.ndarray
    props_len: np.ndarray  # as stored in the record
    props_head: np.ndarray
    topic: bytes | None  # the topic of every record, when they all have the same one


def _read_tail(src: _Source, pos: np.ndarray, v2: np.ndarray) -> _TailFields:
    """Read the fields after each body; ``pos`` is where the topic length field starts."""
    if len(pos) and (v2 == v2[0]).all():
        # Records of a batch usually share their topic; guessing its length from the first
        # record lets one gather read all the tail fields of every record.
        length_field = ">u2" if v2[0] else "u1"
        guess = int(src.gather(pos[:1], np.dtype(length_field))[0])
        block = src.gather(pos, _tail_dtype(length_field, guess))
        if (block["topic_len"] == guess).all():
            topics = block["topic"]
            same = guess > 0 and bool((topics == topics[0]).all())
            return _TailFields(
                block["topic_len"].astype(np.int64),
                block["topic_head"],
                block["props_len"].astype(np.int64),
                block["props_head"],
                bytes(topics[0]) if same else None,
            )
    topics = src.gather(pos, _TOPIC_V1)
    if v2.any():
        topics = topics.astype(_TOPIC_V2)  # same names; the v2 rows are re-read
        topics[v2] = src.gather(pos[v2], _TOPIC_V2)
    topic_len = topics["topic_len"].astype(np.int64)
    props = src.gather(pos + 1 + v2 + topic_len, _PROPS)
    return _TailFields(
        topic_len,
        topics["topic_head"],
        props["props_len"].astype(np.int64),
        props["props_head"],
        None,
    )


@dataclass
class _Tail:
    """Positions, lengths and view heads of the topic and properties of every record."""

    topic_pos: np.ndarray
    topic_len: np.ndarray
    topic_head: np.ndarray
    topic: bytes | None
    props_pos: np.ndarray
    props_len: np.ndarray
    props_head: np.ndarray


def _validate(src: _Source, starts: np.ndarray, sizes: np.ndarray) -> tuple[_Headers, _Tail]:
    """Read and cross-check every length field; raise on the first record that is corrupt."""
    first_bad = _FirstBad(starts)
    _check_bounds(first_bad, sizes, len(src))
    ok = first_bad.ok
    heads = _read_headers(src, starts[:ok])
    _check_magic(first_bad, heads.magic)
    first_bad.check(
        heads.total_size != sizes[:ok],
        lambda i: f"TOTALSIZE field says {int(heads.total_size[i])}, expected {int(sizes[i])}",
    )
    v2 = heads.magic == MAGIC_V2
    length_field = 1 + v2.astype(np.int64)
    fixed = heads.header_size + length_field + 2  # everything but body, topic, properties
    first_bad.check(
        (heads.body_len < 0) | (heads.body_len > sizes[:ok] - fixed),
        lambda i: (
            f"body length {int(heads.body_len[i])} overruns the record of {int(sizes[i])} bytes"
        ),
    )
    ok = first_bad.ok
    topic_field = starts[:ok] + heads.header_size[:ok] + heads.body_len[:ok]
    fields = _read_tail(src, topic_field, v2[:ok])
    props_len = sizes[:ok] - fixed[:ok] - heads.body_len[:ok] - fields.topic_len
    first_bad.check(
        props_len < 0,
        lambda i: (
            f"topic length {int(fields.topic_len[i])} overruns the record of {int(sizes[i])} bytes"
        ),
    )
    first_bad.check(
        fields.props_len != props_len,
        lambda i: (
            f"properties length field says {int(fields.props_len[i])} but "
            f"{int(props_len[i])} bytes are left in the record"
        ),
    )
    first_bad.raise_if_bad()
    topic_pos = topic_field + length_field
    return heads, _Tail(
        topic_pos=topic_pos,
        topic_len=fields.topic_len,
        topic_head=fields.topic_head,
        topic=fields.topic,
        props_pos=topic_pos + fields.topic_len + 2,
        props_len=props_len,
        props_head=fields.props_head,
    )


def _topic_column(src: _Source, tail: _Tail) -> pa.Array:
    if tail.topic is not None and _is_utf8(tail.topic):
        return _repeat(tail.topic, len(tail.topic_len))  # one topic for the batch: no copying
    raw = src.values(tail.topic_pos, tail.topic_len, tail.topic_head)
    return _to_strings(raw)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _to_strings(raw: pa.Array) -> pa.Array:
    """UTF-8 strings; invalid bytes become U+FFFD, as in the reference decoder."""
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        texts = [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()]
        return pa.array(texts, pa.string())


# --- properties ----------------------------------------------------------------------------


def _properties_columns(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The properties map plus the TAGS and KEYS columns (null where the property is absent)."""
    fast = _split_properties(props)
    if fast is None:
        return _properties_columns_slow(props)
    offsets, keys, values = fast
    mapped = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    tags_at, keys_at = _find_names(keys, TAGS, KEYS)
    return mapped, _lookup(values, offsets, tags_at), _lookup(values, offsets, keys_at)


def _split_properties(props: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array] | None:
    """Split ``name\\x01value\\x02...`` of all records with numpy; None if any is irregular.

    The fast path needs every item to be ``name\\x01value\\x02`` (what encoders write). Values
    holding \\x01, empty items, a missing final \\x02 or invalid UTF-8 go to the slow path,
    which reproduces :func:`rmq_spark.codec.properties.decode_properties` exactly.
    """
    n = len(props)
    offsets = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
    if offsets[-1] == offsets[0]:
        empty = pa.array([], pa.string())
        return np.zeros(n + 1, np.int32), empty, empty
    data_buffer = props.buffers()[2]
    data = np.frombuffer(data_buffer, np.uint8, int(offsets[-1]))
    seps = np.flatnonzero(data < 3)  # \x01 and \x02; a rare NUL byte just takes the slow path
    kinds = data[seps]
    regular = (
        offsets[0] == 0
        and len(seps) % 2 == 0
        and (kinds[0::2] == 1).all()
        and (kinds[1::2] == 2).all()
    )
    nonempty_ends = offsets[1:][offsets[1:] > offsets[:-1]]
    if not regular or not (data[nonempty_ends - 1] == 2).all():
        return None
    if not _is_utf8_buffer(data_buffer, len(data)):
        return None
    # Tokens key, \x01, value, \x02 for every item; take() gathers keys and values in C++.
    # Pieces of valid UTF-8 cut at ASCII separators are valid UTF-8: no need to check again.
    cuts = np.empty(2 * len(seps) + 1, np.int32)
    cuts[0] = 0
    cuts[1::2] = seps
    np.add(seps, 1, out=cuts[2::2], casting="unsafe")
    tokens = pa.Array.from_buffers(
        pa.string(), 2 * len(seps), [None, pa.py_buffer(cuts), data_buffer]
    )
    key_tokens = np.arange(0, 2 * len(seps), 4)
    keys = tokens.take(key_tokens)
    values = tokens.take(key_tokens + 2)
    return _map_offsets(seps[1::2], offsets), keys, values


def _map_offsets(item_ends: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many items come before each record: map offsets from the items' \\x02 positions.

    Records of a batch usually carry the same number ``k`` of properties; then checking that
    every ``k``-th item ends its record is much cheaper than a binary search per record.
    """
    n = len(offsets) - 1
    k, extra = divmod(len(item_ends), n)
    if k and not extra and (item_ends[k - 1 :: k] == offsets[1:] - 1).all():
        return np.arange(0, len(item_ends) + 1, k, dtype=np.int32)
    return np.searchsorted(item_ends, offsets).astype(np.int32)


def _is_utf8_buffer(buffer: pa.Buffer, length: int) -> bool:
    """Whether the first ``length`` bytes are valid UTF-8, checked by Arrow in one pass."""
    whole = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(np.array([0, length], np.int32)), buffer]
    )
    try:
        whole.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _find_names(keys: pa.Array, *names: str) -> list[np.ndarray]:
    """Indices of the keys equal to each of ``names``, which are 4-byte ASCII names.

    One pass for all names: only keys of 4 bytes can match, and those compare as one uint32
    read straight from the keys' data, cheaper than a string comparison kernel per name.
    """
    words = [np.frombuffer(name.encode(), "<u4")[0] for name in names]  # raises unless 4 B
    bounds = np.frombuffer(keys.buffers()[1], np.int32, len(keys) + 1, keys.offset * 4)
    four = np.flatnonzero(np.diff(bounds) == 4)
    if not len(four):
        return [four] * len(names)
    data = np.frombuffer(keys.buffers()[2], np.uint8, int(bounds[-1]))
    # A uint32 at every byte offset; a 4-byte key starts at most 4 bytes before the end.
    at_offset = np.ndarray((len(data) - 3,), "<u4", buffer=data, strides=(1,))
    found = at_offset[bounds[four]]
    return [four[found == word] for word in words]


def _lookup(values: pa.Array, offsets: np.ndarray, hits: np.ndarray) -> pa.Array:
    """Each record's value at the item indices ``hits``, null where the record has none
    (the last one where it has several).
    """
    n = len(offsets) - 1
    if len(hits) == n and ((hits >= offsets[:-1]) & (hits < offsets[1:])).all():
        return values.take(hits)  # exactly once in every record: no record index needed
    owner = np.repeat(np.arange(n), np.diff(offsets))  # record of each property
    index = np.full(n, -1, np.int64)
    index[owner[hits]] = hits  # numpy assigns in order: a repeated name keeps its last value
    return values.take(pa.array(index, mask=index < 0))


def _properties_columns_slow(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    decoded = [decode_properties(raw) for raw in props.to_pylist()]
    mapped = pa.array([list(d.items()) for d in decoded], PROPERTIES_TYPE)
    tags = pa.array([d.get(TAGS) for d in decoded], pa.string())
    keys = pa.array([d.get(KEYS) for d in decoded], pa.string())
    return mapped, tags, keys


# --- decoding --------------------------------------------------------------------------------


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


def _known_positions(src: _Source, starts, sizes) -> tuple[np.ndarray, np.ndarray]:
    if starts is None:
        sizes = np.asarray(sizes, dtype=np.int64)
        return np.cumsum(sizes) - sizes, sizes
    starts = np.asarray(starts, dtype=np.int64)
    if sizes is None:
        sizes = src.gather(np.clip(starts, 0, None), np.dtype(">i4")).astype(np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if starts.shape != sizes.shape or starts.ndim != 1:
        raise InvalidArgumentError(
            f"starts {starts.shape} and sizes {sizes.shape} must be 1-D arrays of one length"
        )
    return starts, sizes


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
    src = _Source(buf)
    if starts is None and sizes is None:
        starts, sizes = _walk(src)
    else:
        starts, sizes = _known_positions(src, starts, sizes)
    if len(starts) == 0:
        return _empty_batch()
    heads, tail = _validate(src, starts, sizes)
    body_pos = starts + heads.header_size
    body = src.values(body_pos, heads.body_len, heads.body_head)
    born_host, store_host, msg_id = _host_columns(heads.hosts, len(starts))
    if check_crc:
        _check_crc(body, heads.body_crc, starts)
    props = src.values(tail.props_pos, tail.props_len, tail.props_head)
    properties, tags, keys = _properties_columns(props)
    columns = [
        _topic_column(src, tail),
        heads.queue_id,
        heads.queue_offset,
        heads.physical_offset,
        msg_id,
        tags,
        keys,
        body,
        properties,
        heads.born_timestamp,
        heads.store_timestamp,
        born_host,
        store_host,
        heads.reconsume_times,
        heads.sysflag,
        heads.flag,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in RECORD_SCHEMA], schema=RECORD_SCHEMA
    )
