"""Checkpoint slots: a torn or garbled slot must read as "no checkpoint", never as data."""

from __future__ import annotations

import struct
import zlib

import pytest

from rmq_spark.store.checkpoint import Checkpoint, decode_slot, encode_slot

SAMPLE = Checkpoint(
    sequence=42,
    safe_offset=1_073_741_824 + 115,
    physic_msg_timestamp=1_700_000_000_123,
    logics_msg_timestamp=1_700_000_000_100,
)


@pytest.mark.parametrize(
    "cp",
    [
        Checkpoint(),
        SAMPLE,
        Checkpoint(sequence=2**64 - 1, safe_offset=2**63 - 1, physic_msg_timestamp=-1),
    ],
)
def test_round_trip(cp: Checkpoint) -> None:
    assert decode_slot(encode_slot(cp)) == cp


def test_slot_layout() -> None:
    data = encode_slot(SAMPLE)
    assert len(data) == 40
    body = bytes.fromhex(
        "524C4350"  # magic "RLCP"
        "000000000000002A"  # sequence 42
        "0000000040000073"  # safe offset 2**30 + 115
        "0000018BCFE5687B"  # physic timestamp 1700000000123
        "0000018BCFE56864"  # logics timestamp 1700000000100
    )
    assert data[:36] == body
    assert data[36:] == struct.pack(">I", zlib.crc32(body))


def test_slot_read_back_with_its_padding_decodes() -> None:
    # the file reads whole 512-byte slots
    padded = encode_slot(SAMPLE) + bytes(512 - 40)
    assert decode_slot(padded) == SAMPLE


def test_every_flipped_byte_makes_the_slot_invalid() -> None:
    data = encode_slot(SAMPLE)
    for i in range(len(data)):
        for mask in (0x01, 0x80):
            garbled = bytearray(data)
            garbled[i] ^= mask
            assert decode_slot(bytes(garbled)) is None, (i, mask)


@pytest.mark.parametrize("size", [0, 39, 40, 512])
def test_a_slot_of_zeros_is_no_checkpoint(size: int) -> None:
    assert decode_slot(bytes(size)) is None


def test_truncated_slot_is_no_checkpoint() -> None:
    data = encode_slot(SAMPLE)
    for cut in range(len(data)):
        assert decode_slot(data[:cut]) is None


def test_wrong_magic_with_a_valid_crc_is_no_checkpoint() -> None:
    body = struct.pack(">IQqqq", 0x12345678, 1, 2, 3, 4)
    assert decode_slot(body + struct.pack(">I", zlib.crc32(body))) is None
