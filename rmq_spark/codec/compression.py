"""Bodies RocketMQ producers compressed: the broker stores them as sent, and readers inflate.

A record's SYSFLAG says so: bit 0x1 (COMPRESSED) and the compression type in bits 8-10
(0 or 3: zlib, the only kind older clients wrote; 1: LZ4; 2: ZSTD). RocketMQ's Java producer
compresses bodies of 4 KiB and more with zlib. :func:`inflate_bodies` leaves a batch without
compressed records untouched (one vectorised test) and inflates only the rows that are.

>>> import zlib
>>> bodies = [zlib.compress(b"hello" * 9), b"plain"]
>>> batch = pa.record_batch({"body": bodies, "sysFlag": [0x301, 0]})
>>> inflate_bodies(batch).column("body").to_pylist()
[b'hellohellohellohellohellohellohellohellohello', b'plain']
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from rmq_spark.errors import CorruptDataError

SYSFLAG_COMPRESSED = 0x1
_TYPE_SHIFT = 8
_TYPE_MASK = 0x7
_ZLIB_TYPES = (0, 3)
_NAMES = {1: "LZ4", 2: "ZSTD"}


def inflate_bodies(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every compressed body (``sysFlag`` column) inflated."""
    if batch.num_rows == 0:
        return batch
    flags = batch.column("sysFlag").to_numpy(zero_copy_only=False).astype(np.int64)
    compressed = np.flatnonzero(flags & SYSFLAG_COMPRESSED)
    if len(compressed) == 0:
        return batch
    index = batch.schema.get_field_index("body")
    bodies = batch.column(index).to_pylist()
    for row in compressed.tolist():
        kind = (int(flags[row]) >> _TYPE_SHIFT) & _TYPE_MASK
        if kind not in _ZLIB_TYPES:
            raise CorruptDataError(
                f"record {row} has a {_NAMES.get(kind, f'type {kind}')}-compressed body, which "
                "this reader cannot inflate; have the producer use zlib (RocketMQ's default)"
            )
        try:
            bodies[row] = zlib.decompress(bodies[row])
        except zlib.error as exc:
            raise CorruptDataError(
                f"record {row} is marked compressed but its body does not inflate: {exc}"
            ) from None
    column = pa.array(bodies, type=batch.schema.field(index).type)
    return batch.set_column(index, batch.schema.field(index), column)
