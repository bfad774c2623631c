"""Consume-queue entries: physical offset (8) | record size (4) | tag hash code (8)."""

from __future__ import annotations

import numpy as np

from rmq_spark.codec.consume_queue import (
    ENTRY_DTYPE,
    ENTRY_SIZE,
    NATIVE_DTYPE,
    decode_entries,
    encode_entries,
)
from rmq_spark.codec.taghash import tag_hash_code


def test_entry_is_20_bytes() -> None:
    assert ENTRY_SIZE == 20
    assert ENTRY_DTYPE.itemsize == 20
    assert len(encode_entries([0], [0], [0])) == 20


def test_literal_entry_with_a_negative_tag_code() -> None:
    # Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE, sign-extended to 64 bits
    code = tag_hash_code("polygenelubricants")
    assert code == -2147483648
    data = encode_entries([(1 << 32) + 115], [115], [code])
    assert data.hex().upper() == (
        "0000000100000073"  # physical offset 2**32 + 115
        "00000073"  # record size 115
        "FFFFFFFF80000000"  # tag code -2**31, sign-extended
    )


def test_literal_entries_back_to_back() -> None:
    data = encode_entries([0, 115], [115, 107], [2598919, -1])
    assert data.hex().upper() == (
        "0000000000000000"
        "00000073"
        "000000000027A807"  # 0, 115, hash("TagA") = 2598919
        "0000000000000073"
        "0000006B"
        "FFFFFFFFFFFFFFFF"  # 115, 107, -1
    )


def test_decode_of_a_literal() -> None:
    data = bytes.fromhex("000000010000007300000073FFFFFFFF80000000")
    entries = decode_entries(data)
    assert entries.dtype == NATIVE_DTYPE
    assert entries["physical_offset"].tolist() == [(1 << 32) + 115]
    assert entries["size"].tolist() == [115]
    assert entries["tag_code"].tolist() == [-2147483648]


def test_round_trip() -> None:
    phys = [0, 91, 1 << 40, (1 << 63) - 1]
    sizes = [91, 4_194_304, 115, 2**31 - 1]
    codes = [0, -(2**63), 2**63 - 1, -650586465]
    entries = decode_entries(encode_entries(phys, sizes, codes))
    assert len(entries) == 4
    assert entries["physical_offset"].tolist() == phys
    assert entries["size"].tolist() == sizes
    assert entries["tag_code"].tolist() == codes


def test_round_trip_from_numpy_arrays() -> None:
    rng = np.random.default_rng(7)
    phys = rng.integers(0, 2**62, 1000, dtype=np.int64)
    sizes = rng.integers(91, 2**22, 1000, dtype=np.int32)
    codes = rng.integers(-(2**31), 2**31, 1000, dtype=np.int64)
    data = encode_entries(phys, sizes, codes)
    assert len(data) == 1000 * 20
    entries = decode_entries(data)
    np.testing.assert_array_equal(entries["physical_offset"], phys)
    np.testing.assert_array_equal(entries["size"], sizes)
    np.testing.assert_array_equal(entries["tag_code"], codes)


def test_empty() -> None:
    assert encode_entries([], [], []) == b""
    assert len(decode_entries(b"")) == 0


def test_all_zero_entry_decodes_to_zeros() -> None:
    entries = decode_entries(bytes(40))
    assert entries["physical_offset"].tolist() == [0, 0]
    assert entries["size"].tolist() == [0, 0]


def test_decode_ignores_a_partial_trailing_entry() -> None:
    data = encode_entries([5], [100], [7]) + b"\x00" * 13
    assert decode_entries(data)["physical_offset"].tolist() == [5]


def test_decode_returns_a_copy() -> None:
    buf = bytearray(encode_entries([5], [100], [7]))
    entries = decode_entries(buf)
    buf[:] = bytes(20)
    assert entries["physical_offset"].tolist() == [5]
    entries["size"][0] = 1  # writable, does not touch the source
    assert buf == bytes(20)
