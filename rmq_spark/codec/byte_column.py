"""Byte strings laid out back to back in one buffer: a column of a batch, kept whole.

A columnar send brings its bodies (and property blobs) this way; cutting them into one
bytes object each only to join them again into records costs more than everything else the
store does with them. :class:`ByteColumn` keeps the buffer and the items' end offsets, gives
their lengths as an array and the column to Arrow without a copy, and is still a sequence of
bytes for code that wants items one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import pyarrow as pa


class ByteColumn(Sequence[bytes]):
    """``data[ends[i - 1]:ends[i]]`` is item i (item 0 starts at 0); ``data`` is exactly
    the items, so ``ends[-1] == len(data)``."""

    __slots__ = ("_arrow", "_items", "_lengths", "data", "ends")

    def __init__(self, data: bytes, ends: np.ndarray, lengths: np.ndarray | None = None) -> None:
        """``lengths``, when given, must be the items' lengths (``ends`` made from them)."""
        if len(ends) and int(ends[-1]) != len(data):
            raise ValueError(f"the items end at {int(ends[-1])} but the buffer has {len(data)}")
        self.data = data
        self.ends = np.asarray(ends, dtype=np.int64)
        self._lengths = lengths
        self._arrow: pa.LargeBinaryArray | None = None  # made once, on first use
        self._items: list[bytes] | None = None

    @classmethod
    def of(cls, items: Sequence[bytes]) -> ByteColumn:
        """``items`` (bytes-like) joined into one column."""
        if isinstance(items, ByteColumn):
            return items
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        return cls(b"".join(items), np.cumsum(lengths))

    @classmethod
    def from_arrow(cls, values: pa.Array) -> ByteColumn:
        """A binary or string Arrow array (nulls as empty items) as a column: one copy of
        its bytes."""
        if values.offset or values.null_count:
            values = pa.concat_arrays([values.fill_null(pa.scalar(b"", values.type))])
        wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
        n = len(values)
        offsets = np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32)[: n + 1]
        start, end = int(offsets[0]), int(offsets[-1])
        data = values.buffers()[2]
        blob = b"" if data is None else memoryview(data)[start:end].tobytes()
        return cls(blob, offsets[1:].astype(np.int64) - start)

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return self.to_list()[index]  # a new list
        n = len(self.ends)
        if not -n <= index < n:
            raise IndexError(f"item {index} of a column of {n}")
        index %= n
        start = int(self.ends[index - 1]) if index else 0
        return self.data[start : int(self.ends[index])]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.to_list())

    def lengths(self) -> np.ndarray:
        """Each item's length (int64)."""
        if self._lengths is None:
            lengths = self.ends.copy()
            lengths[1:] -= self.ends[:-1]
            self._lengths = lengths
        return self._lengths

    def offsets(self) -> np.ndarray:
        """The n + 1 start offsets of the items and the end (int64), as Arrow has them."""
        offsets = np.zeros(len(self.ends) + 1, dtype=np.int64)
        offsets[1:] = self.ends
        return offsets

    def to_arrow(self) -> pa.LargeBinaryArray:
        """The column as Arrow large_binary over the same buffer (no copy of the data)."""
        if self._arrow is None:
            self._arrow = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(),
                len(self.ends),
                [None, pa.py_buffer(self.offsets()), pa.py_buffer(self.data)],
            )
        return self._arrow

    def to_list(self) -> list[bytes]:
        """One bytes object per item, made in one C++ loop (about a quarter of the cost of
        slicing the buffer item by item in Python); the same list on every call, so do not
        change it."""
        if self._items is None:
            self._items = self.to_arrow().to_pylist()
        return self._items
