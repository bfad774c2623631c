"""Consume-queue entries: 20 bytes each, big-endian.

``physical offset (8) | record size (4) | tag hash code (8)``; queue offset N lives at byte
N * 20 of the queue's files. An all-zero entry is an unwritten slot.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

ENTRY_SIZE = 20
ENTRY_DTYPE = np.dtype([("physical_offset", ">i8"), ("size", ">i4"), ("tag_code", ">i8")])
NATIVE_DTYPE = np.dtype([("physical_offset", "<i8"), ("size", "<i4"), ("tag_code", "<i8")])
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE


def encode_entries(
    physical_offsets: npt.ArrayLike, sizes: npt.ArrayLike, tag_codes: npt.ArrayLike
) -> bytes:
    """Encode parallel arrays of offsets, sizes and tag codes to entry bytes.

    >>> encode_entries([256], [100], [-1]).hex()
    '000000000000010000000064ffffffffffffffff'
    """
    physical_offsets = np.asarray(physical_offsets)
    entries = np.empty(len(physical_offsets), dtype=ENTRY_DTYPE)
    entries["physical_offset"] = physical_offsets
    entries["size"] = sizes
    entries["tag_code"] = tag_codes
    return entries.tobytes()


def decode_entries(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode entry bytes to a native-endian structured array (a copy, safe to keep)."""
    raw = np.frombuffer(data, dtype=ENTRY_DTYPE, count=len(data) // ENTRY_SIZE)
    return raw.astype(NATIVE_DTYPE)
