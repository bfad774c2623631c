"""Tag hash codes as stored in consume-queue entries: Java ``String.hashCode()``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rmq_spark.codec.java_hash import java_string_hash


def tag_hash_code(tags: str | None) -> int:
    """The 64-bit tag code of a message: the sign-extended hash, 0 when it has no tag.

    >>> tag_hash_code("TagA"), tag_hash_code(None)
    (2598919, 0)
    """
    if not tags:
        return 0
    return java_string_hash(tags)


def tag_hash_codes(tags: Iterable[str | None]) -> np.ndarray:
    """Tag codes of many messages as an int64 array (hashing each distinct tag once)."""
    tags = tags if isinstance(tags, list) else list(tags)
    table = {tag: tag_hash_code(tag) for tag in set(tags)}
    return np.fromiter(map(table.__getitem__, tags), dtype=np.int64, count=len(tags))
