"""The bornHost, storeHost and msgId columns, from the raw address bytes of every record.

A batch holds few distinct hosts (one broker, a few producer connections), so each distinct
host is formatted once, by the reference :func:`~rmq_spark.codec.record.decode_host` (its text
is remembered across calls), and spread to its records. The msgId is the upper-case hex of
store address, port and physical offset; with one store host (the usual case) only the
offsets are hex-printed and the host's part is copied in front.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode.headers import HostBytes, inverse_order
from rmq_spark.codec.arrow_decode.source import (
    all_equal_byte_rows,
    repeat_string,
    string_array,
    take,
)
from rmq_spark.codec.record import IPV4_HOST, decode_host
from rmq_spark.errors import InvalidArgumentError

# Above this many distinct hosts in a batch, IPv4 hosts are formatted with Arrow kernels
# (fixed cost ~0.3 ms) rather than one Python call each.
_MANY_HOSTS = 512
# Up to this many records, IPv4 hosts are looked up in the known hosts directly (a binary
# search each); above, the batch's distinct hosts are found by hashing first.
FEW_RECORDS = 1024
# The most IPv4 hosts remembered; past it the memory starts again from the current batch.
KNOWN_LIMIT = 4096

host_text = functools.lru_cache(maxsize=4096)(decode_host)


#: the columns this module makes, in the decoder's column order
HOST_COLUMNS = ("msgId", "bornHost", "storeHost")


def host_columns(
    hosts: list[HostBytes], n: int, names: tuple[str, ...] = HOST_COLUMNS
) -> dict[str, pa.Array]:
    """The columns of ``names`` (of :data:`HOST_COLUMNS`), per layout group, then put back
    in record order; the others are not made (formatting hosts is most of the cost)."""
    columns = [_group_columns(g, names) for g in hosts]
    if len(hosts) == 1:
        return dict(zip(names, columns[0], strict=True))
    inverse = inverse_order([g.rows for g in hosts if g.rows is not None], n)
    return {
        name: take(pa.concat_arrays(list(parts)), inverse)
        for name, parts in zip(names, zip(*columns, strict=True), strict=True)
    }


def _group_columns(group: HostBytes, names: tuple[str, ...]) -> list[pa.Array]:
    made = {}
    if "bornHost" in names:
        made["bornHost"] = host_strings(group.born)
    if "storeHost" in names or "msgId" in names:
        made.update(_store_columns(group.store, group.offset, names))
    return [made[name] for name in names]


def host_strings(raw: np.ndarray) -> pa.Array:
    """The ``ip:port`` text of every row of an (n, 8) IPv4 or (n, 20) IPv6 byte matrix."""
    n, width = raw.shape
    if all_equal_byte_rows(raw):  # one host for the whole batch: the broker, usually
        return repeat_string(host_text(raw[0].tobytes()).encode(), n)
    if width == IPV4_HOST:
        keys = raw.view(np.uint64).ravel()  # address and port as one number
        found = _KNOWN.lookup(keys)
        if found is None and n <= FEW_RECORDS:
            found = _KNOWN.learn(keys)
        if found is not None:
            return take(*found)
        numbers = pa.Array.from_buffers(pa.uint64(), n, [None, pa.py_buffer(keys)])
        encoded = numbers.dictionary_encode()  # hashing uint64s beats fixed-size binaries
        count = len(encoded.dictionary)
        distinct = np.frombuffer(encoded.dictionary.buffers()[1], np.uint64, count)
        found = _KNOWN.learn(distinct)
        if found is not None:
            texts, codes = found
            indices = np.frombuffer(encoded.indices.buffers()[1], np.int32, n)
            return take(texts, codes[indices])
        return take(_format_hosts(_byte_rows(distinct)), encoded.indices)
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(raw)])
    encoded = keys.dictionary_encode()
    count = len(encoded.dictionary)
    distinct = np.frombuffer(encoded.dictionary.buffers()[1], np.uint8, count * width)
    return take(_format_hosts(distinct.reshape(count, width)), encoded.indices)


def _byte_rows(keys: np.ndarray) -> np.ndarray:
    return keys.view(np.uint8).reshape(len(keys), IPV4_HOST)


def _format_hosts(rows: np.ndarray) -> pa.Array:
    """The text of each row of an (n, 8 or 20) matrix of distinct hosts."""
    if rows.shape[1] == IPV4_HOST and len(rows) > _MANY_HOSTS:
        return _format_ipv4(rows)
    width = rows.shape[1]
    flat = rows.tobytes()
    return pa.array(
        [decode_host(flat[i : i + width]) for i in range(0, len(flat), width)], pa.string()
    )


def _format_ipv4(raw: np.ndarray) -> pa.Array:
    octets = [pc.cast(pa.array(raw[:, k]), pa.string()) for k in range(4)]
    port = np.ascontiguousarray(raw[:, 4:8]).view(">i4").ravel().astype(np.int32)
    address = pc.binary_join_element_wise(*octets, ".")
    return pc.binary_join_element_wise(address, pc.cast(pa.array(port), pa.string()), ":")


class _KnownHosts:
    """IPv4 hosts already formatted, remembered across calls: their 8 raw bytes as sorted
    uint64 keys (numpy and Arrow), and their texts in the same order.

    A snapshot is never changed once published (a new one replaces it), so threads decoding
    at once can share it without a lock; one may just lose another's new hosts.
    """

    def __init__(self) -> None:
        # Nothing is built here: the module is imported wherever the client is (Spark's
        # Python processes among them), and pyarrow's first array built from Python values
        # imports pandas, which costs about half a second.
        self._snapshot: tuple[np.ndarray, pa.Array, pa.Array] | None = None

    def lookup(self, keys: np.ndarray) -> tuple[pa.Array, np.ndarray | pa.Array] | None:
        """Texts and, for each key, its position in them; None unless all are known."""
        if self._snapshot is None:
            return None
        known, known_arrow, texts = self._snapshot
        if not len(known):
            return None
        if len(keys) <= FEW_RECORDS:  # a binary search each: no fixed cost to speak of
            at = np.searchsorted(known, keys)
            np.minimum(at, len(known) - 1, out=at)
            return (texts, at) if (known[at] == keys).all() else None
        numbers = pa.Array.from_buffers(pa.uint64(), len(keys), [None, pa.py_buffer(keys)])
        at = _INDEX_IN.call([numbers], pc.SetLookupOptions(known_arrow))
        return (texts, at) if not at.null_count else None

    def learn(self, keys: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
        """As :meth:`lookup`, formatting and remembering the hosts not known yet first.
        None when the keys hold more distinct hosts than are kept."""
        if self._snapshot is None:
            self._snapshot = self._publish(np.zeros(0, np.uint64), pa.array([], pa.string()))
        known, _, texts = self._snapshot
        new = np.setdiff1d(keys, known)  # sorted, distinct
        if len(new) > KNOWN_LIMIT:
            return None
        if len(known) + len(new) > KNOWN_LIMIT:  # start again rather than grow without end
            known, texts = np.zeros(0, np.uint64), pa.array([], pa.string())
            new = np.unique(keys)
        merged = np.concatenate([known, new])
        order = np.argsort(merged, kind="stable")
        texts = take(pa.concat_arrays([texts, _format_hosts(_byte_rows(new))]), order)
        self._snapshot = self._publish(merged[order], texts)
        return texts, np.searchsorted(merged[order], keys)

    @staticmethod
    def _publish(keys: np.ndarray, texts: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
        return keys, pa.array(keys, pa.uint64()), texts


_INDEX_IN = pc.get_function("index_in")
_KNOWN = _KnownHosts()


def _store_columns(
    store: np.ndarray, offset: np.ndarray, names: tuple[str, ...]
) -> dict[str, pa.Array]:
    """storeHost and msgId, those of them in ``names``."""
    made = {}
    if all_equal_byte_rows(store):
        host = store[0].tobytes()
        if "storeHost" in names:
            made["storeHost"] = repeat_string(host_text(host).encode(), len(store))
        if "msgId" in names:
            made["msgId"] = _hex_strings(offset, np.frombuffer(_hex_text(host), np.uint32))
        return made
    if "storeHost" in names:
        made["storeHost"] = host_strings(store)
    if "msgId" in names:
        made["msgId"] = _hex_strings(np.concatenate([store, offset], axis=1))
    return made


@functools.lru_cache(maxsize=64)
def _hex_text(raw: bytes) -> bytes:
    return raw.hex().upper().encode()


def _hex_table() -> np.ndarray:
    """Upper-case hex of every 2-byte pair, as native uint32 (4 ASCII chars) per uint16 key."""
    pair_hex = np.frombuffer("".join(f"{b:02X}" for b in range(256)).encode(), np.uint16)
    pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    return np.ascontiguousarray(pair_hex[pairs]).view(np.uint32).ravel()


_HEX_OF_PAIR = _hex_table()


def _hex_strings(raw: np.ndarray, prefix: np.ndarray | None = None) -> pa.Array:
    """Upper-case hex text of each row of an (n, even width) byte matrix, as strings, each
    after the ``prefix`` text (uint32 words of 4 ASCII characters) when one is given."""
    n, width = raw.shape
    lead = 0 if prefix is None else len(prefix)
    row_words = lead + width // 2  # uint32 words of 4 ASCII characters
    if n * 4 * row_words >= 1 << 31:
        raise InvalidArgumentError(f"{n} records are too many for one batch; decode fewer")
    hexed = _HEX_OF_PAIR[np.ascontiguousarray(raw).view(np.uint16)]  # (n, width / 2)
    if prefix is not None and lead:
        text = np.empty((n, row_words), np.uint32)
        # Column by column, 8 characters at a time where they fit: numpy loops over the last
        # axis innermost, slow when it is this short.
        step = 2 if lead % 2 == 0 and width % 4 == 0 else 1
        words, fill, part = (a.view(f"u{4 * step}") for a in (text, prefix, hexed))
        for k in range(lead // step):
            words[:, k] = fill[k]
        for k in range(part.shape[1]):
            words[:, lead // step + k] = part[:, k]
        hexed = text
    return string_array(np.arange(n + 1, dtype=np.int32) * np.int32(4 * row_words), hexed)
