"""Typed request headers of the remoting protocol, parsed from ``extFields`` strings.

Pure functions: each takes a request's ``ext`` and returns a frozen value or raises
:class:`~rmq_spark.errors.InvalidArgumentError` naming the field and the bad value.

>>> send_header({"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
...              "g": "1700000000000", "h": "0"}).topic
'T'
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmq_spark.errors import InvalidArgumentError, shown

#: SEND_MESSAGE_V2 (and SEND_BATCH_MESSAGE) carries SEND_MESSAGE's header under one-letter
#: names, to keep every frame of the hottest request small
SEND_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}


INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


#: the fields send_header reads, by their one-letter name
_SEND_READ = tuple(
    (short, name)
    for short, name in SEND_V2_NAMES.items()
    if name not in ("defaultTopic", "defaultTopicQueueNums", "unitMode", "brokerName")
)


def whole(
    ext: Mapping[str, str], name: str, default: int | None = None, bounds: tuple[int, int] = INT64
) -> int:
    """A whole-number field as Java's parseInt/parseLong reads it (``bounds``: INT32 or
    INT64); ``default`` when absent (required when no default)."""
    value = ext.get(name)
    if value is None or value == "":
        if default is None:
            raise InvalidArgumentError(f"the header field {name} is missing")
        return default
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgumentError(
            f"the header field {name}={shown(value)} is not a whole number"
        ) from None
    low, high = bounds
    if not low <= number <= high:
        raise InvalidArgumentError(
            f"the header field {name}={shown(value)} is out of range ({low}..{high})"
        )
    return number


def text(ext: Mapping[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None:
        raise InvalidArgumentError(f"the header field {name} is missing")
    return value


def flag(ext: Mapping[str, str], name: str) -> bool:
    """A boolean field as Java's Boolean.parseBoolean reads it: only "true" is true."""
    return ext.get(name, "").lower() == "true"


@dataclass(frozen=True)
class SendHeader:
    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool


def send_header(ext: Mapping[str, str], *, short_names: bool = True) -> SendHeader:
    """SEND_MESSAGE's header from the one-letter names of SEND_MESSAGE_V2 (or, with
    ``short_names=False``, the long names SEND_MESSAGE and the Go client use)."""
    if short_names:  # only the fields read below, not a renamed copy of every one
        ext = {name: ext[short] for short, name in _SEND_READ if short in ext}
    max_reconsume = ext.get("maxReconsumeTimes")
    return SendHeader(
        producer_group=text(ext, "producerGroup"),
        topic=text(ext, "topic"),
        queue_id=whole(ext, "queueId", bounds=INT32),
        sys_flag=whole(ext, "sysFlag", bounds=INT32),
        born_timestamp=whole(ext, "bornTimestamp"),
        flag=whole(ext, "flag", bounds=INT32),
        properties=ext.get("properties", ""),
        reconsume_times=max(whole(ext, "reconsumeTimes", 0, INT32), 0),
        max_reconsume_times=whole(ext, "maxReconsumeTimes", bounds=INT32)
        if max_reconsume
        else None,
        batch=flag(ext, "batch"),
    )


def encode_sizes(sizes: npt.ArrayLike) -> str:
    """Record sizes (int32 each) as one header value: Base64 of big-endian int32s. A pull
    answer's body is records back to back; with their sizes a reader finds them without
    walking the TOTALSIZE chain one record at a time.

    >>> decode_sizes(encode_sizes([260, 300])).tolist()
    [260, 300]
    """
    return base64.b64encode(np.asarray(sizes, dtype=">i4").tobytes()).decode()


def decode_sizes(text: str) -> np.ndarray:
    """The reverse of :func:`encode_sizes`; InvalidArgumentError if ``text`` is not one."""
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        raise InvalidArgumentError(f"record sizes {shown(text)} are not Base64") from None
    if len(data) % 4:
        raise InvalidArgumentError(f"record sizes of {len(data)} bytes are not int32s")
    return np.frombuffer(data, dtype=">i4").astype(np.int64)


_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN


def decode_batch(
    body: bytes, *, max_count: int | None = None
) -> tuple[list[int], list[bytes], list[bytes]]:
    """The messages of a SEND_BATCH_MESSAGE body: (flags, bodies, encoded properties).
    A batch of more than ``max_count`` messages is refused (the broker's
    --max-batch-messages) as soon as the count is passed.

    Each message is ``TOTALSIZE MAGIC BODYCRC FLAG BODYLEN BODY PROPLEN(2) PROPS``.

    >>> head = struct.pack(">iiiii", 29, 0, 0, 5, 3)
    >>> decode_batch(head + b"abc" + struct.pack(">h", 4) + b"K\\x01v\\x02")
    ([5], [b'abc'], [b'K\\x01v\\x02'])
    """
    flags: list[int] = []
    bodies: list[bytes] = []
    properties: list[bytes] = []
    pos, end = 0, len(body)
    while pos < end:
        if max_count is not None and len(flags) == max_count:
            raise InvalidArgumentError(
                f"the batch holds more than {max_count:,} messages, this broker's limit "
                "per send (--max-batch-messages): send smaller batches"
            )
        if end - pos < _BATCH_HEAD.size + 2:
            raise InvalidArgumentError(
                f"batch message {len(flags)} is cut short: {end - pos} bytes left at {pos}"
            )
        total, _, _, msg_flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        start = pos + _BATCH_HEAD.size
        if body_len < 0 or start + body_len + 2 > end:
            raise InvalidArgumentError(
                f"batch message {len(flags)} says its body has {body_len} bytes; "
                f"{end - start} are left"
            )
        (props_len,) = struct.unpack_from(">h", body, start + body_len)
        props_start = start + body_len + 2
        props_end = props_start + props_len
        if props_len < 0 or props_end > end or total != props_end - pos:
            raise InvalidArgumentError(
                f"batch message {len(flags)} has total size {total}, which does not match "
                f"its fields ({props_end - pos} bytes)"
            )
        flags.append(msg_flag)
        bodies.append(body[start : start + body_len])
        properties.append(body[props_start:props_end])
        pos = props_end
    if not flags:
        raise InvalidArgumentError("the batch is empty; send at least one message")
    return flags, bodies, properties


def encode_batch(flags: list[int], bodies: list[bytes], properties: list[bytes]) -> bytes:
    """The reverse of :func:`decode_batch` (what a producer sends)."""
    parts = []
    for msg_flag, data, props in zip(flags, bodies, properties, strict=True):
        total = _BATCH_HEAD.size + len(data) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, msg_flag, len(data)))
        parts.append(data)
        parts.append(struct.pack(">h", len(props)))
        parts.append(props)
    return b"".join(parts)
