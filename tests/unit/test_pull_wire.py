"""PullMessagesResponse as the broker serialises it by hand and clients read it back."""

from __future__ import annotations

import numpy as np
import pytest

from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import CorruptDataError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from rmq_spark.wire.pull import (
    decode_pull_response,
    encode_pull_response,
    field_prefix,
    pull_index,
    varint,
)

MQ = MessageQueue("Orders", "broker-a", 3)


def records(queue_offsets: list[int], body_bytes: int = 10) -> tuple[bytes, np.ndarray]:
    encoded = [
        encode_record(Record("Orders", 3, bytes([i % 256]) * body_bytes, queue_offset=offset))
        for i, offset in enumerate(queue_offsets)
    ]
    return b"".join(encoded), np.array([len(r) for r in encoded], dtype=np.int64)


def answer(queue_offsets: list[int], **overrides) -> m.PullMessagesResponse:
    data, sizes = records(queue_offsets)
    fields = {
        "status": m.PULL_STATUS_FOUND,
        "next_begin_offset": queue_offsets[-1] + 1,
        "max_offset": queue_offsets[-1] + 1,
        "records": data,
        "record_sizes_i32le": sizes.astype("<i4").tobytes(),
        "queue_offsets_i64le": np.array(queue_offsets).astype("<i8").tobytes(),
    }
    return m.PullMessagesResponse(**{**fields, **overrides})


@pytest.mark.parametrize("value", [1, 127, 128, 300, 16_383, 16_384, 2**31, 2**63 - 1])
def test_varint_is_protobufs_encoding(value):
    # An int64 field 2 serialises as the tag byte 0x10, then the varint.
    assert (
        b"\x10" + varint(value)
        == m.PullMessagesResponse(next_begin_offset=value).SerializeToString()
    )


def test_varint_of_zero_is_one_zero_byte_and_negatives_are_refused():
    assert varint(0) == b"\x00"
    with pytest.raises(ValueError, match="varint"):
        varint(-1)


@pytest.mark.parametrize(
    ("count", "body_bytes", "first"),
    [(1, 0, 0), (3, 10, 7), (200, 100, 2**40), (2_000, 1_000, 5)],  # lengths of 1 to 4 bytes
)
def test_the_hand_built_answer_is_exactly_protobufs_serialisation(count, body_bytes, first):
    offsets = list(range(first, first + 2 * count, 2))
    data, sizes = records(offsets, body_bytes)
    built = encode_pull_response(
        m.PULL_STATUS_FOUND, offsets[-1] + 1, first, offsets[-1] + 9, data, sizes, np.array(offsets)
    )
    expected = m.PullMessagesResponse(
        status=m.PULL_STATUS_FOUND,
        next_begin_offset=offsets[-1] + 1,
        min_offset=first,
        max_offset=offsets[-1] + 9,
        records=data,
        record_sizes_i32le=sizes.astype("<i4").tobytes(),
        queue_offsets_i64le=np.array(offsets, dtype="<i8").tobytes(),
    ).SerializeToString()
    assert built == expected
    parsed = m.PullMessagesResponse.FromString(built)
    got_sizes, got_offsets = pull_index(MQ, parsed)
    assert got_sizes.tolist() == sizes.tolist()
    assert got_offsets.tolist() == offsets


@pytest.mark.parametrize(
    "status", [m.PULL_STATUS_NO_NEW_MSG, m.PULL_STATUS_NO_MATCHED_MSG, m.PULL_STATUS_OFFSET_ILLEGAL]
)
def test_answers_without_records_carry_only_the_offsets(status):
    built = encode_pull_response(status, 12, 3, 12)
    assert (
        built
        == m.PullMessagesResponse(
            status=status, next_begin_offset=12, min_offset=3, max_offset=12
        ).SerializeToString()
    )
    assert pull_index(MQ, m.PullMessagesResponse.FromString(built))[0].size == 0


def test_the_encoder_refuses_an_index_that_does_not_match():
    data, sizes = records([0, 1])
    with pytest.raises(ValueError, match="2 record sizes but 1 queue offsets"):
        encode_pull_response(m.PULL_STATUS_FOUND, 2, 0, 2, data, sizes, np.array([0]))
    with pytest.raises(ValueError, match="without their sizes"):
        encode_pull_response(m.PULL_STATUS_FOUND, 2, 0, 2, data)


def test_field_prefix_is_tag_then_length():
    assert field_prefix(5, 3) == b"\x2a\x03"
    assert field_prefix(9, 300) == b"\x4a\xac\x02"


def test_a_decoded_answer_has_the_records_at_the_indexed_offsets():
    batch = decode_pull_response(MQ, answer([4, 6, 9]))
    assert batch.column("queueOffset").to_pylist() == [4, 6, 9]
    assert batch.column("body").to_pylist() == [b"\x00" * 10, b"\x01" * 10, b"\x02" * 10]


def test_an_answer_without_an_index_is_decoded_from_the_record_sizes():
    batch = decode_pull_response(
        MQ, answer([4, 5], record_sizes_i32le=b"", queue_offsets_i64le=b"")
    )
    assert batch.column("queueOffset").to_pylist() == [4, 5]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"record_sizes_i32le": b"\x01\x00\x00"}, "3 bytes of sizes and 16 bytes of queue"),
        ({"queue_offsets_i64le": b"\x00" * 20}, "not whole 4- and 8-byte integers"),
        ({"queue_offsets_i64le": np.array([4], "<i8").tobytes()}, "2 record sizes but 1 queue"),
        ({"record_sizes_i32le": np.array([80, 20], "<i4").tobytes()}, "add up to 100 bytes"),
    ],
)
def test_an_index_that_does_not_fit_the_records_is_corrupt_data(overrides, message):
    bad = answer([4, 5], **overrides)
    with pytest.raises(CorruptDataError, match=message) as info:
        decode_pull_response(MQ, bad)
    assert "topic 'Orders' broker 'broker-a' queue 3" in str(info.value)


def test_records_at_other_offsets_than_indexed_are_corrupt_data():
    # The broker's index says 4, 5 but the records hold 4, 7: a message would be lost.
    data, _ = records([4, 7])
    bad = answer([4, 5], records=data)
    with pytest.raises(CorruptDataError, match="record 1 has queue offset 7 but the answer's"):
        decode_pull_response(MQ, bad)


def test_an_answer_decodes_to_the_columns_asked_for():
    batch = decode_pull_response(MQ, answer([4, 6, 9]), ["body", "topic"])
    assert batch.schema.names == ["body", "topic"]  # the queue offsets were checked, then left
    assert (
        batch.to_pylist()
        == decode_pull_response(MQ, answer([4, 6, 9])).select(["body", "topic"]).to_pylist()
    )
    unindexed = answer([4, 5], record_sizes_i32le=b"", queue_offsets_i64le=b"")
    assert decode_pull_response(MQ, unindexed, ["topic"]).schema.names == ["topic"]


def test_records_at_other_offsets_are_corrupt_data_whatever_the_columns():
    data, _ = records([4, 7])
    with pytest.raises(CorruptDataError, match="record 1 has queue offset 7 but the answer's"):
        decode_pull_response(MQ, answer([4, 5], records=data), ["body"])
