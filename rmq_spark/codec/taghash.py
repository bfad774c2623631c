"""Tag hash codes as stored in consume-queue entries: Java ``String.hashCode()``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` as a signed 32-bit int (over UTF-16 code units).

    >>> java_string_hash("TagA")
    2598919
    >>> java_string_hash("")
    0
    """
    units = text.encode("utf-16-be", "surrogatepass")  # Java hashes lone surrogates too
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tag_hash_code(tags: str | None) -> int:
    """The 64-bit tag code of a message: the sign-extended hash, 0 when it has no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


def tag_hash_codes(tags: Iterable[str | None]) -> np.ndarray:
    """Tag codes of many messages as an int64 array (hashing each distinct tag once)."""
    tags = tags if isinstance(tags, list) else list(tags)
    table = {tag: tag_hash_code(tag) for tag in set(tags)}
    return np.fromiter(map(table.__getitem__, tags), dtype=np.int64, count=len(tags))
