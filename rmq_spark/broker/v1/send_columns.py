"""SendMessages, the columnar form: a batch as byte columns, checked with numpy over whole
columns (:func:`suspect_property_blobs`), with Python only for the messages that fail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmq_spark.broker.core import checks
from rmq_spark.broker.v1.send import RESERVED_PROPERTIES, check_delay_level
from rmq_spark.clock import now_ms
from rmq_spark.codec import properties as props
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.tag_column import TagColumn
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

#: batches from this many messages have their property blobs checked with numpy
VECTOR_CHECK_MIN = 48
#: system properties a columnar sender writes into its property blobs itself
SENDER_PROPERTIES = (props.TAGS, props.KEYS, props.UNIQ_KEY)
#: the other reserved names: the broker's own, refused in a columnar send
BROKER_PROPERTIES = RESERVED_PROPERTIES.difference(SENDER_PROPERTIES)


def _name_code(name: str) -> int:
    """The first 8 bytes of a property name as a little-endian integer, zero padded."""
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little")


#: ``_NAME_MASKS[k]`` keeps the first k bytes of a little-endian 8-byte word (k = 0..8)
_NAME_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_TAGS_CODE = np.uint64(_name_code(props.TAGS))
_KEYS_CODE = np.uint64(_name_code(props.KEYS))
_UNIQ_KEY_CODE = np.uint64(_name_code(props.UNIQ_KEY))
_BROKER_CODES = np.array(sorted(map(_name_code, BROKER_PROPERTIES)), dtype=np.uint64)


@dataclass
class ColumnBatch:
    """The messages of a send request in columns, checked, as the store's append takes them.

    Nothing here runs Python code per message: the two byte columns stay whole
    (:class:`~rmq_spark.codec.byte_column.ByteColumn`, which the store lays out into records
    as they are); sizes, limits, tags and the property blobs are checked with numpy over
    whole columns (:func:`suspect_property_blobs`), and only messages that fail those checks
    are looked at one by one (:func:`check_property_blob`), to name the message and say
    what is wrong.
    """

    bodies: ByteColumn
    properties: ByteColumn
    tags: TagColumn
    born_timestamps: np.ndarray | int
    flags: np.ndarray | int
    delay_level: int

    @classmethod
    def from_request(
        cls, request: messaging_pb2.SendMessagesRequest, delay_levels: int, max_body_bytes: int
    ) -> ColumnBatch:
        check_delay_level(request.delay_level, delay_levels)
        columns = request.columns
        body_sizes = np.asarray(columns.body_sizes, dtype=np.int64)
        n = len(body_sizes)
        if n == 0:
            raise InvalidArgumentError(
                "columns.body_sizes is empty; a send needs at least one message"
            )
        prop_sizes = np.asarray(columns.properties_sizes, dtype=np.int64)
        if len(prop_sizes) != n:
            raise InvalidArgumentError(
                f"columns.properties_sizes has {len(prop_sizes)} sizes for {n} messages "
                "(columns.body_sizes); give one per message"
            )
        bodies = columns.bodies
        blobs = columns.properties
        body_ends = _column_ends("body_sizes", body_sizes, len(bodies), "bodies", max_body_bytes)
        prop_ends = _column_ends(
            "properties_sizes", prop_sizes, len(blobs), "properties", props.MAX_PROPERTIES_BYTES
        )
        tag_values, tag_indexes = _column_tags(columns, n)
        check_property_columns(blobs, prop_sizes, prop_ends, tag_values, tag_indexes)
        return cls(
            bodies=ByteColumn(bodies, body_ends, body_sizes),
            properties=ByteColumn(blobs, prop_ends, prop_sizes),
            tags=TagColumn(tag_values or [None], tag_indexes, n),
            born_timestamps=_column_born(columns, n),
            flags=_optional_column("flags", columns.flags, n, np.int32),
            delay_level=request.delay_level,
        )


def _column_ends(
    field: str, sizes: np.ndarray, total: int, data_field: str, limit: int
) -> np.ndarray:
    """End offsets of the items of a byte column, after checking the sizes against it."""
    if (sizes < 0).any():
        i = int(np.argmax(sizes < 0))
        raise InvalidArgumentError(f"columns.{field}[{i}]={int(sizes[i])} is negative")
    if (sizes > limit).any():
        i = int(np.argmax(sizes > limit))
        what = "body" if data_field == "bodies" else "properties"
        raise InvalidArgumentError(
            f"columns.{field}[{i}]={int(sizes[i])}: message {i}'s {what} exceed(s) the limit "
            f"of {limit} bytes"
        )
    ends = np.cumsum(sizes)
    if int(ends[-1]) != total:
        raise InvalidArgumentError(
            f"columns.{field} add up to {int(ends[-1])} bytes but columns.{data_field} has "
            f"{total}; the sizes must cover it exactly"
        )
    return ends


def _column_tags(
    columns: messaging_pb2.MessageColumns, n: int
) -> tuple[list[str], np.ndarray | None]:
    """The distinct tags and each message's index into them (None: all use the first)."""
    values = list(columns.tags)
    if not columns.tag_indexes:
        if len(values) > 1:
            raise InvalidArgumentError(
                f"columns.tags has {len(values)} values but columns.tag_indexes is empty; "
                "give each message's index into tags (or send one tag value)"
            )
        return values, None
    indexes = np.asarray(columns.tag_indexes, dtype=np.int64)
    if len(indexes) != n:
        raise InvalidArgumentError(
            f"columns.tag_indexes has {len(indexes)} values for {n} messages; give one "
            "per message, or none when every message has the same tag"
        )
    bad = (indexes < 0) | (indexes >= len(values))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidArgumentError(
            f"columns.tag_indexes[{i}]={int(indexes[i])} is out of range: columns.tags has "
            f"{len(values)} values"
        )
    return values, indexes


def _optional_column(
    field: str, values: Sequence[int], n: int, dtype: npt.DTypeLike
) -> np.ndarray | int:
    """A per-message number column: empty = 0 for every message."""
    if not values:
        return 0
    array = np.asarray(values, dtype=dtype)
    if len(array) != n:
        raise InvalidArgumentError(
            f"columns.{field} has {len(array)} values for {n} messages; give one per "
            "message, or none"
        )
    return array


def _column_born(columns: messaging_pb2.MessageColumns, n: int) -> np.ndarray | int:
    now = now_ms()
    if not columns.born_timestamps_ms:
        born = columns.born_timestamp_ms
        if born < 0:
            raise InvalidArgumentError(
                f"columns.born_timestamp_ms={born} is negative; use epoch milliseconds, or 0 "
                "for the broker's receive time"
            )
        return born or now
    array = _optional_column("born_timestamps_ms", columns.born_timestamps_ms, n, np.int64)
    assert isinstance(array, np.ndarray)
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise InvalidArgumentError(
            f"columns.born_timestamps_ms[{i}]={int(array[i])} is negative; use epoch "
            "milliseconds, or 0 for the broker's receive time"
        )
    array[array == 0] = now
    return array


def check_property_columns(
    data: bytes,
    sizes: np.ndarray,
    ends: np.ndarray,
    tag_values: Sequence[str],
    tag_indexes: np.ndarray | None,
) -> None:
    """Raise InvalidArgumentError naming the first message whose property blob is bad.

    The rules are :func:`check_property_blob`'s; this finds the suspects without a Python
    loop and runs that function on them only. Below :data:`VECTOR_CHECK_MIN` messages it
    runs it on every message: the ~35 numpy calls cost ~100 µs whatever the size, the
    function ~2 µs a message (measured).
    """
    if len(sizes) < VECTOR_CHECK_MIN:
        suspects = None  # fewer messages than numpy's fixed cost is worth: check each
    elif tag_indexes is None and uniform_blobs_pass(
        data, sizes, tag_values[0] if tag_values else ""
    ):
        return
    else:
        suspects = suspect_property_blobs(data, sizes, ends, tag_values, tag_indexes)
    malformed = suspects is None and len(sizes) >= VECTOR_CHECK_MIN
    if suspects is None:  # malformed somewhere: the exact check says where
        suspects = np.arange(len(sizes))
    starts = (ends - sizes).tolist()
    for i in suspects.tolist():
        if tag_indexes is not None:
            tag = tag_values[int(tag_indexes[i])]
        else:
            tag = tag_values[0] if tag_values else ""
        with checks.item(f"columns.properties of message {i}"):
            check_property_blob(data[starts[i] : starts[i] + int(sizes[i])], tag)
    if malformed:  # the two checks disagree: refuse rather than store what one refused
        raise InvalidArgumentError("columns.properties is malformed")


def uniform_blobs_pass(data: bytes, sizes: np.ndarray, tag: str) -> bool:
    """True when every blob of the column passes :func:`check_property_blob` with ``tag``,
    found cheaply for the common column whose blobs differ only in property values (one
    tag; same names, value lengths and so size, e.g. TAGS + UNIQ_KEY each); False when that
    is not so, or not known (then :func:`suspect_property_blobs` looks).

    The first blob passes the reference check; every other one has the separators at the
    same places and the same bytes everywhere but in the values of properties other than
    TAGS, and the whole column is UTF-8. The rules only look at separators, names, the
    TAGS value and whether values are empty, so each blob then passes as the first does.
    """
    width = int(sizes[0])
    if not width or (sizes != width).any():
        return False
    try:
        check_property_blob(data[:width], tag)
        data.decode("utf-8")
    except (InvalidArgumentError, UnicodeDecodeError):
        return False
    rows = np.frombuffer(data, dtype=np.uint8).reshape(len(sizes), width)
    first = rows[0]
    # Which bytes of the first blob may differ in the others: the values, except TAGS's.
    free = np.zeros(width, dtype=bool)
    at = 0
    for item in data[: width - 1].split(b"\x02"):
        name = item.partition(b"\x01")[0]
        if name != props.TAGS.encode():
            free[at + len(name) + 1 : at + len(item)] = True
        at += len(item) + 1
    fixed = ~free
    if (rows[:, fixed] != first[fixed]).any():
        return False
    values = rows[:, free]
    return not ((values == 1) | (values == 2)).any()


def check_property_blob(blob: bytes, tag: str) -> None:
    """The rules for one message's encoded properties in a columnar send (the reference)."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"properties are not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    if not text.endswith(props.PROPERTY_SEPARATOR):
        raise InvalidArgumentError(
            f"properties {text[:80]!r} do not end with \\x02; encode each property as "
            "name\\x01value\\x02 (every message needs at least UNIQ_KEY)"
        )
    system: dict[str, str] = {}
    for item in text[:-1].split(props.PROPERTY_SEPARATOR):
        name, separator, value = item.partition(props.NAME_VALUE_SEPARATOR)
        if not separator or props.NAME_VALUE_SEPARATOR in value:
            raise InvalidArgumentError(
                f"property {item[:80]!r} is not name\\x01value: it holds "
                f"{item.count(props.NAME_VALUE_SEPARATOR)} \\x01 separators"
            )
        if not name:
            raise InvalidArgumentError(f"property ={value[:80]!r} has an empty name")
        if not value:
            raise InvalidArgumentError(props.empty_value_message({name: value}))
        if name in BROKER_PROPERTIES:
            raise InvalidArgumentError(
                f"property name {name} is reserved: the broker sets it (use the request's "
                "delay_level for a delay)"
            )
        if name in SENDER_PROPERTIES:
            if name in system:
                raise InvalidArgumentError(f"property {name} is set twice")
            system[name] = value
    stored_tag = system.get(props.TAGS)
    if stored_tag != (tag or None):
        raise InvalidArgumentError(
            f"TAGS property {stored_tag!r} does not match the message's tag {tag!r} in "
            "columns.tags; set TAGS to the tag, or leave it out when the tag is empty"
        )
    if not system.get(props.UNIQ_KEY):
        raise InvalidArgumentError(
            "UNIQ_KEY is missing or empty: a message sent in columns carries its own "
            "client message id"
        )


def suspect_property_blobs(
    data: bytes,
    sizes: np.ndarray,
    ends: np.ndarray,
    tag_values: Sequence[str],
    tag_indexes: np.ndarray | None,
) -> np.ndarray | None:
    """Indexes of the messages that may break :func:`check_property_blob`'s rules, found
    with numpy over the whole column; None when the column is malformed somewhere.

    Conservative: every bad message is a suspect, a few good ones may be (a user property
    whose name shares the first 8 bytes and the length of a reserved one).
    """
    n = len(sizes)
    try:
        data.decode("utf-8")  # blobs end in \x02, so each is valid when the whole is
    except UnicodeDecodeError:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    # Every separator, in order: each property is name \x01 value \x02, so they alternate.
    marks = np.flatnonzero(buf <= 2)
    kinds = buf[marks]
    if not kinds.all():  # NUL bytes are text, not separators
        marks, kinds = marks[kinds != 0], kinds[kinds != 0]
    if len(kinds) % 2 or not ((kinds[0::2] == 1).all() and (kinds[1::2] == 2).all()):
        return None
    ones, twos = marks[0::2], marks[1::2]
    count = len(twos)
    filled = sizes > 0
    # Each blob must end with a \x02 (and so start at a property); at least UNIQ_KEY.
    if count == 0 or not filled.all() or (buf[ends - 1] != 2).any():
        return None
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = twos[:-1] + 1
    name_lens = ones - starts
    if not name_lens.all():
        return None
    # The first 8 bytes at each property start, as one little-endian word per property.
    padded = np.zeros(len(buf) + 8, dtype=np.uint8)
    padded[: len(buf)] = buf
    words = np.ndarray((len(buf),), dtype="<u8", buffer=padded, strides=(1,))
    codes = words[starts] & _NAME_MASKS[np.minimum(name_lens, 8)]
    # The message of each property: how many blobs end before it (each ends with a \x02).
    blob_end = np.zeros(len(buf), dtype=bool)
    blob_end[ends - 1] = True
    ends_here = blob_end[twos]
    owner = np.cumsum(ends_here)
    owner -= ends_here
    # A broker property name: a code that equals one of the sorted codes (np.isin's
    # general method costs twice as much here).
    near = np.minimum(np.searchsorted(_BROKER_CODES, codes), len(_BROKER_CODES) - 1)
    bad_props = _BROKER_CODES[near] == codes
    is_uniq = (codes == _UNIQ_KEY_CODE) & (name_lens == 8)
    bad_props |= twos == ones + 1  # an empty value (RocketMQ drops those)
    is_tags = (codes == _TAGS_CODE) & (name_lens == 4)
    is_keys = (codes == _KEYS_CODE) & (name_lens == 4)
    bad = np.bincount(owner[is_uniq], minlength=n) != 1
    bad |= np.bincount(owner[is_keys], minlength=n) > 1
    # TAGS: exactly one per tagged message, none elsewhere, and with the tag as its value.
    encoded_tags = [value.encode() for value in tag_values]
    tag_lens = np.array([len(value) for value in encoded_tags] or [0], dtype=np.int64)
    wanted = tag_lens[tag_indexes] if tag_indexes is not None else np.full(n, tag_lens[0])
    bad |= np.bincount(owner[is_tags], minlength=n) != (wanted > 0)
    tagged = owner[is_tags]
    value_starts = ones[is_tags] + 1
    value_lens = twos[is_tags] - value_starts
    same_len = value_lens == wanted[tagged]
    bad[tagged[~same_len]] = True
    tagged, value_starts = tagged[same_len], value_starts[same_len]
    value_lens = value_lens[same_len]
    if len(tagged):
        if tag_indexes is None:
            expected = np.frombuffer(encoded_tags[0] * len(tagged), dtype=np.uint8)
        else:
            picked = tag_indexes[tagged].tolist()
            expected = np.frombuffer(
                b"".join(map(encoded_tags.__getitem__, picked)), dtype=np.uint8
            )
        value_ends = np.cumsum(value_lens)
        positions = np.repeat(value_starts - (value_ends - value_lens), value_lens)
        positions += np.arange(len(positions))
        differ = np.flatnonzero(buf[positions] != expected)
        if len(differ):
            bad[tagged[np.searchsorted(value_ends, differ, side="right")]] = True
    if bad_props.any():
        bad[owner[bad_props]] = True
    return np.flatnonzero(bad)
