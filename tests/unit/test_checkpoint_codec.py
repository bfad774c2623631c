"""The checkpoint files: a torn or garbled slot must read as "no checkpoint", never as
data; RocketMQ's file has RocketMQ's layout, and an old store's slots move out of it."""

from __future__ import annotations

import struct
import zlib

import pytest

from rmq_spark.store.checkpoint import (
    ROCKETMQ_FILE,
    Checkpoint,
    RocketMQCheckpoint,
    StoreCheckpoints,
    decode_rocketmq,
    decode_slot,
    encode_rocketmq,
    encode_slot,
    newest_slot,
    open_checkpoints,
    read_store_checkpoints,
    rocketmq_recovery_start,
)

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


# -- RocketMQ's checkpoint ------------------------------------------------------------------


def test_rocketmq_layout_is_three_big_endian_longs() -> None:
    cp = RocketMQCheckpoint(1_700_000_000_123, 1_700_000_000_100, 1_700_000_000_050)
    data = encode_rocketmq(cp)
    assert data == bytes.fromhex("0000018BCFE5687B0000018BCFE568640000018BCFE56832")
    assert decode_rocketmq(data + bytes(4096 - 24)) == cp


def test_old_rocketlite_slots_are_not_read_as_rocketmq_timestamps() -> None:
    # what Apache RocketMQ misread as physicMsgTimestamp 5930188820216545280
    old = encode_slot(SAMPLE).ljust(512, b"\0") + bytes(512)
    assert decode_rocketmq(old) is None
    assert newest_slot(old) == SAMPLE


@pytest.mark.parametrize(
    ("physic", "logics", "expected"),
    [
        (10_000, 9_000, 6_000),  # the smaller one, less 3 s
        (9_000, 10_000, 6_000),
        (2_000, 10_000, 0),  # never below zero
        (0, 0, 0),
    ],
)
def test_rocketmq_min_timestamp(physic: int, logics: int, expected: int) -> None:
    assert RocketMQCheckpoint(physic, logics, 0).min_timestamp == expected


CP = RocketMQCheckpoint(10_000, 10_000, 0)  # recovery may start at records up to 7_000


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        ([(0, 1_000), (100, 5_000), (200, 8_000)], 100),  # newest segment old enough
        ([(0, 1_000), (100, 7_000)], 100),  # at the limit counts
        ([(0, 1_000), (100, None)], 0),  # an empty last segment is skipped
        ([(0, 8_000)], None),  # nothing old enough: scan everything
        ([(0, 0), (100, 9_000)], None),  # a zero timestamp is no record
        ([], None),
    ],
)
def test_rocketmq_recovery_start(segments, expected) -> None:
    assert rocketmq_recovery_start(segments, CP) == expected


def test_an_old_store_keeps_its_safe_offset_and_gets_rocketmqs_layout(tmp_path) -> None:
    (tmp_path / ROCKETMQ_FILE).write_bytes(encode_slot(SAMPLE) + bytes(512 - 40) + bytes(512))
    before = read_store_checkpoints(tmp_path)
    assert before == StoreCheckpoints(rocketmq=None, rocketlite=SAMPLE)

    ours, theirs = open_checkpoints(tmp_path)
    assert ours.last is not None and ours.last.safe_offset == SAMPLE.safe_offset
    assert theirs.last is None
    theirs.write(RocketMQCheckpoint(5, 6, 7))
    ours.close()
    theirs.close()

    data = (tmp_path / ROCKETMQ_FILE).read_bytes()
    assert len(data) == 4096 and data[:24] == encode_rocketmq(RocketMQCheckpoint(5, 6, 7))
    assert not any(data[24:]), "no trace of the old slots is left for RocketMQ to read"
    after = read_store_checkpoints(tmp_path)
    assert after.rocketmq == RocketMQCheckpoint(5, 6, 7)
    assert after.rocketlite == Checkpoint(
        SAMPLE.sequence,
        SAMPLE.safe_offset,
        SAMPLE.physic_msg_timestamp,
        SAMPLE.logics_msg_timestamp,
    )


def test_a_store_written_by_rocketmq_has_no_rocketlite_checkpoint(tmp_path) -> None:
    (tmp_path / ROCKETMQ_FILE).write_bytes(encode_rocketmq(CP).ljust(4096, b"\0"))
    assert read_store_checkpoints(tmp_path) == StoreCheckpoints(rocketmq=CP, rocketlite=None)
    ours, theirs = open_checkpoints(tmp_path)
    assert ours.last is None and theirs.last == CP
    ours.close()
    theirs.close()
    assert read_store_checkpoints(tmp_path).rocketmq == CP, "opening changes nothing in it"
