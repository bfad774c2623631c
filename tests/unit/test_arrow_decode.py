"""The vectorised decoder must agree with the reference codec on every column of every record."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_spark.codec.arrow_decode import (
    RECORD_SCHEMA,
    decode_records,
    headers,
    index_records,
    property_map,
)
from rmq_spark.codec.properties import KEYS, TAGS, decode_properties, encode_properties
from rmq_spark.codec.record import (
    Record,
    encode_record,
)
from rmq_spark.errors import CorruptDataError, InvalidArgumentError
from tests.support.arrow_records import (
    BASE,
    CASES,
    corrupt_second_record,
    flip_body_byte,
    oracle_rows,
    rec,
    records,
    records_buffer,
    set_magic,
)


def assert_decodes_like_reference(buf: bytes) -> pa.RecordBatch:
    batch = decode_records(buf)
    assert batch.schema == RECORD_SCHEMA
    assert batch.to_pylist() == oracle_rows(buf)
    return batch


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_single_record_matches_reference(case: Record) -> None:
    assert_decodes_like_reference(records_buffer(case))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_record_between_common_records_matches_reference(case: Record) -> None:
    neighbour = rec(queue_offset=1, physical_offset=5)
    assert_decodes_like_reference(records_buffer(neighbour, case, neighbour, case))


def test_mixed_buffer_of_every_variant_keeps_record_order() -> None:
    records = [
        dataclasses.replace(case, queue_offset=i, physical_offset=1000 + i)
        for i, case in enumerate(list(CASES.values()) * 3)
    ]
    buf = records_buffer(*records)
    batch = assert_decodes_like_reference(buf)
    assert batch.column("queueOffset").to_pylist() == list(range(len(records)))


def test_values_are_what_the_producer_wrote() -> None:
    """Spot-check literal values, independently of the reference decoder."""
    buf = records_buffer(rec(), rec(store_host="[2001:db8::1]:10911", physical_offset=16))
    rows = decode_records(buf).to_pylist()
    first, second = rows
    assert first["msgId"] == "0A00000500002A9F0000001CBE991A14"
    assert second["msgId"] == "20010DB8" + "0" * 23 + "1" + "00002A9F" + "0" * 14 + "10"
    assert first["tags"] == "TagA" and first["keys"] == "order-1 user-9"
    assert first["properties"] == [(TAGS, "TagA"), (KEYS, "order-1 user-9"), ("UNIQ_KEY", "AC1F")]
    assert first["bornHost"] == "192.168.1.20:53211"
    assert second["storeHost"] == "[2001:db8::1]:10911"
    assert first["sysFlag"] == 0x2 | 0x8 and second["sysFlag"] == 0x2 | 0x8 | 0x20


def test_topics_of_equal_length_are_not_merged() -> None:
    buf = records_buffer(rec(topic="TopicA"), rec(topic="TopicB"), rec(topic="TopicA"))
    batch = assert_decodes_like_reference(buf)
    assert batch.column("topic").to_pylist() == ["TopicA", "TopicB", "TopicA"]


def test_topics_sharing_a_long_prefix_are_not_merged() -> None:
    long_a, long_b = "orders-" + "x" * 20 + "a", "orders-" + "x" * 20 + "b"
    buf = records_buffer(rec(topic=long_a), rec(topic=long_b), rec(topic="short"))
    batch = assert_decodes_like_reference(buf)
    assert batch.column("topic").to_pylist() == [long_a, long_b, "short"]


def test_many_records_across_header_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(headers, "CHUNK_RECORDS", 4)
    records = [
        rec(queue_offset=i, body=bytes([i % 256]) * (i % 30), born_host=f"10.1.2.{i % 9}:{i}")
        for i in range(37)
    ]
    assert_decodes_like_reference(records_buffer(*records))


def test_many_distinct_hosts() -> None:
    records = [
        rec(born_host=f"10.{i % 3}.{i // 3 % 256}.{i}:{1000 + i}", store_host=f"172.16.0.{i}:{i}")
        for i in range(150)
    ]
    assert_decodes_like_reference(records_buffer(*records))


IRREGULAR_PROPERTIES = {
    "value holding \\x01": b"A\x01x\x01y\x02TAGS\x01t\x02",
    "no trailing separator": b"TAGS\x01a\x02KEYS\x01k",
    "empty items": b"\x02\x02TAGS\x01a\x02\x02",
    "item without \\x01": b"junk\x02TAGS\x01a\x02",
    "repeated name keeps the last": b"TAGS\x01a\x02TAGS\x01b\x02",
    "invalid utf-8": b"KEYS\x01\xff\xfe\x02TAGS\x01ok\x02",
}


@pytest.mark.parametrize("raw", IRREGULAR_PROPERTIES.values(), ids=IRREGULAR_PROPERTIES.keys())
def test_irregular_properties_decode_like_reference(raw: bytes) -> None:
    buf = records_buffer(rec(), rec(properties=raw), rec())
    rows = decode_records(buf).to_pylist()
    expected = decode_properties(raw)
    assert dict(rows[1]["properties"]) == expected
    assert rows[1]["tags"] == expected.get(TAGS)
    assert rows[1]["keys"] == expected.get(KEYS)
    assert rows[0]["tags"] == rows[2]["tags"] == "TagA"


def test_invalid_utf8_topic_is_replaced_like_reference() -> None:
    first = bytearray(encode_record(rec(topic="Tx")))
    first[first.index(b"Tx") + 1] = 0xFF
    buf = bytes(first) + encode_record(rec(topic="Ty"))
    batch = assert_decodes_like_reference(buf)
    assert batch.column("topic").to_pylist() == ["T\ufffd", "Ty"]


@pytest.mark.parametrize(
    "convert",
    [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, np.uint8), pa.py_buffer],
    ids=["bytes", "bytearray", "memoryview", "numpy", "pa.Buffer"],
)
def test_accepts_every_buffer_type(convert) -> None:
    buf = records_buffer(rec(), rec(body=b""), rec(born_host="[::1]:5"))
    assert decode_records(convert(buf)).to_pylist() == oracle_rows(buf)


def test_rejects_a_numpy_array_that_is_not_bytes() -> None:
    with pytest.raises(InvalidArgumentError, match="1-D uint8"):
        decode_records(np.zeros(4, np.int32))


def test_zero_records_give_an_empty_batch() -> None:
    for batch in (
        decode_records(b""),
        decode_records(records_buffer(rec()), starts=np.array([], np.int64), sizes=[]),
        decode_records(b"", sizes=[]),
    ):
        assert batch.num_rows == 0
        assert batch.schema == RECORD_SCHEMA
    assert len(index_records(b"")) == 0


def test_index_records_finds_every_record() -> None:
    records = list(CASES.values())
    buf = records_buffer(*records)
    index = index_records(buf)
    sizes = [len(encode_record(r)) for r in records]
    assert index.sizes.tolist() == sizes
    assert index.starts.tolist() == np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()


def test_known_starts_and_sizes_decode_only_those_records() -> None:
    records = [
        rec(queue_offset=i, topic=f"T{i}", born_host="[::9]:1" if i % 2 else BASE.born_host)
        for i in range(6)
    ]
    buf = records_buffer(*records)
    index = index_records(buf)
    pick = np.array([4, 1, 5])
    batch = decode_records(buf, index.starts[pick], index.sizes[pick])
    assert batch.to_pylist() == [oracle_rows(buf)[i] for i in pick]
    # With starts alone, sizes come from each record's TOTALSIZE field.
    assert decode_records(buf, starts=index.starts[pick]).equals(batch)
    # With sizes alone, records are back to back from position 0.
    assert decode_records(buf, sizes=index.sizes).to_pylist() == oracle_rows(buf)


def test_known_sizes_that_disagree_with_the_record_are_rejected() -> None:
    buf = records_buffer(rec(), rec())
    index = index_records(buf)
    with pytest.raises(CorruptDataError, match=f"at byte {index.starts[1]}: TOTALSIZE"):
        decode_records(buf, index.starts, index.sizes - np.array([0, 1]))


def test_starts_and_sizes_of_different_lengths_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="one length"):
        decode_records(records_buffer(rec()), starts=[0], sizes=[10, 20])


@pytest.mark.parametrize("decode", [decode_records, index_records])
def test_bad_magic_names_the_record_position(decode) -> None:
    buf, second = corrupt_second_record(set_magic)
    with pytest.raises(CorruptDataError, match=f"at byte {second}: bad magic code 0xCAFEBABE"):
        decode(buf)


def test_bad_magic_with_known_positions_names_the_record_position() -> None:
    good = records_buffer(rec(), rec(topic="Second"), rec())
    index = index_records(good)
    buf, second = corrupt_second_record(set_magic)
    with pytest.raises(CorruptDataError, match=f"at byte {second}: bad magic"):
        decode_records(buf, index.starts, index.sizes)


@pytest.mark.parametrize("decode", [decode_records, index_records])
@pytest.mark.parametrize("cut", [1, 3, 50])
def test_truncated_buffer_names_the_torn_record(decode, cut: int) -> None:
    buf = records_buffer(rec(), rec(), rec())
    last = index_records(buf).starts[-1]
    with pytest.raises(CorruptDataError, match=f"record 2 at byte {last}"):
        decode(buf[:-cut])


@pytest.mark.parametrize("decode", [decode_records, index_records])
def test_trailing_bytes_after_the_last_record_are_reported(decode) -> None:
    buf = records_buffer(rec(), rec())
    with pytest.raises(CorruptDataError, match=f"at byte {len(buf)}: size 0"):
        decode(buf + b"\x00\x01")


def test_zero_size_record_does_not_hang() -> None:
    buf, second = corrupt_second_record(lambda b, at: struct.pack_into(">i", b, at, 0))
    with pytest.raises(CorruptDataError, match=f"at byte {second}: size 0"):
        decode_records(buf)


def test_body_length_overrunning_the_record_is_reported() -> None:
    def lie_about_body(buf: bytearray, at: int) -> None:
        struct.pack_into(">i", buf, at + 84, 10_000)

    buf, second = corrupt_second_record(lie_about_body)
    with pytest.raises(CorruptDataError, match=f"at byte {second}: body length 10000"):
        decode_records(buf)


def test_first_bad_record_wins_whatever_check_catches_it() -> None:
    """Record 1 has a bad body length, record 2 a bad magic: record 1 is reported."""
    records = [encode_record(rec()) for _ in range(3)]
    buf = bytearray(b"".join(records))
    struct.pack_into(">i", buf, len(records[0]) + 84, 10_000)
    set_magic(buf, 2 * len(records[0]))
    index = index_records(records_buffer(rec(), rec(), rec()))
    with pytest.raises(CorruptDataError, match=f"record 1 at byte {len(records[0])}"):
        decode_records(bytes(buf), index.starts, index.sizes)


def test_check_crc_catches_a_flipped_body_byte() -> None:
    buf, second = corrupt_second_record(flip_body_byte)
    with pytest.raises(CorruptDataError, match=f"record 1 at byte {second}: body CRC"):
        decode_records(buf, check_crc=True)
    # Without the check the (altered) body is returned as stored.
    assert decode_records(buf).column("body")[1].as_py()[5] == BASE.body[5] ^ 0x01


def test_check_crc_passes_intact_records() -> None:
    buf = records_buffer(*CASES.values())
    assert decode_records(buf, check_crc=True).equals(decode_records(buf))


# --- property-based round trip ----------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, max_size=8))
def test_random_records_round_trip(batch_records: list[Record]) -> None:
    buf = records_buffer(*batch_records)
    expected = oracle_rows(buf)
    assert decode_records(buf).to_pylist() == expected
    index = index_records(buf)
    assert decode_records(buf, index.starts, index.sizes, check_crc=True).to_pylist() == expected


# Property counts that defeat the same-count-per-record shortcut in different ways: a total
# divisible by the record count whose every k-th item is not a record end, empty records, and
# names close to TAGS/KEYS (other length, same prefix) that must not match.
PROPERTY_SHAPES = {
    "2 then 4 items (divisible total)": [
        {TAGS: "a", KEYS: "k"},
        {"UNIQ_KEY": "u", TAGS: "b", "X": "x", KEYS: "kk"},
    ],
    "empty between full": [{TAGS: "a", KEYS: "k"}, {}, {TAGS: "c", KEYS: "kc"}],
    "TAGS missing in one": [{TAGS: "a"}, {KEYS: "k"}, {TAGS: "c", KEYS: "kc"}],
    "near names": [{"TAG": "1", "TAGSX": "2", "KEY": "3", "keys": "4"}, {TAGS: "t", "KEYSS": "5"}],
    "same count, name moves": [{TAGS: "a", KEYS: "k"}, {KEYS: "k2", TAGS: "b"}],
    "all empty": [{}, {}],
}


@pytest.mark.parametrize("shape", PROPERTY_SHAPES.values(), ids=PROPERTY_SHAPES.keys())
def test_property_shapes_decode_like_reference(shape: list[dict[str, str]]) -> None:
    records = [rec(queue_offset=i, properties=encode_properties(p)) for i, p in enumerate(shape)]
    assert_decodes_like_reference(records_buffer(*records))


def test_find_names_matches_only_whole_four_byte_names() -> None:
    keys = pa.array(["x", "TAGS", "KEYS", "TAGSX", "TAG", "TAGS"]).slice(1)
    tags_at, keys_at = property_map.find_names(keys, TAGS, KEYS)
    assert tags_at.tolist() == [0, 4] and keys_at.tolist() == [1]
    empty = property_map.find_names(pa.array([], pa.string()), TAGS, KEYS)
    assert [e.tolist() for e in empty] == [[], []]


def test_one_store_host_and_several_born_hosts() -> None:
    records = [rec(born_host=f"10.0.0.{i % 3}:{i % 2}", physical_offset=i) for i in range(10)]
    assert_decodes_like_reference(records_buffer(*records))
