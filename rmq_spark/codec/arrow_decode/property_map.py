"""The properties map and the TAGS and KEYS columns, split out of ``name\\x01value\\x02`` bytes.

The properties of all records are copied side by side, and keys and values become string
arrays whose offsets come straight from separator positions found by one numpy scan:

* Producers write the same names in the same order in every message of a batch. Then only
  item ends (\\x02) are searched for, the first record's names are checked where every other
  record's items start (one gather per name position), the keys are those names tiled, and
  TAGS and KEYS are every k-th value.
* Otherwise every \\x01 and \\x02 is found, names are cut out and TAGS and KEYS searched for.

A last item without its final \\x02 (Apache RocketMQ's broker appends ``CLUSTER`` so to each
message of a batch) gets one first, one copy of the bytes for all records. Irregular data
the second path cannot split (a value holding \\x01, empty items, a NUL byte, invalid UTF-8)
goes to a slow path that reproduces
:func:`rmq_spark.codec.properties.decode_properties` exactly. One difference from it: a name
repeated within one record (producers never write one) appears twice in the map when a fast
path decodes it, while ``tags``/``keys`` take its last value as the reference does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode.source import (
    gather,
    is_utf8,
    numeric_array,
    string_array,
    take,
)
from rmq_spark.codec.properties import KEYS, TAGS, decode_properties

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
_NAMES = (TAGS, KEYS)  # the names with columns of their own, in column order
_ITEM_SEPARATORS = np.frombuffer(b"\x01\x02", "<u2")[0]  # \x01 then \x02, read as one uint16


def properties_columns(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The properties map plus the TAGS and KEYS columns (null where the property is absent)
    of a binary array of raw properties (offset 0, no nulls)."""
    mapped, (tags, keys) = _columns(props, True, _NAMES)
    assert mapped is not None
    return mapped, tags, keys


def tags_and_keys(props: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The TAGS and KEYS columns of :func:`properties_columns`, without building the map."""
    _, (tags, keys) = _columns(props, False, _NAMES)
    return tags, keys


def property_values(props: pa.Array, names: Sequence[str]) -> dict[str, pa.Array]:
    """The value of each of ``names`` in every record of a binary array of raw properties
    (a string column each, null where a record lacks the name), without building the map."""
    _, values = _columns(props, False, tuple(names))
    return dict(zip(names, values, strict=True))


def _columns(
    props: pa.Array, with_map: bool, names: tuple[str, ...]
) -> tuple[pa.Array | None, list[pa.Array]]:
    """The map (when ``with_map``) and the value column of each of ``names``."""
    n = len(props)
    offsets = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
    if offsets[-1] == offsets[0]:
        return _all_empty(n, with_map), [pa.nulls(n, pa.string()) for _ in names]
    if offsets[0] != 0:
        return _columns_slow(props, with_map, names)
    terminated = _terminated(props.buffers()[2], offsets)
    if terminated is not None:
        props = terminated
        offsets = np.frombuffer(props.buffers()[1], np.int32, n + 1)
    same = same_names(props.buffers()[2], offsets)
    if same is not None:
        values = same.values()
        mapped = None
        if with_map:
            k = len(same.names)
            map_offsets = numeric_array(np.arange(0, n * k + 1, k, dtype=np.int32))
            mapped = pa.MapArray.from_arrays(map_offsets, _tiled(same.names, n), values)
        texts = [name.decode() for name in same.names]
        return mapped, [_every_kth(values, texts, name) for name in names]
    items = split_items(props.buffers()[2], offsets)
    if items is None:
        return _columns_slow(props, with_map, names)
    keys, values, map_offsets = items.names(), items.values(), items.map_offsets()
    mapped = pa.MapArray.from_arrays(numeric_array(map_offsets), keys, values) if with_map else None
    return mapped, [_lookup(values, map_offsets, at) for at in _find(keys, names)]


def _find(keys: pa.Array, names: tuple[str, ...]) -> list[np.ndarray]:
    """Indices of the keys equal to each of ``names``."""
    if all(len(name.encode()) == 4 for name in names):
        return find_names(keys, *names)
    return [np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False)) for name in names]


def _terminated(data: pa.Buffer, offsets: np.ndarray) -> pa.Array | None:
    """The properties with a \\x02 added after every record's last item that lacks one
    (nothing added to empty ones), as a binary array; None when none lacks it."""
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    raw = np.frombuffer(data, np.uint8, int(offsets[-1]))
    missing = np.zeros(n, bool)
    filled = lengths > 0
    missing[filled] = raw[offsets[1:][filled] - 1] != 2
    if not missing.any():
        return None
    added = np.cumsum(missing, dtype=np.int32)
    new_offsets = np.empty(n + 1, np.int32)
    new_offsets[0] = 0
    new_offsets[1:] = offsets[1:] + added
    out = np.insert(raw, offsets[1:][missing], np.uint8(2))  # at each such record's end
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(new_offsets), pa.py_buffer(out)]
    )


@dataclass
class SameNames:
    """Records that all hold the same names in the same order: the names, and where each
    value starts and ends."""

    data: pa.Buffer  # the properties of all records, side by side
    names: list[bytes]
    cuts: np.ndarray  # int32: start of value 0, its \x02, start of value 1, its \x02 ...

    def values(self) -> pa.Array:
        """The value of every item: after its name and \\x01, up to its \\x02."""
        tokens = string_array(self.cuts, self.data)  # value i is token 2i
        return take(tokens, np.arange(0, len(self.cuts) - 1, 2))


def same_names(data: pa.Buffer, offsets: np.ndarray) -> SameNames | None:
    """The items of every record when all hold the names of the first record, in the same
    order, and the properties are valid UTF-8; else None.

    Only item ends (\\x02) are searched for. The first record's names are read from its bytes;
    every other record then must hold each name followed by \\x01 where its item starts,
    checked 8 bytes at a time for all records at once. A value may hold \\x01 or NUL: as in
    the reference, the name ends at the first \\x01 and the value runs to the \\x02.
    """
    n = len(offsets) - 1
    raw = np.frombuffer(data, np.uint8, int(offsets[-1]))
    ends = np.flatnonzero(raw == 2)
    k, extra = divmod(len(ends), n)
    if not k or extra or not (ends[k - 1 :: k] == offsets[1:] - 1).all():
        return None  # not k items in every record, each record ending with its last item
    names = _names_of(raw[: offsets[1]].tobytes())
    if names is None:
        return None
    cuts = np.empty(2 * len(ends), np.int32)
    cuts[1::2] = ends
    for j, name in enumerate(names):  # one pass per name position, over all records at once
        starts = offsets[:-1] if j == 0 else ends[j - 1 :: k] + 1
        prefix = name + b"\x01"
        if not _all_start_with(raw, starts, prefix):
            return None
        np.add(starts, len(prefix), out=cuts[2 * j :: 2 * k], casting="unsafe")
    if not is_utf8(raw):
        return None
    return SameNames(data, names, cuts)


_WORD = np.dtype("<u8")


def _all_start_with(raw: np.ndarray, starts: np.ndarray, prefix: bytes) -> bool:
    """Whether ``prefix`` is at every position ``starts`` of ``raw``, compared 8 bytes at a
    time as integers. Bytes past the end of ``raw`` read as zero: the \\x01 that ends every
    prefix never matches there."""
    for at in range(0, len(prefix), 8):
        piece = prefix[at : at + 8]
        found = gather(raw, starts + at if at else starts, _WORD)
        if len(piece) < 8:
            found &= np.uint64((1 << 8 * len(piece)) - 1)
        if not (found == np.uint64(int.from_bytes(piece, "little"))).all():
            return False
    return True


def _names_of(first: bytes) -> list[bytes] | None:
    """The names of one record's ``name\\x01value\\x02...``; None if an item has no \\x01."""
    names = []
    for item in first.split(b"\x02")[:-1]:
        name, sep, _ = item.partition(b"\x01")
        if not sep:
            return None
        names.append(name)
    return names


@dataclass
class Items:
    """The items of all records: separator positions in the concatenated properties."""

    data: pa.Buffer  # the properties of all records, side by side
    offsets: np.ndarray  # int32 (n + 1): where each record's properties start in ``data``
    seps: np.ndarray  # positions of \x01, \x02, \x01, \x02 ... one pair per item
    per_record: int | None  # k when every record holds k items, else None

    @property
    def count(self) -> int:
        return len(self.seps) // 2

    def map_offsets(self) -> np.ndarray:
        """How many items come before each record (the map's int32 offsets)."""
        if self.per_record is not None:
            return np.arange(0, self.count + 1, self.per_record, dtype=np.int32)
        return np.searchsorted(self.seps[1::2], self.offsets).astype(np.int32)

    def values(self) -> pa.Array:
        """The value of every item: between its \\x01 and its \\x02."""
        cuts = self.seps.astype(np.int32)  # value i is token 2i: from \x01 + 1 to \x02
        cuts[0::2] += 1  # token 2i + 1 is "\x02 next-name \x01"
        return take(string_array(cuts, self.data), np.arange(0, len(cuts) - 1, 2))

    def names(self) -> pa.Array:
        """The name of every item: from the previous \\x02 (or the start) to its \\x01."""
        cuts = np.empty(len(self.seps), np.int32)  # name i is token 2i
        cuts[0] = 0
        cuts[1::2] = self.seps[0::2]
        cuts[2::2] = self.seps[1:-1:2] + 1
        return take(string_array(cuts, self.data), np.arange(0, len(cuts), 2))


def split_items(data: pa.Buffer, offsets: np.ndarray) -> Items | None:
    """Find the separators of every record's ``name\\x01value\\x02...``; None if any record is
    irregular (see the module docstring), or not valid UTF-8.

    Pieces of valid UTF-8 cut at ASCII separators are valid UTF-8: checking the whole buffer
    once covers every name and value.
    """
    n = len(offsets) - 1
    raw = np.frombuffer(data, np.uint8, int(offsets[-1]))
    seps = np.flatnonzero(raw < 3)  # \x01, \x02; NUL takes the slow path
    if len(seps) % 2 or not (raw[seps].view("<u2") == _ITEM_SEPARATORS).all():
        return None
    item_ends = seps[1::2]
    k, extra = divmod(len(item_ends), n)
    if k and not extra and (item_ends[k - 1 :: k] == offsets[1:] - 1).all():
        per_record = k  # every record: k items, its last byte ends its last item
    else:
        ends = offsets[1:][offsets[1:] > offsets[:-1]]  # each nonempty record ends with \x02
        if not (raw[ends - 1] == 2).all():
            return None
        per_record = None
    if not is_utf8(raw):
        return None
    return Items(data, offsets, seps, per_record)


def _tiled(names: list[bytes], n: int) -> pa.Array:
    """The keys of ``n`` records that each hold ``names``, in that order."""
    k = len(names)
    name_bytes = b"".join(names)
    record_starts = np.arange(n, dtype=np.int32) * np.int32(len(name_bytes))
    offsets = np.empty(n * k + 1, np.int32)
    offsets[-1] = n * len(name_bytes)
    at = 0
    for j, name in enumerate(names):  # one strided pass per name position
        np.add(record_starts, at, out=offsets[j:-1:k])
        at += len(name)
    return string_array(offsets, name_bytes * n)


def _every_kth(values: pa.Array, names: list[str], name: str) -> pa.Array:
    """The value of ``name`` in every record when each holds ``names`` in that order."""
    n = len(values) // len(names)
    if name not in names:
        return pa.nulls(n, pa.string())
    last = len(names) - 1 - names[::-1].index(name)  # a repeated name keeps its last value
    return take(values, np.arange(last, len(values), len(names)))


def find_names(keys: pa.Array, *names: str) -> list[np.ndarray]:
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
        return take(values, hits)  # exactly once in every record: no record index needed
    owner = np.repeat(np.arange(n), np.diff(offsets))  # record of each property
    index = np.full(n, -1, np.int64)
    index[owner[hits]] = hits  # numpy assigns in order: a repeated name keeps its last value
    return take(values, pa.array(index, mask=index < 0))


def _all_empty(n: int, with_map: bool) -> pa.Array | None:
    if not with_map:
        return None
    empty = pa.array([], pa.string())
    return pa.MapArray.from_arrays(numeric_array(np.zeros(n + 1, np.int32)), empty, empty)


def _columns_slow(
    props: pa.Array, with_map: bool, names: tuple[str, ...]
) -> tuple[pa.Array | None, list[pa.Array]]:
    decoded = [decode_properties(raw) for raw in props.to_pylist()]
    mapped = pa.array([list(d.items()) for d in decoded], PROPERTIES_TYPE) if with_map else None
    return mapped, [pa.array([d.get(name) for d in decoded], pa.string()) for name in names]
