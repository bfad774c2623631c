"""Many ids of one shape at once: a fixed prefix, then a number as upper-case hex digits.

Offset message ids (:func:`rmq_spark.codec.record.offset_msg_ids`) and client unique keys
(UNIQ_KEY) are both made this way. The characters are laid out in a numpy block of code
points and read back as strings in one ``tolist``: about five times cheaper than an
f-string per id once there are a few dozen.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hex_ids"]

_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).astype(np.uint32)
_NIBBLE_SHIFTS = np.arange(60, -4, -4, dtype=np.uint64)


def hex_ids(prefix: str, values: np.ndarray, digits: int) -> list[str]:
    """``prefix`` (ASCII) + each value as ``digits`` upper-case hex digits (its low
    ``4 * digits`` bits, as ``f"{value:0{digits}X}"`` gives for values that fit).

    >>> hex_ids("7F", np.array([0, 255]), 4)
    ['7F0000', '7F00FF']
    """
    values = values.astype(np.uint64)
    width = len(prefix) + digits
    chars = np.empty((len(values), width), dtype=np.uint32)
    chars[:, : len(prefix)] = np.frombuffer(prefix.encode(), dtype=np.uint8)
    shifts = _NIBBLE_SHIFTS[len(_NIBBLE_SHIFTS) - digits :]
    nibbles = (values[:, None] >> shifts) & np.uint64(0xF)
    chars[:, len(prefix) :] = _HEX_DIGITS[nibbles.astype(np.intp)]
    return chars.view(f"<U{width}").ravel().tolist()
