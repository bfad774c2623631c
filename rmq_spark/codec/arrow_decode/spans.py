"""Where each record's properties are, read from the fewest fields: the lean cousin of
:func:`~rmq_spark.codec.arrow_decode.tail.validate` for a search of the properties alone.

A record's properties end it; where they start follows from SYSFLAG (the hosts' sizes),
the magic code (the topic length's size), BODYLEN, the topic length and PROPERTIESLEN. Each
is one numpy gather over all the records (four in all, each a read of every record at a
place that depends on the one before). A record is ``ok`` when those fields agree with its
size as the decoder checks them; the others (corrupt, or not a record) are left to the
decoder, which says what is wrong with them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rmq_spark.codec.arrow_decode.source import HEAD_BYTES, Source
from rmq_spark.codec.record import (
    IPV4_HOST,
    IPV6_HOST,
    MAGIC_V1,
    MAGIC_V2,
    POS_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)

__all__ = ["properties_sections"]

_HEAD = np.dtype(
    {
        "names": ["total_size", "magic", "sysflag"],
        "formats": [">i4", ">u4", ">i4"],
        "offsets": [0, 4, POS_SYSFLAG],
        "itemsize": POS_SYSFLAG + 4,
    }
)
#: the fixed part before the body without the hosts (its last field is BODYLEN)
_FIXED = 72
_TOPIC_LEN_V2 = np.dtype(">u2")
_PROPS_LEN = np.dtype([("props_len", ">u2"), ("props_head", f"V{HEAD_BYTES}")])


def properties_sections(
    buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer,
    starts: np.ndarray,
    sizes: np.ndarray,
) -> tuple[pa.Array, np.ndarray]:
    """The stored properties of the records at ``starts``/``sizes`` of ``buf``, one binary
    value each (copied out back to back), and the mask of the records whose fields agree
    with their size; the value of any other record is empty."""
    src = Source(buf)
    starts = np.asarray(starts, np.int64)
    ends = starts + np.asarray(sizes, np.int64)
    head = src.gather(_within(starts, src), _HEAD)
    sysflag = head["sysflag"].astype(np.int64)
    born = np.where(sysflag & SYSFLAG_BORNHOST_V6, IPV6_HOST, IPV4_HOST)
    store = np.where(sysflag & SYSFLAG_STOREHOST_V6, IPV6_HOST, IPV4_HOST)
    body_at = starts + _FIXED + born + store
    body_len = src.gather(_within(body_at - 4, src), np.dtype(">i4")).astype(np.int64)
    magic = head["magic"]
    v2 = magic == MAGIC_V2
    topic_field = body_at + body_len
    topic_len = src.gather(_within(topic_field, src), _TOPIC_LEN_V2).astype(np.int64)
    topic_len = np.where(v2, topic_len, topic_len >> 8)  # v1: one byte
    props_field = topic_field + 1 + v2 + topic_len
    props = src.gather(_within(props_field, src), _PROPS_LEN)
    props_at = props_field + 2
    props_len = props["props_len"].astype(np.int64)
    ok = (
        (head["total_size"] == ends - starts)
        & ((magic == MAGIC_V1) | v2)
        & (body_len >= 0)
        & (props_at + props_len == ends)
        & (ends <= len(src))
    )
    if not ok.all():
        props_len = np.where(ok, props_len, 0)
        props_at = np.where(ok, props_at, 0)
    return src.values(props_at, props_len, props["props_head"]), ok


def _within(at: np.ndarray, src: Source) -> np.ndarray:
    """Positions clipped into the buffer (a lying field must not index outside it; the
    record is refused when its fields are compared)."""
    return np.clip(at, 0, max(len(src) - 1, 0))
