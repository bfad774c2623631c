"""The fixed-size header of every record, copied out in one gather and made native-endian.

Where the fields sit depends on the address family of the two hosts (flagged in SYSFLAG), so
every header is first read as if both were IPv4 (the usual case) and groups flagged otherwise
are read again with their own layout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from rmq_spark.codec.arrow_decode.source import HEAD_BYTES, Source
from rmq_spark.codec.record import (
    IPV4_HOST,
    IPV6_HOST,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    header_dtype,
)


@dataclass(frozen=True)
class Layout:
    """Where the fixed fields sit for one combination of born/store host address families."""

    born_v6: bool
    store_v6: bool

    @property
    def header_size(self) -> int:
        return 72 + self.born_size + self.store_size

    @property
    def born_size(self) -> int:
        return IPV6_HOST if self.born_v6 else IPV4_HOST

    @property
    def store_size(self) -> int:
        return IPV6_HOST if self.store_v6 else IPV4_HOST

    @functools.cached_property
    def dtype(self) -> np.dtype:
        """Big-endian header fields plus the first 12 body bytes (the body's view head)."""
        return header_dtype(self.born_size, self.store_size, (("body_head", f"V{HEAD_BYTES}"),))


@functools.cache
def layout_of(variant: int) -> Layout:
    """The layout for SYSFLAG's host bits shifted down to 0..3 (0: both hosts IPv4)."""
    return Layout(born_v6=bool(variant & 1), store_v6=bool(variant & 2))


HOST_BITS_SHIFT = 4
assert SYSFLAG_BORNHOST_V6 == 1 << HOST_BITS_SHIFT
assert SYSFLAG_STOREHOST_V6 == 2 << HOST_BITS_SHIFT

# Header fields copied out of every record, with their native dtypes.
NUMERIC_FIELDS = {
    "total_size": np.int64,
    "magic": np.uint32,
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
_WITH_CRC = {**NUMERIC_FIELDS, "body_crc": np.int32}

# Headers are copied this many records at a time, so the copy (~3 MB) is still in cache when
# its fields are byte-swapped out, rather than one whole-batch block written and read once.
CHUNK_RECORDS = 1 << 15


@dataclass
class HostBytes:
    """Raw host fields of one layout group, formatted into strings only once validated."""

    rows: np.ndarray | None  # records of the batch in this group; None: all of them
    born: np.ndarray  # (n, 8 or 20) address + port
    store: np.ndarray  # (n, 8 or 20) address + port
    offset: np.ndarray  # (n, 8) the physical offset, big-endian: the tail of the msg id


@dataclass
class Headers:
    """Native-endian header fields of all records, in record order."""

    total_size: np.ndarray
    magic: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    sysflag: np.ndarray
    born_timestamp: np.ndarray
    store_timestamp: np.ndarray
    reconsume_times: np.ndarray
    body_len: np.ndarray
    header_size: np.ndarray | int  # one number when every record has the same layout
    body_head: np.ndarray  # V12: the first body bytes, for the body's views
    hosts: list[HostBytes]
    body_crc: np.ndarray | None = None  # read only when asked for


def _read_group(src: Source, starts: np.ndarray, layout: Layout, crc: bool) -> Headers:
    n = len(starts)
    dtype = layout.dtype
    fields = _WITH_CRC if crc else NUMERIC_FIELDS
    if n <= CHUNK_RECORDS:  # one block: convert each field straight out of it
        block = src.gather(starts, dtype)
        numeric = {name: block[name].astype(native) for name, native in fields.items()}
        body_head = block["body_head"]  # read once, when the body's views are built
        raw = [np.ascontiguousarray(block[name]) for name in _RAW_FIELDS]
        return _headers(numeric, layout, body_head, raw)
    numeric = {name: np.empty(n, native) for name, native in fields.items()}
    body_head = np.empty(n, dtype["body_head"])
    raw = [np.empty(n, dtype[name]) for name in _RAW_FIELDS]
    for lo in range(0, n, CHUNK_RECORDS):
        block = src.gather(starts[lo : lo + CHUNK_RECORDS], dtype)
        part = slice(lo, lo + len(block))
        for name, column in numeric.items():
            column[part] = block[name]  # converts big-endian to native
        body_head[part] = block["body_head"]
        for name, column in zip(_RAW_FIELDS, raw, strict=True):
            column[part] = block[name]
    return _headers(numeric, layout, body_head, raw)


# Fields kept as stored: the hosts, and the physical offset big-endian as it is hex-printed.
_RAW_FIELDS = ("born_host", "store_host", "physical_offset")


def _headers(numeric: dict, layout: Layout, body_head: np.ndarray, raw: list) -> Headers:
    born, store, offset = (_byte_matrix(column) for column in raw)
    return Headers(
        **numeric,
        header_size=layout.header_size,
        body_head=body_head,
        hosts=[HostBytes(None, born, store, offset)],
    )


def _byte_matrix(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8).reshape(len(values), values.dtype.itemsize)


def read_headers(src: Source, starts: np.ndarray, *, crc: bool = False) -> Headers:
    """Read every header as if both hosts were IPv4; re-read groups flagged otherwise.

    ``crc`` also reads each BODYCRC (``Headers.body_crc``).
    """
    heads = _read_group(src, starts, layout_of(0), crc)
    variant = (heads.sysflag >> HOST_BITS_SHIFT) & 3
    if not variant.any():
        return heads
    groups = [(rows, v) for v in range(4) if (rows := np.flatnonzero(variant == v)).size]
    parts = [_read_group(src, starts[rows], layout_of(v), crc) for rows, v in groups]
    inverse = inverse_order([rows for rows, _ in groups], len(starts))
    names = [*(_WITH_CRC if crc else NUMERIC_FIELDS), "body_head"]
    merged = {
        name: np.concatenate([getattr(part, name) for part in parts])[inverse] for name in names
    }
    sizes = [np.full(len(rows), layout_of(v).header_size) for rows, v in groups]
    merged["header_size"] = np.concatenate(sizes)[inverse]
    hosts = [
        HostBytes(rows, p.hosts[0].born, p.hosts[0].store, p.hosts[0].offset)
        for (rows, _), p in zip(groups, parts, strict=True)
    ]
    return Headers(**merged, hosts=hosts)


def inverse_order(groups: list[np.ndarray], n: int) -> np.ndarray:
    """Where each record of the batch sits in the concatenation of ``groups`` (record rows)."""
    inverse = np.empty(n, np.int64)
    inverse[np.concatenate(groups)] = np.arange(n)
    return inverse
