"""How many bytes a range of a queue holds, and how far a read of a byte budget goes. Pure.

The consume queue keeps each message's commit-log record size in its entry, so a reader
with a byte limit (the Spark source's ``maxBytesPerTrigger``) can be told exactly, per
queue, without reading a record. At most :data:`MAX_SCANNED_ENTRIES` entries are read per
question; a longer range has its total extrapolated from them (and says so).

>>> import numpy as np
>>> measure(np.array([100, 100, 300, 100]), budget_bytes=250)
RangeSize(size_bytes=600, estimated=False, budget_count=2)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: entries read per question (20 MiB of consume queue)
MAX_SCANNED_ENTRIES = 1 << 20


class RangeSize(NamedTuple):
    size_bytes: int
    #: the total was extrapolated from the first MAX_SCANNED_ENTRIES entries
    estimated: bool
    #: messages from the range's start that fit in the budget, at least 1 if any (None:
    #: no budget asked)
    budget_count: int | None


def measure(
    sizes: np.ndarray, budget_bytes: int | None = None, total_count: int | None = None
) -> RangeSize:
    """Sizes of the first entries of a range (``total_count`` entries long in all, default
    ``len(sizes)``): its total bytes, and how many fit in ``budget_bytes``."""
    count = len(sizes) if total_count is None else total_count
    scanned = int(sizes.sum(dtype=np.int64))
    estimated = count > len(sizes)
    total = scanned if not estimated else round(scanned * count / max(1, len(sizes)))
    fits = None
    if budget_bytes is not None:
        ends = np.cumsum(sizes, dtype=np.int64)
        fits = int(np.searchsorted(ends, budget_bytes, side="right"))
        if fits == len(sizes) and estimated and len(sizes):
            # Beyond the scanned entries: assume the scanned average.
            average = scanned / len(sizes)
            fits += int((budget_bytes - scanned) // average)
        fits = max(min(fits, count), 1 if count else 0)
    return RangeSize(total, estimated, fits)
