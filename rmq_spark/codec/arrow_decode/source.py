"""The input buffer seen both as numpy bytes and as Arrow buffers, and Arrow array builders.

Fixed-size fields are copied with one numpy fancy index over a stride-1 view of the buffer
(every byte offset is a row of the wanted dtype), so each record costs one memcpy. Variable
-size fields become ``binary_view`` arrays whose 16-byte views point into the buffer, built
with numpy in one shot; a cast to ``pa.binary()`` then copies them in C++.

The builders here wrap numpy memory in Arrow arrays without the per-call conversion work of
``pa.array`` (which matters when a call decodes only a few hundred records).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import InvalidArgumentError

HEAD_BYTES = 12  # bytes a binary_view stores inline; also the first bytes we copy of a value

# binary_view offsets are int32, so a big buffer is exposed as several variadic buffers, one
# per 1 GiB step (each slice runs to the end, so a value starting in it always fits).
BLOCK_SHIFT = 30
_BLOCK_MASK = (1 << BLOCK_SHIFT) - 1

_INLINE_VIEW = np.dtype([("length", "=i4"), ("head", f"V{HEAD_BYTES}")])
_REF_VIEW = np.dtype([("length", "=i4"), ("prefix", "V4"), ("buffer", "=i4"), ("offset", "=i4")])

_BINARY_VIEW = pa.binary_view()
_STRING = pa.string()
_CAST = pc.get_function("cast")
_TO_BINARY = pc.CastOptions(pa.binary())
_TO_STRING = pc.CastOptions(pa.string())
_TAKE = pc.get_function("take")
_TAKE_OPTIONS = pc.TakeOptions()


class Source:
    """The buffer to decode: ``data`` (numpy uint8) and ``buffer`` (Arrow) share memory."""

    def __init__(self, buf: bytes | bytearray | memoryview | np.ndarray | pa.Buffer) -> None:
        if isinstance(buf, np.ndarray) and (buf.dtype != np.uint8 or buf.ndim != 1):
            raise InvalidArgumentError(
                f"buffer array must be 1-D uint8, got {buf.ndim}-D {buf.dtype}; "
                "pass arr.view(np.uint8).ravel() of contiguous data"
            )
        self.buffer = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
        self.data = np.frombuffer(self.buffer, dtype=np.uint8)
        blocks = max(1, -(-len(self.data) >> BLOCK_SHIFT))
        self.blocks = [self.buffer.slice(k << BLOCK_SHIFT) for k in range(blocks)]

    def __len__(self) -> int:
        return len(self.data)

    def gather(self, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """:func:`gather` from this buffer."""
        return gather(self.data, pos, dtype)

    def values(self, pos: np.ndarray, lengths: np.ndarray, head: np.ndarray) -> pa.Array:
        """A binary array of ``buffer[pos:pos+length]`` for every row.

        ``head`` holds the first 12 bytes at each position (an ``V12`` array, as gathered with
        the surrounding fields): the binary_view layout keeps short values inline and a 4-byte
        prefix of long ones, and numpy fills all the views at once.
        """
        n = len(pos)
        views = np.empty(n, _INLINE_VIEW)
        views["length"] = lengths
        views["head"] = head
        refs = views.view(_REF_VIEW)
        one_block = len(self.blocks) == 1
        if not n or lengths.min() > HEAD_BYTES:  # the usual case: no masking needed
            refs["buffer"] = 0 if one_block else pos >> BLOCK_SHIFT
            refs["offset"] = pos if one_block else pos & _BLOCK_MASK
        else:
            long = lengths > HEAD_BYTES
            short = ~long
            raw = views.view(np.uint8).reshape(n, 16)
            raw[short, 4:] *= np.arange(HEAD_BYTES) < lengths[short, None]  # zero past the end
            refs["buffer"][long] = pos[long] >> BLOCK_SHIFT
            refs["offset"][long] = pos[long] & _BLOCK_MASK
        array = pa.Array.from_buffers(_BINARY_VIEW, n, [None, pa.py_buffer(views), *self.blocks])
        return _CAST.call([array], _TO_BINARY)


def gather(data: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Copy ``dtype.itemsize`` bytes of ``data`` (uint8) at each position into one contiguous
    structured array.

    Indexing a stride-1 view (every byte offset is a row) copies each row with a single
    memcpy. Bytes past the end of the buffer read as zero, so a short or lying record can
    never make us read out of bounds; validation rejects it afterwards.
    """
    width = dtype.itemsize
    fits = len(data) - width + 1  # positions whose whole row is inside the buffer
    if fits > 0:
        # Opaque void rows copy faster than a structured dtype (copied field by field).
        rows = np.ndarray((fits,), _void(width), buffer=data, strides=(1,))
        if not len(pos) or pos.max() < fits:
            return rows[pos].view(dtype)
        inside = pos < fits
    else:
        inside = np.zeros(len(pos), dtype=bool)
    out = np.zeros(len(pos), dtype)
    if inside.any():
        out[inside] = rows[pos[inside]].view(dtype)
    tail_start = max(len(data) - width, 0)
    padded = np.zeros(2 * width, np.uint8)
    padded[: len(data) - tail_start] = data[tail_start:]
    padded_rows = np.ndarray((width + 1,), dtype, buffer=padded, strides=(1,))
    out[~inside] = padded_rows[np.clip(pos[~inside] - tail_start, 0, width)]
    return out


@functools.cache
def _void(width: int) -> np.dtype:
    return np.dtype((np.void, width))


def take(values: pa.Array, indices: pa.Array | np.ndarray) -> pa.Array:
    """``values.take(indices)``, with less fixed cost per call than the method."""
    if isinstance(indices, np.ndarray):
        indices = numeric_array(indices)
    return _TAKE.call([values, indices], _TAKE_OPTIONS)


def numeric_array(values: np.ndarray) -> pa.Array:
    """A 1-D native-endian numpy array as an Arrow array, sharing its memory."""
    values = np.ascontiguousarray(values)
    arrow_type = _ARROW_TYPES.get(values.dtype) or pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


_ARROW_TYPES = {np.dtype(t): pa.from_numpy_dtype(t) for t in (np.int32, np.int64, np.uint64)}


def string_array(offsets: np.ndarray, data: pa.Buffer | np.ndarray | bytes) -> pa.Array:
    """A string array from int32 ``offsets`` (n + 1 of them) and the bytes they index."""
    if not isinstance(data, pa.Buffer):
        data = pa.py_buffer(data)
    return pa.Array.from_buffers(_STRING, len(offsets) - 1, [None, pa.py_buffer(offsets), data])


def to_strings(raw: pa.Array) -> pa.Array:
    """UTF-8 strings; invalid bytes become U+FFFD, as in the reference decoder."""
    try:
        return _CAST.call([raw], _TO_STRING)
    except pa.ArrowInvalid:
        texts = [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()]
        return pa.array(texts, pa.string())


def repeat_string(value: bytes, n: int) -> pa.Array:
    """A string array of ``n`` copies of ``value`` (one topic or host for the whole batch)."""
    if n * len(value) >= 1 << 31:
        raise InvalidArgumentError(f"{n} records are too many for one batch; decode fewer")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(value))
    return string_array(offsets, value * n)


def is_utf8(data: np.ndarray) -> bool:
    """Whether a uint8 array is valid UTF-8: all-ASCII data (the usual case) is checked with
    one numpy reduction, anything else by Python's strict decoder."""
    if not len(data) or data.max() < 0x80:
        return True
    try:
        str(data.data, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def all_equal_rows(values: np.ndarray) -> bool:
    """Whether every element of a 1-D void (fixed-size bytes) array equals the first one.

    Compared as the widest unsigned integers that tile the width: numpy compares opaque
    void elements one generic call at a time, ~20x slower.
    """
    n, width = len(values), values.dtype.itemsize
    if n < 2 or not width:
        return True
    return all_equal_byte_rows(np.ascontiguousarray(values).view(np.uint8).reshape(n, width))


def all_equal_byte_rows(rows: np.ndarray) -> bool:
    """Whether every row of a C-contiguous (n, width) uint8 matrix equals the first one."""
    width = rows.shape[1]
    word = next(w for w in (8, 4, 2, 1) if width % w == 0)
    words = rows.view(f"u{word}")
    if len(words) < _FEW_ROWS or words.shape[1] == 1:
        return bool((words == words[0]).all())
    # Column by column: numpy loops over the last axis innermost, slow when it is this short.
    return all(bool((column == column[0]).all()) for column in words.T)


# Below this many rows, one 2-D numpy operation costs less than one per column.
_FEW_ROWS = 2048
