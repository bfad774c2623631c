"""Picking records by their stored properties (``name\x01value\x02...``), without
decoding them: what the broker's selected pulls and a reading task's own filtering share.

Most selectors name values a matching message must hold: ``region = 'eu'`` picks only
records whose stored properties hold the bytes ``region\x01eu`` (:func:`needles`).
:func:`select_stored` first looks for those bytes in the whole buffer, where it lies (a
mapped file is not copied), with no per-record work: the C library's ``memmem`` (about
twice as fast as ``bytes.find`` over records with binary bodies; ``find`` where it is not
available). Only the records they occur in have their properties read and the selector
applied, so a selector that picks 1% of a topic looks at little more than 1% of its
records. Where the bytes are common, or the selector names none (``amount > 100``,
``NOT``...), every record's properties are read.

Records of :data:`PROPERTIES_ONLY_FROM` bytes or more on average have only their
properties searched: where each record's properties are takes four reads of every record
(:func:`~rmq_spark.codec.arrow_decode.spans.properties_sections`, numpy gathers each paying
the memory's latency) and the sections are copied out back to back, ~200-300 ns a record
whatever its body; ``memmem`` over whole records costs ~0.25 ns a byte (80 ns a 300-byte
record, ~950 ns a 4 KB one; ``find`` twice that). A record whose fields do not agree with
its size is a candidate: the decoder refuses it, naming it.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import numpy as np

from rmq_spark.codec.arrow_decode import stored_properties
from rmq_spark.codec.arrow_decode.spans import properties_sections
from rmq_spark.filter.selector import Selector
from rmq_spark.filter.sql92_parse import (
    And,
    Compare,
    In,
    IsNull,
    Literal,
    Node,
    Or,
    Property,
    Substring,
)

__all__ = ["candidates", "needles", "occurrences", "record_starts", "select_stored"]


def select_stored(
    selector: Selector,
    data: bytes | bytearray | memoryview,
    starts: np.ndarray,
    sizes: np.ndarray,
    *,
    look_at_all: bool = False,
) -> np.ndarray:
    """The mask of the records of ``data`` (at ``starts``, ``sizes`` long) that
    ``selector`` picks. ``look_at_all``: read every record's properties (skip the search
    for needles, as when ``data`` holds candidates already)."""
    look_at = None if look_at_all else candidates(data, starts, selector, sizes)
    if look_at is None:  # every record is looked at
        return selector.select_raw(stored_properties(data, starts, sizes))
    picked = np.zeros(len(sizes), bool)
    if len(look_at):
        found = stored_properties(data, starts[look_at], sizes[look_at])
        picked[look_at[selector.select_raw(found)]] = True
    return picked


def record_starts(sizes: np.ndarray) -> np.ndarray:
    """Where each of records laid back to back starts."""
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


#: the share of records above which looking for needles saves nothing
_MOSTLY = 0.25
#: how much of a buffer is looked at to pick the rarest set of needles
_SAMPLE_BYTES = 1 << 20


def candidates(
    data: bytes | bytearray | memoryview,
    starts: np.ndarray,
    selector: Selector,
    sizes: np.ndarray | None = None,
) -> np.ndarray | None:
    """Indices (sorted) of the records of ``data`` (starting at ``starts``) worth applying
    ``selector`` to: those holding a needle of the rarest of its sets of needles; None when
    each record should be looked at (no needle known, or needles in most records). The
    bytes of a mapped file are searched where they are, without a copy; with ``sizes``,
    records of :data:`PROPERTIES_ONLY_FROM` bytes or more on average have only their
    properties searched (see the module's doc)."""
    sets = needles(selector.tree)
    if not sets:
        return None
    chosen = sets[0]
    if len(sets) > 1:  # the rarest in a sample of the buffer
        sample = bytes(data[:_SAMPLE_BYTES])
        chosen = min(sets, key=lambda found: sum(sample.count(n) for n in found))
    limit = int(len(starts) * _MOSTLY)
    if sizes is not None and len(sizes) and sizes.mean() >= PROPERTIES_ONLY_FROM:
        return _in_properties(data, starts, sizes, chosen, limit)
    at = occurrences(data, chosen, limit)
    if at is None:
        return None
    if not at:
        return np.zeros(0, np.int64)
    records = np.searchsorted(starts, np.array(at, np.int64), side="right") - 1
    return np.unique(records[records >= 0])


#: the average record size from which only the properties are searched
PROPERTIES_ONLY_FROM = 1536


def _in_properties(
    data: bytes | bytearray | memoryview,
    starts: np.ndarray,
    sizes: np.ndarray,
    found: frozenset[bytes],
    limit: int,
) -> np.ndarray | None:
    """:func:`candidates` by a search of the records' properties copied out back to back;
    a record whose fields do not agree with its size is a candidate (the decoder judges)."""
    sections, ok = properties_sections(data, starts, sizes)
    values = sections.buffers()[2]
    at = [] if values is None else occurrences(memoryview(values), found, limit)
    if at is None:
        return None
    offsets = np.frombuffer(sections.buffers()[1], np.int32)[: len(sizes)]
    records = np.searchsorted(offsets, np.array(at, np.int64), side="right") - 1
    if not ok.all():
        records = np.concatenate([records, np.flatnonzero(~ok)])
    return np.unique(records[records >= 0])


def occurrences(
    data: bytes | bytearray | memoryview, found: frozenset[bytes], limit: int
) -> list[int] | None:
    """Where each of ``found`` starts in ``data`` (unsorted), or None once more than
    ``limit`` are found. ``memmem`` over the memory of ``data`` itself when it is one
    contiguous block (a slice of a mapped file included), else ``find``."""
    memory = _memory(data)
    if _MEMMEM is None or memory is None:
        return _found_by_find(data, found, limit)
    base, size = memory.ctypes.data, len(memory)
    at: list[int] = []
    for needle in found:
        where, end = base, base + size
        while hit := _MEMMEM(where, end - where, needle, len(needle)):
            at.append(hit - base)
            if len(at) > limit:
                return None
            where = hit + 1
    return at


def _found_by_find(
    data: bytes | bytearray | memoryview, found: frozenset[bytes], limit: int
) -> list[int] | None:
    text, low, high = _searchable(data)
    at: list[int] = []
    for needle in found:
        where = text.find(needle, low, high)
        while where >= 0:
            at.append(where - low)
            if len(at) > limit:
                return None
            where = text.find(needle, where + 1, high)
    return at


def _memory(data: bytes | bytearray | memoryview) -> np.ndarray | None:
    """``data`` as uint8 sharing its memory (it keeps that memory alive while it lives), or
    None when it is not one block of bytes."""
    if isinstance(data, memoryview) and not (data.contiguous and data.itemsize == 1):
        return None
    memory = np.frombuffer(data, np.uint8)
    return memory if len(memory) else None


def _libc_memmem() -> Callable[[int, int, bytes, int], int | None] | None:
    """The C library's ``memmem(haystack, length, needle, length)``, or None."""
    try:
        function = ctypes.CDLL(None).memmem
    except (AttributeError, OSError, TypeError):
        return None
    function.restype = ctypes.c_void_p  # the address found, None when none is
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return function  # type: ignore[no-any-return]


#: None where the C library has no ``memmem`` (then ``bytes.find`` searches)
_MEMMEM = _libc_memmem()


def _searchable(
    data: bytes | bytearray | memoryview,
) -> tuple[bytes | bytearray | mmap.mmap, int, int]:
    """Something with ``find(needle, start, end)`` over ``data``, and where ``data`` is in it:
    the mapped file itself for a view of one (no copy), else bytes."""
    if isinstance(data, bytes | bytearray):
        return data, 0, len(data)
    owner = data.obj
    if isinstance(owner, mmap.mmap) and data.contiguous and data.itemsize == 1:
        where = np.frombuffer(data, np.uint8).ctypes.data
        base = np.frombuffer(owner, np.uint8).ctypes.data  # released at once: no export left
        return owner, where - base, where - base + data.nbytes
    return bytes(data), 0, len(data)


def needles(tree: Node) -> list[frozenset[bytes]]:
    """Sets of byte strings, each a necessary condition of ``tree``: a record the selector
    picks holds one needle of every set in its stored properties (``name\\x01value``).
    Empty when none is known.

    >>> from rmq_spark.filter import compile_selector
    >>> found = needles(compile_selector("a = 'x' AND (b IN ('y', 'z') OR c STARTSWITH 'w')").tree)
    >>> found == [{b"a\\x01x"}, {b"b\\x01y", b"b\\x01z", b"c\\x01w"}]
    True
    >>> needles(compile_selector("a = 'x' OR n > 5").tree)
    []
    """
    if isinstance(node := tree, And):
        return needles(node.left) + needles(node.right)
    if isinstance(node, Or):
        left, right = needles(node.left), needles(node.right)
        if not left or not right:
            return []
        return [min(left, key=len) | min(right, key=len)]
    found = _item_needles(node)
    return [] if found is None else [found]


def _item_needles(node: Node) -> frozenset[bytes] | None:
    if isinstance(node, Compare) and node.op == "=":
        for prop, literal in ((node.left, node.right), (node.right, node.left)):
            if (
                isinstance(prop, Property)
                and isinstance(literal, Literal)
                and isinstance(literal.value, str)
            ):
                return frozenset({_item(prop.name, literal.value)})
        return None
    if isinstance(node, In) and not node.negated:
        return frozenset(_item(node.prop.name, value) for value in node.values)
    if (
        isinstance(node, Substring)
        and node.kind == "STARTSWITH"
        and not node.negated
        and isinstance(node.operand, Property)
        and node.text
    ):
        return frozenset({_item(node.operand.name, node.text)})
    if isinstance(node, IsNull) and node.negated and isinstance(node.operand, Property):
        return frozenset({_item(node.operand.name, "")})
    return None


def _item(name: str, value_start: str) -> bytes:
    """The bytes a stored property ``name`` whose value starts with ``value_start`` holds."""
    return f"{name}\x01{value_start}".encode()
