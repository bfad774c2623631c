"""Java's ``String.hashCode()``, one text at a time and many at once.

RocketMQ hashes strings this way in three places rocketlite must match bit for bit: tag
codes in consume-queue entries (:mod:`rmq_spark.codec.taghash`), keys in the message index
(:mod:`rmq_spark.store.index_file`), and the queue a sharding key picks
(SelectMessageQueueByHash: :func:`queue_by_hash`). The hash runs over UTF-16 code units,
so a character past U+FFFF counts as its two surrogates, and a lone surrogate is hashed as
it is. :func:`java_string_hash` is the readable reference; :func:`java_string_hashes`
gives the same values for many texts with no Python loop per text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["java_string_hash", "java_string_hashes", "queue_by_hash", "queues_by_hash"]


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


#: 31 is odd, so it has an inverse modulo 2**32: 31**(e - p) == 31**e * INVERSE**p there
_INVERSE_OF_31 = pow(31, -1, 1 << 32)
_POWERS: dict[int, np.ndarray] = {}
#: texts are hashed in runs of about this many characters, bounding the memory used
_RUN_CHARS = 1 << 20


def _powers(base: int, count: int) -> np.ndarray:
    """base**k mod 2**32 for k < count (uint32 products wrap as Java ints do)."""
    table = _POWERS.get(base)
    if table is None or len(table) < count:
        grown = np.full(max(count, 2 * len(table) if table is not None else 1), base, np.uint32)
        grown[0] = 1
        table = _POWERS[base] = np.cumprod(grown, dtype=np.uint32)
    return table[:count]


def java_string_hashes(texts: Sequence[str]) -> np.ndarray:
    """Java's ``String.hashCode()`` of each text as an int32 array, with no loop per text.

    Java's hash of units u[s..e] is sum(u[p] * 31**(e - p)) mod 2**32, which is
    31**e * sum(u[p] * INVERSE**p) for positions p in the texts joined end to end: one
    product per UTF-16 unit, one sum per text (``reduceat``), one product per text. A
    text with characters past U+FFFF is counted in units (two surrogates each).

    >>> java_string_hashes(["TagA", "", "😀"]).tolist()
    [2598919, 0, 1772899]
    """
    texts = texts if isinstance(texts, list) else list(texts)
    n = len(texts)
    chars = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    ends = np.cumsum(chars)
    hashes = np.zeros(n, dtype=np.uint32)
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(ends, ends[lo] - chars[lo] + _RUN_CHARS, side="right"))
        hi = max(hi, lo + 1)
        hashes[lo:hi] = _hash_run(texts[lo:hi], chars[lo:hi])
        lo = hi
    return hashes.view(np.int32)


def _hash_run(texts: list[str], chars: np.ndarray) -> np.ndarray:
    joined = "".join(texts)
    units = np.frombuffer(joined.encode("utf-16-le", "surrogatepass"), dtype="<u2")
    lengths = chars
    if len(units) != len(joined):  # surrogate pairs: count units text by text
        sizes = (len(t.encode("utf-16-le", "surrogatepass")) // 2 for t in texts)
        lengths = np.fromiter(sizes, dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths)
    hashes = np.zeros(len(texts), dtype=np.uint32)
    filled = lengths > 0
    if filled.any():
        terms = units.astype(np.uint32) * _powers(_INVERSE_OF_31, len(units))
        sums = np.add.reduceat(terms, (ends - lengths)[filled], dtype=np.uint32)
        hashes[filled] = sums * _powers(31, len(units))[ends[filled] - 1]
    return hashes


def queue_by_hash(key: str, queues: int) -> int:
    """The queue index RocketMQ's SelectMessageQueueByHash picks for ``key`` among
    ``queues`` queues: ``|hashCode| % queues`` (Java takes the remainder first and then its
    absolute value, which is the same number).

    >>> queue_by_hash("order-42", 4), queue_by_hash("polygenelubricants", 3)
    (1, 2)
    """
    return abs(java_string_hash(key)) % queues


def queues_by_hash(keys: Sequence[str], queues: int) -> np.ndarray:
    """:func:`queue_by_hash` of each key, as an int64 array.

    >>> queues_by_hash(["order-42", "polygenelubricants"], 3).tolist()
    [0, 2]
    """
    return np.abs(java_string_hashes(keys).astype(np.int64)) % queues
