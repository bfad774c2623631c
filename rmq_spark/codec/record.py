"""The commit-log record: RocketMQ's on-disk (and 4.x pull-response) message layout.

All integers are big-endian. With IPv4 hosts the fixed part is 88 bytes, then:
``BODY | TOPICLEN (1 byte in v1, 2 in v2) | TOPIC | PROPERTIESLEN (2) | PROPERTIES``.
An IPv6 born (store) host takes 20 bytes instead of 8 and is flagged in SYSFLAG.

This module is the readable reference: one record at a time, pure functions. The fast,
batch-wise paths (:mod:`rmq_spark.codec.batch_encode`, :mod:`rmq_spark.codec.arrow_decode`)
are tested against it.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from rmq_spark.codec.hex_ids import hex_ids
from rmq_spark.errors import CorruptDataError, InvalidArgumentError

MAGIC_V1 = 0xDAA320A7  # topic length stored in 1 byte
MAGIC_V2 = 0xDAA320AB  # topic length stored in 2 bytes (topics over 127 bytes)
BLANK_MAGIC = 0xCBD43194  # end-of-file filler: [remaining size, BLANK_MAGIC]
BLANK_MARKER_SIZE = 8

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
# The transaction type held in SYSFLAG_TRANSACTION_MASK (RocketMQ's MessageSysFlag):
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4  # a half message, waiting for commit or rollback
TRANSACTION_COMMIT_TYPE = 0x8  # a committed transactional message in its real topic
TRANSACTION_ROLLBACK_TYPE = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_INNER_BATCH = 0x80

MAX_V1_TOPIC_BYTES = 127

# Byte positions that do not depend on host address families.
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48

HEAD = struct.Struct(">iIiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 48 bytes
IPV4_HOST = 8
IPV6_HOST = 20
# Everything except the two hosts and the variable parts, plus 1 byte v1 topic length:
# 48 (head) + 8 store ts + 4 reconsume + 8 prepared tx + 4 bodylen + 1 topiclen + 2 proplen
FIXED_WITHOUT_HOSTS = 75


# Every fixed field up to and including BODYLEN, big-endian, as a numpy record layout. The
# batch encoder fills these columns and the vectorised decoder reads them back.
_HEADER_FIELDS = (
    ("total_size", ">i4"),
    ("magic", ">u4"),
    ("body_crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("physical_offset", ">i8"),
    ("sysflag", ">i4"),
    ("born_timestamp", ">i8"),
    ("born_host", "V{born}"),
    ("store_timestamp", ">i8"),
    ("store_host", "V{store}"),
    ("reconsume_times", ">i4"),
    ("prepared_tx_offset", ">i8"),
    ("body_len", ">i4"),
)


@functools.cache
def header_dtype(born_host_size: int, store_host_size: int, extra: tuple = ()) -> np.dtype:
    """The numpy layout of a record's fixed fields for the given host sizes (8 or 20),
    optionally followed by ``extra`` (name, dtype) fields."""
    fields = [
        (name, kind.format(born=born_host_size, store=store_host_size))
        for name, kind in _HEADER_FIELDS
    ]
    return np.dtype([*fields, *extra])


def transaction_type(sysflag: int) -> int:
    """The TRANSACTION_*_TYPE value of a SYSFLAG."""
    return sysflag & SYSFLAG_TRANSACTION_MASK


def with_transaction_type(sysflag: int, kind: int) -> int:
    """``sysflag`` with its transaction type replaced by ``kind`` (resetTransactionValue)."""
    return (sysflag & ~SYSFLAG_TRANSACTION_MASK) | (kind & SYSFLAG_TRANSACTION_MASK)


def crc32_body(body: bytes) -> int:
    """RocketMQ's BODYCRC: ``crc32(body) & 0x7FFFFFFF``."""
    return zlib.crc32(body) & 0x7FFFFFFF


def host_size(sysflag: int, v6_bit: int) -> int:
    return IPV6_HOST if sysflag & v6_bit else IPV4_HOST


#: bytes of a record's head that always cover its store timestamp
STORE_TIMESTAMP_HEAD = POS_BORNHOST + IPV6_HOST + 8


def store_timestamp_in(head: bytes | memoryview) -> int | None:
    """The store timestamp in a record's first :data:`STORE_TIMESTAMP_HEAD` bytes, or None
    when they do not start a message record (a blank filler, zeros, garbage)."""
    if len(head) < POS_BORNHOST + IPV4_HOST + 8:
        return None
    (magic,) = struct.unpack_from(">I", head, POS_MAGIC)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return None
    (sysflag,) = struct.unpack_from(">i", head, POS_SYSFLAG)
    pos = POS_BORNHOST + host_size(sysflag, SYSFLAG_BORNHOST_V6)
    if len(head) < pos + 8:
        return None
    return struct.unpack_from(">q", head, pos)[0]


def record_size(body_len: int, topic_len: int, props_len: int, sysflag: int = 0) -> int:
    """Total record size; v2 (2-byte topic length) is implied by ``topic_len`` > 127."""
    size = FIXED_WITHOUT_HOSTS + body_len + topic_len + props_len
    size += host_size(sysflag, SYSFLAG_BORNHOST_V6) + host_size(sysflag, SYSFLAG_STOREHOST_V6)
    return size + (1 if topic_len > MAX_V1_TOPIC_BYTES else 0)


def check_topic_length(topic_bytes: int) -> None:
    if topic_bytes > 0xFFFF:
        raise InvalidArgumentError(
            f"topic of {topic_bytes} bytes is too long to encode (at most 65535); "
            "use a shorter topic name"
        )


@functools.lru_cache(maxsize=1024)
def encode_host(host: str) -> tuple[bytes, bool]:
    """``"ip:port"`` (``"[v6]:port"`` for IPv6) to the record's address bytes and a v6 flag."""
    addr, port = parse_host(host)
    ip = ipaddress.ip_address(addr)
    return ip.packed + struct.pack(">i", port), ip.version == 6


def parse_host(host: str) -> tuple[str, int]:
    try:
        addr, _, port_text = host.rpartition(":")
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(port_text)
        bracketed = addr.startswith("[") and addr.endswith("]")
        if bracketed:
            addr = addr[1:-1]
        if (ipaddress.ip_address(addr).version == 6) != bracketed:
            raise ValueError(addr)  # IPv6 needs brackets, IPv4 must not have them
        port = int(port_text)
    except (ValueError, AttributeError):
        raise InvalidArgumentError(
            f"host {host!r} is not 'ip:port' (IPv6 as '[addr]:port') with a port 0-65535"
        ) from None
    return addr, port


def decode_host(data: bytes) -> str:
    ip = ipaddress.ip_address(data[:-4])
    port = struct.unpack(">i", data[-4:])[0]
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


@dataclass
class Record:
    """One decoded commit-log record (also the input of :func:`encode_record`)."""

    topic: str
    queue_id: int
    body: bytes
    properties: bytes = b""
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    body_crc: int = field(default=-1, compare=False)

    @property
    def size(self) -> int:
        sysflag = (SYSFLAG_BORNHOST_V6 if encode_host(self.born_host)[1] else 0) | (
            SYSFLAG_STOREHOST_V6 if encode_host(self.store_host)[1] else 0
        )
        return record_size(len(self.body), len(self.topic.encode()), len(self.properties), sysflag)


def encode_record(rec: Record) -> bytes:
    """Encode one record exactly as RocketMQ lays it out. Host families set SYSFLAG bits."""
    born, born_v6 = encode_host(rec.born_host)
    store, store_v6 = encode_host(rec.store_host)
    sysflag = rec.sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    sysflag |= (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    topic = rec.topic.encode("utf-8")
    check_topic_length(len(topic))
    if len(rec.properties) > 0x7FFF:
        raise InvalidArgumentError(f"properties of {len(rec.properties)} bytes exceed 32767")
    v2 = len(topic) > MAX_V1_TOPIC_BYTES
    size = record_size(len(rec.body), len(topic), len(rec.properties), sysflag)
    parts = [
        HEAD.pack(
            size,
            MAGIC_V2 if v2 else MAGIC_V1,
            crc32_body(rec.body),
            rec.queue_id,
            rec.flag,
            rec.queue_offset,
            rec.physical_offset,
            sysflag,
            rec.born_timestamp,
        ),
        born,
        struct.pack(">q", rec.store_timestamp),
        store,
        struct.pack(">iqi", rec.reconsume_times, rec.prepared_tx_offset, len(rec.body)),
        rec.body,
        struct.pack(">H", len(topic)) if v2 else struct.pack(">B", len(topic)),
        topic,
        struct.pack(">H", len(rec.properties)),
        rec.properties,
    ]
    data = b"".join(parts)
    assert len(data) == size
    return data


def decode_record(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = True) -> Record:
    """Decode the record starting at ``pos``; raise CorruptDataError if it is not valid."""
    mv = memoryview(buf)
    end = len(mv)
    if end - pos < HEAD.size:
        raise CorruptDataError(f"record at {pos}: only {end - pos} bytes left")
    size, magic = struct.unpack_from(">iI", mv, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptDataError(f"record at {pos}: bad magic code 0x{magic:08X}")
    if size < FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST or pos + size > end:
        raise CorruptDataError(f"record at {pos}: size {size} does not fit in {end - pos} bytes")
    try:
        # Bounded to TOTALSIZE: a field that claims more than the record holds fails here.
        return _decode_fields(mv[: pos + size], pos, size, check_crc)
    except (struct.error, ValueError, IndexError) as exc:
        raise CorruptDataError(f"record at {pos}: fields do not fit TOTALSIZE {size}") from exc


def _decode_fields(mv: memoryview, pos: int, size: int, check_crc: bool) -> Record:
    _, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = HEAD.unpack_from(mv, pos)
    p = pos + HEAD.size
    bh = host_size(sysflag, SYSFLAG_BORNHOST_V6)
    born_host = decode_host(bytes(mv[p : p + bh]))
    p += bh
    (store_ts,) = struct.unpack_from(">q", mv, p)
    p += 8
    sh = host_size(sysflag, SYSFLAG_STOREHOST_V6)
    store_host = decode_host(bytes(mv[p : p + sh]))
    p += sh
    reconsume, prepared, body_len = struct.unpack_from(">iqi", mv, p)
    p += 16
    if body_len < 0 or p + body_len > pos + size:
        raise CorruptDataError(f"record at {pos}: body length {body_len} overruns the record")
    body = bytes(mv[p : p + body_len])
    p += body_len
    if magic == MAGIC_V2:
        (topic_len,) = struct.unpack_from(">H", mv, p)
        p += 2
    else:
        topic_len = mv[p]
        p += 1
    topic = bytes(mv[p : p + topic_len]).decode("utf-8", errors="replace")
    p += topic_len
    (props_len,) = struct.unpack_from(">H", mv, p)
    p += 2
    props = bytes(mv[p : p + props_len])
    p += props_len
    if p - pos != size:
        raise CorruptDataError(f"record at {pos}: fields take {p - pos} bytes, TOTALSIZE {size}")
    if check_crc and crc32_body(body) != crc:
        raise CorruptDataError(f"record at {pos}: body CRC mismatch (stored {crc})")
    return Record(
        topic=topic,
        queue_id=qid,
        body=body,
        properties=props,
        flag=flag,
        queue_offset=qoff,
        physical_offset=phys,
        sysflag=sysflag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
        body_crc=crc,
    )


def iter_records(buf: bytes | memoryview, *, check_crc: bool = True) -> Iterator[Record]:
    """Decode every record of a buffer of concatenated records, in order."""
    pos = 0
    end = len(buf)
    while pos < end:
        yield decode_record(buf, pos, check_crc=check_crc)
        pos += struct.unpack_from(">i", buf, pos)[0]  # the stored TOTALSIZE


#: below this many offset message ids, formatting each one is cheaper than the numpy set-up
_VECTOR_IDS = 16
#: an offset is written as its 64 bits, two's complement (Java's long)
_LONG_BITS = (1 << 64) - 1


def offset_msg_id_prefix(store_host: str) -> str:
    """The part every offset message id of one store shares: its IP and port as upper-case
    hex (16 characters for IPv4, 40 for IPv6).

    >>> offset_msg_id_prefix("127.0.0.1:10911")
    '7F00000100002A9F'
    """
    addr, _ = encode_host(store_host)
    return addr.hex().upper()


def offset_msg_id(store_host: str, physical_offset: int) -> str:
    """RocketMQ's offset message id: store IP + port + physical offset, upper-case hex.

    IPv4 gives 32 hex characters (4 + 4 + 8 bytes); IPv6 gives 56.

    >>> offset_msg_id("127.0.0.1:10911", 255)
    '7F00000100002A9F00000000000000FF'
    """
    return f"{offset_msg_id_prefix(store_host)}{physical_offset & _LONG_BITS:016X}"


def offset_msg_ids(prefix: str, physical_offsets: Sequence[int] | np.ndarray) -> list[str]:
    """:func:`offset_msg_id` of many offsets of one store, given its
    :func:`offset_msg_id_prefix` (many at once through :func:`~rmq_spark.codec.hex_ids.hex_ids`).

    >>> offset_msg_ids("7F00000100002A9F", [0, 255])[1]
    '7F00000100002A9F00000000000000FF'
    """
    if len(physical_offsets) < _VECTOR_IDS or not prefix.isascii():
        if isinstance(physical_offsets, np.ndarray):
            physical_offsets = physical_offsets.tolist()
        return [f"{prefix}{offset & _LONG_BITS:016X}" for offset in physical_offsets]
    return hex_ids(prefix, np.asarray(physical_offsets, dtype=np.int64), 16)


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of :func:`offset_msg_id`: (store host, physical offset)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) not in (16, 28):
        raise InvalidArgumentError(
            f"message id {msg_id!r} is not an offset message id (32 or 56 hex characters)"
        )
    return decode_host(raw[:-8]), struct.unpack(">q", raw[-8:])[0]
