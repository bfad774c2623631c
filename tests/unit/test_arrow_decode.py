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
    POS_MAGIC,
    Record,
    encode_record,
    iter_records,
    offset_msg_id,
)
from rmq_spark.errors import CorruptDataError, InvalidArgumentError

# Every field differs from its default, so a swapped or misplaced column cannot pass.
BASE = Record(
    topic="TopicTest",
    queue_id=3,
    body=b"Hello RocketMQ, a body longer than twelve bytes",
    properties=encode_properties({TAGS: "TagA", KEYS: "order-1 user-9", "UNIQ_KEY": "AC1F"}),
    flag=7,
    queue_offset=41,
    physical_offset=123_456_789_012,
    sysflag=0x2 | 0x8,
    born_timestamp=1_700_000_000_123,
    born_host="192.168.1.20:53211",
    store_timestamp=1_700_000_000_456,
    store_host="10.0.0.5:10911",
    reconsume_times=2,
    prepared_tx_offset=99,
)


def rec(**changes) -> Record:
    return dataclasses.replace(BASE, **changes)


def records_buffer(*records: Record) -> bytes:
    return b"".join(encode_record(r) for r in records)


def oracle_rows(buf: bytes) -> list[dict]:
    """What every column must hold, from the reference per-record decoder."""
    return [reference_row(r) for r in iter_records(buf)]


def reference_row(r: Record) -> dict:
    props = decode_properties(r.properties)
    return {
        "topic": r.topic,
        "queueId": r.queue_id,
        "queueOffset": r.queue_offset,
        "commitLogOffset": r.physical_offset,
        "msgId": offset_msg_id(r.store_host, r.physical_offset),
        "tags": props.get(TAGS),
        "keys": props.get(KEYS),
        "body": r.body,
        "properties": list(props.items()),
        "bornTimestamp": r.born_timestamp,
        "storeTimestamp": r.store_timestamp,
        "bornHost": r.born_host,
        "storeHost": r.store_host,
        "reconsumeTimes": r.reconsume_times,
        "sysFlag": r.sysflag,
        "flag": r.flag,
    }


def assert_decodes_like_reference(buf: bytes) -> pa.RecordBatch:
    batch = decode_records(buf)
    assert batch.schema == RECORD_SCHEMA
    assert batch.to_pylist() == oracle_rows(buf)
    return batch


CASES = {
    "ipv4": rec(),
    "born host ipv6": rec(born_host="[2001:db8::7]:40001"),
    "store host ipv6": rec(store_host="[fe80::1:2]:10911"),
    "both hosts ipv6": rec(born_host="[::1]:1", store_host="[2001:db8:0:1::5]:10912"),
    "topic over 127 bytes (v2 magic)": rec(topic="T" * 200),
    "topic of 300 bytes, ipv6 hosts": rec(
        topic="%RETRY%" + "g" * 293, born_host="[::2]:9", store_host="[::3]:8"
    ),
    "empty body": rec(body=b""),
    "12-byte body (inline view)": rec(body=b"x" * 12),
    "13-byte body (out-of-line view)": rec(body=b"y" * 13),
    "1-byte body": rec(body=b"\x00"),
    "binary body with separator bytes": rec(body=bytes(range(256))),
    "non-ascii utf-8": rec(
        topic="Topic_ü",
        body="тело сообщения 消息".encode(),
        properties=encode_properties({TAGS: "标签", KEYS: "ключ другой", "名": "值"}),
    ),
    "empty properties": rec(properties=b""),
    "no TAGS, no KEYS": rec(properties=encode_properties({"UNIQ_KEY": "X"})),
    "empty TAGS value": rec(properties=encode_properties({TAGS: ""})),
    "long property value": rec(properties=encode_properties({KEYS: "k" * 5000})),
    "negative and extreme numbers": rec(
        queue_id=-1,
        flag=-(2**31),
        queue_offset=2**63 - 1,
        physical_offset=2**40 + 3,
        born_timestamp=-5,
        reconsume_times=2**31 - 1,
    ),
}


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


def corrupt_second_record(transform) -> tuple[bytes, int]:
    first = encode_record(rec())
    buf = bytearray(first + encode_record(rec(topic="Second")) + encode_record(rec()))
    transform(buf, len(first))
    return bytes(buf), len(first)


def set_magic(buf: bytearray, at: int) -> None:
    struct.pack_into(">I", buf, at + POS_MAGIC, 0xCAFEBABE)


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


def flip_body_byte(buf: bytearray, at: int) -> None:
    buf[at + 88 + 5] ^= 0x01


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

topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|",
    min_size=1,
    max_size=200,
)
hosts = st.one_of(
    st.builds(lambda ip, port: f"{ip}:{port}", st.ip_addresses(v=4), st.integers(0, 65535)),
    st.builds(lambda ip, port: f"[{ip}]:{port}", st.ip_addresses(v=6), st.integers(0, 65535)),
)
property_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)
property_maps = st.dictionaries(property_text.filter(bool), property_text, max_size=5)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
records = st.builds(
    Record,
    topic=topics,
    queue_id=int32s,
    body=st.binary(max_size=40),
    properties=st.one_of(
        property_maps.map(encode_properties),
        st.fixed_dictionaries({TAGS: property_text, KEYS: property_text}).map(encode_properties),
    ),
    flag=int32s,
    queue_offset=int64s,
    physical_offset=int64s,
    sysflag=st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x80]),
    born_timestamp=int64s,
    born_host=hosts,
    store_timestamp=int64s,
    store_host=hosts,
    reconsume_times=int32s,
    prepared_tx_offset=int64s,
)


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
