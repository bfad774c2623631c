"""Validation of every length field, and the topic and properties after each body."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import overload

import numpy as np

from rmq_spark.codec.arrow_decode.headers import Headers, read_headers
from rmq_spark.codec.arrow_decode.positions import FirstBad, check_bounds, check_magic
from rmq_spark.codec.arrow_decode.source import HEAD_BYTES, Source, all_equal_rows
from rmq_spark.codec.record import MAGIC_V2

_TOPIC_V1 = np.dtype([("topic_len", "u1"), ("topic_head", f"V{HEAD_BYTES}")])
_TOPIC_V2 = np.dtype([("topic_len", ">u2"), ("topic_head", f"V{HEAD_BYTES}")])
_PROPS = np.dtype([("props_len", ">u2"), ("props_head", f"V{HEAD_BYTES}")])
_LENGTH_FIELDS = {kind: np.dtype(kind) for kind in ("u1", ">u2")}


@functools.lru_cache(maxsize=256)
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


def _read_tail(src: Source, pos: np.ndarray, v2: np.ndarray) -> _TailFields:
    """Read the fields after each body; ``pos`` is where the topic length field starts."""
    if len(pos) and (v2 == v2[0]).all():
        # Records of a batch usually share their topic; guessing its length from the first
        # record lets one gather read all the tail fields of every record.
        length_field = ">u2" if v2[0] else "u1"
        guess = int(src.gather(pos[:1], _LENGTH_FIELDS[length_field])[0])
        block = src.gather(pos, _tail_dtype(length_field, guess))
        if (block["topic_len"] == guess).all():
            topics = block["topic"]
            same = guess > 0 and all_equal_rows(topics)
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
class Tail:
    """Positions, lengths and view heads of the topic and properties of every record."""

    topic_pos: np.ndarray
    topic_len: np.ndarray
    topic_head: np.ndarray
    topic: bytes | None  # the topic of every record, when they all have the same one
    props_pos: np.ndarray
    props_len: np.ndarray
    props_head: np.ndarray


def validate(
    src: Source, starts: np.ndarray, sizes: np.ndarray, *, crc: bool = False
) -> tuple[Headers, Tail]:
    """Read and cross-check every length field; raise on the first record that is corrupt.

    Each step works on the records before the first bad one found so far, so positions are
    never computed from the fields of a record already known to be garbage.
    """
    first_bad = FirstBad(starts)
    check_bounds(first_bad, sizes, len(src))
    starts, sizes = _first(starts, first_bad.ok), _first(sizes, first_bad.ok)
    heads = read_headers(src, starts, crc=crc)
    check_magic(first_bad, heads.magic)
    first_bad.check(
        heads.total_size != sizes,
        lambda i: f"TOTALSIZE field says {int(heads.total_size[i])}, expected {int(sizes[i])}",
    )
    v2 = heads.magic == MAGIC_V2
    length_field = 1 + v2.astype(np.int64) if v2.any() else 1  # a number when all are v1
    fixed = heads.header_size + length_field + 2  # everything but body, topic, properties
    body_len = heads.body_len
    first_bad.check(
        (body_len < 0) | (body_len > sizes - fixed),
        lambda i: f"body length {int(body_len[i])} overruns the record of {int(sizes[i])} bytes",
    )
    ok = first_bad.ok
    starts, sizes, body_len, v2 = (_first(a, ok) for a in (starts, sizes, body_len, v2))
    fixed, length_field = _first(fixed, ok), _first(length_field, ok)
    topic_field = starts + _first(heads.header_size, ok) + body_len
    fields = _read_tail(src, topic_field, v2)
    props_len = sizes - fixed - body_len - fields.topic_len
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
    return heads, Tail(
        topic_pos=topic_pos,
        topic_len=fields.topic_len,
        topic_head=fields.topic_head,
        topic=fields.topic,
        props_pos=topic_pos + fields.topic_len + 2,
        props_len=props_len,
        props_head=fields.props_head,
    )


@overload
def _first(values: np.ndarray, count: int) -> np.ndarray: ...
@overload
def _first(values: int, count: int) -> int: ...
def _first(values: np.ndarray | int, count: int) -> np.ndarray | int:
    """The first ``count`` values of an array (all of them without a copy); a number as is."""
    if isinstance(values, np.ndarray) and count < len(values):
        return values[:count]
    return values
