"""The tags of a batch as a columnar send has them: the distinct values and each message's
index into them, so the consume-queue tag codes take one hash per distinct tag and one
numpy gather, not a dictionary look-up per message."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

from rmq_spark.codec.taghash import tag_hash_codes


class TagColumn(Sequence[str | None]):
    """Message i has tag ``values[indexes[i]]`` (``values[0]`` for all when ``indexes`` is
    None); None or "" is no tag."""

    __slots__ = ("indexes", "length", "values")

    def __init__(self, values: Sequence[str | None], indexes: np.ndarray | None, count: int):
        if not values:
            raise ValueError("a tag column needs at least one value (None for no tag)")
        if indexes is not None and len(indexes) != count:
            raise ValueError(f"{len(indexes)} tag indexes for {count} messages")
        self.values = [value or None for value in values]
        self.indexes = indexes
        self.length = count

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> str | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[str | None]: ...

    def __getitem__(self, index: int | slice) -> str | list[str | None] | None:
        if isinstance(index, slice):
            return self.to_list()[index]
        if not -self.length <= index < self.length:
            raise IndexError(f"tag {index} of a column of {self.length}")
        return self.values[0 if self.indexes is None else int(self.indexes[index])]

    def __iter__(self) -> Iterator[str | None]:
        return iter(self.to_list())

    def to_list(self) -> list[str | None]:
        if self.indexes is None:
            return [self.values[0]] * self.length
        return list(map(self.values.__getitem__, self.indexes.tolist()))


def hash_codes(tags: Iterable[str | None]) -> np.ndarray:
    """The consume-queue tag codes of ``tags`` (see :func:`tag_hash_codes`), from the
    distinct values only when ``tags`` is a :class:`TagColumn`."""
    if not isinstance(tags, TagColumn):
        return tag_hash_codes(tags)
    codes = tag_hash_codes(tags.values)
    if tags.indexes is None:
        return np.full(tags.length, codes[0], dtype=np.int64)
    return codes[tags.indexes]
