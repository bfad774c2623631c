"""A task applying the read's SQL92 selector itself (option ``sqlFilter``).

Where a task reads records the broker did not filter (short-circuit reads, ``storePath``,
a broker that does not filter by SQL92), it picks them before they are decoded:
:func:`decode_selected` reads only the properties of the records (as stored, without
decoding anything else), evaluates the selector over all of them at once, and decodes the
records it picks, so a record that does not match costs a look at its properties.
:func:`keep_selected` does the same for records already decoded with their ``properties``.

The search for the bytes a match must hold, which lets most records go without a look at
their properties, is :mod:`rmq_spark.filter.stored`'s, shared with the broker's pulls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from rmq_spark.codec.arrow_decode import decode_records, index_records
from rmq_spark.filter import Selector
from rmq_spark.filter.stored import record_starts, select_stored

__all__ = ["decode_selected", "keep_selected", "with_properties"]


def decode_selected(
    data: bytes | bytearray | memoryview,
    sizes: np.ndarray | None,
    selector: Selector,
    columns: Sequence[str],
    *,
    look_at_all: bool = False,
) -> tuple[pa.RecordBatch, np.ndarray]:
    """The records of ``data`` (back to back; ``sizes`` each one's, or None to find them)
    that ``selector`` picks, decoded (``columns``) in order, and the mask of those picked.
    ``look_at_all``: skip the search for needles (``data`` holds candidates already)."""
    if not len(data):
        return decode_records(b"", columns=columns), np.zeros(0, bool)
    if sizes is None:
        index = index_records(data)
        starts, sizes = index.starts, index.sizes
    else:
        sizes = np.asarray(sizes, dtype=np.int64)
        starts = record_starts(sizes)
    picked = select_stored(selector, data, starts, sizes, look_at_all=look_at_all)
    if not picked.any():
        return decode_records(b"", columns=columns), picked
    if picked.all():
        return decode_records(data, starts=starts, sizes=sizes, columns=columns), picked
    chosen = decode_records(data, starts=starts[picked], sizes=sizes[picked], columns=columns)
    return chosen, picked


def with_properties(columns: Sequence[str]) -> tuple[str, ...]:
    """``columns`` and ``properties`` (what :func:`keep_selected` needs)."""
    return tuple(columns) if "properties" in columns else (*columns, "properties")


def keep_selected(records: pa.RecordBatch, selector: Selector) -> pa.RecordBatch:
    """The rows of decoded ``records`` (with a ``properties`` column) ``selector`` picks."""
    if not records.num_rows:
        return records
    picked = selector.select_map(records.column("properties"))
    if picked.all():
        return records
    return records.filter(pa.array(picked))
