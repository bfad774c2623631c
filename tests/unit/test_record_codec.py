"""The reference commit-log record codec against records laid out by hand, byte by byte.

Every expected record below is written field by field from RocketMQ's CommitLog layout
(big-endian; see the facts file, section 1), never produced by the encoder under test.
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np
import pytest

from rmq_spark.codec import record as r
from rmq_spark.errors import CorruptDataError, InvalidArgumentError


def hexbytes(*fields: str) -> bytes:
    """Join hex fields (spaces allowed inside) into bytes."""
    return bytes.fromhex("".join(fields))


# --- v1 record, IPv4 hosts: 91 + 5 (body) + 9 (topic) + 10 (properties) = 115 bytes -------
V4_RECORD = r.Record(
    topic="TopicTest",
    queue_id=1,
    body=b"hello",
    properties=b"TAGS\x01TagA\x02",
    flag=0,
    queue_offset=7,
    physical_offset=1234,
    sysflag=0,
    born_timestamp=1_700_000_000_000,
    born_host="192.168.1.10:54321",
    store_timestamp=1_700_000_000_123,
    store_host="10.0.0.1:10911",
    reconsume_times=0,
    prepared_tx_offset=0,
)
V4_BYTES = hexbytes(
    "00000073",  # TOTALSIZE 115
    "DAA320A7",  # MAGICCODE v1
    "3610A686",  # BODYCRC crc32(b"hello") = 0x3610A686, top bit already clear
    "00000001",  # QUEUEID 1
    "00000000",  # FLAG 0
    "0000000000000007",  # QUEUEOFFSET 7
    "00000000000004D2",  # PHYSICALOFFSET 1234
    "00000000",  # SYSFLAG 0 (both hosts IPv4)
    "0000018BCFE56800",  # BORNTIMESTAMP 1700000000000
    "C0A8010A 0000D431",  # BORNHOST 192.168.1.10 : 54321
    "0000018BCFE5687B",  # STORETIMESTAMP 1700000000123
    "0A000001 00002A9F",  # STOREHOSTADDRESS 10.0.0.1 : 10911
    "00000000",  # RECONSUMETIMES 0
    "0000000000000000",  # PREPARED_TX_OFFSET 0
    "00000005",  # BODYLEN 5
    "68656C6C6F",  # BODY "hello"
    "09",  # TOPICLEN 9 (1 byte in v1)
    "546F706963 54657374",  # TOPIC "TopicTest"
    "000A",  # PROPERTIESLEN 10
    "54414753 01 54616741 02",  # PROPERTIES "TAGS" \x01 "TagA" \x02
)

# --- IPv6 born host (SYSFLAG 0x10, 20-byte host): 91 + 12 + 2 + 2 + 0 = 107 bytes --------
V6_BORN_RECORD = r.Record(
    topic="T6",
    queue_id=3,
    body=b"hi",
    properties=b"",
    flag=42,
    queue_offset=0,
    physical_offset=0,
    sysflag=0x10,
    born_timestamp=1,
    born_host="[2001:db8::1]:8080",
    store_timestamp=2,
    store_host="127.0.0.1:10911",
    reconsume_times=2,
    prepared_tx_offset=0,
)
V6_BORN_BYTES = hexbytes(
    "0000006B",  # TOTALSIZE 107
    "DAA320A7",  # MAGICCODE v1
    "58932AAC",  # BODYCRC crc32(b"hi") = 0xD8932AAC, & 0x7FFFFFFF
    "00000003",  # QUEUEID 3
    "0000002A",  # FLAG 42
    "0000000000000000",  # QUEUEOFFSET 0
    "0000000000000000",  # PHYSICALOFFSET 0
    "00000010",  # SYSFLAG born host IPv6
    "0000000000000001",  # BORNTIMESTAMP 1
    "20010DB8000000000000000000000001 00001F90",  # BORNHOST 2001:db8::1 : 8080 (20 bytes)
    "0000000000000002",  # STORETIMESTAMP 2
    "7F000001 00002A9F",  # STOREHOSTADDRESS 127.0.0.1 : 10911
    "00000002",  # RECONSUMETIMES 2
    "0000000000000000",  # PREPARED_TX_OFFSET 0
    "00000002",  # BODYLEN 2
    "6869",  # BODY "hi"
    "02",  # TOPICLEN 2
    "5436",  # TOPIC "T6"
    "0000",  # PROPERTIESLEN 0
)

# --- IPv6 store host (0x20) plus a transaction-commit bit (0x08) that must survive ------
# 91 + 12 + 2 (body) + 2 (topic) + 11 (properties) = 118 bytes
V6_STORE_RECORD = r.Record(
    topic="T6",
    queue_id=0,
    body=b"v6",
    properties=b"KEYS\x01k1 k2\x02",
    flag=0,
    queue_offset=1 << 40,
    physical_offset=1 << 33,
    sysflag=0x28,
    born_timestamp=0,
    born_host="10.0.0.2:1",
    store_timestamp=0,
    store_host="[::1]:10911",
    reconsume_times=0,
    prepared_tx_offset=99,
)
V6_STORE_BYTES = hexbytes(
    "00000076",  # TOTALSIZE 118
    "DAA320A7",  # MAGICCODE v1
    "77065916",  # BODYCRC crc32(b"v6") = 0xF7065916, & 0x7FFFFFFF
    "00000000",  # QUEUEID 0
    "00000000",  # FLAG 0
    "0000010000000000",  # QUEUEOFFSET 2**40
    "0000000200000000",  # PHYSICALOFFSET 2**33
    "00000028",  # SYSFLAG store host IPv6 | transaction commit
    "0000000000000000",  # BORNTIMESTAMP 0
    "0A000002 00000001",  # BORNHOST 10.0.0.2 : 1
    "0000000000000000",  # STORETIMESTAMP 0
    "00000000000000000000000000000001 00002A9F",  # STOREHOSTADDRESS ::1 : 10911 (20 bytes)
    "00000000",  # RECONSUMETIMES 0
    "0000000000000063",  # PREPARED_TX_OFFSET 99
    "00000002",  # BODYLEN 2
    "7636",  # BODY "v6"
    "02",  # TOPICLEN 2
    "5436",  # TOPIC "T6"
    "000B",  # PROPERTIESLEN 11
    "4B455953 01 6B3120 6B32 02",  # PROPERTIES "KEYS" \x01 "k1 k2" \x02
)

# --- v2 record: a 130-byte topic needs the 2-byte topic length and magic 0xDAA320AB ------
# (names.py caps topic names at 127 characters, but the codec must read and write v2.)
# 91 + 1 (2-byte topic length) + 1 (body) + 130 (topic) + 0 = 223 bytes
LONG_TOPIC = "t" * 130
V2_RECORD = r.Record(
    topic=LONG_TOPIC,
    queue_id=0,
    body=b"a",
    born_host="127.0.0.1:0",
    store_host="127.0.0.1:0",
)
V2_BYTES = hexbytes(
    "000000DF",  # TOTALSIZE 223
    "DAA320AB",  # MAGICCODE v2
    "68B7BE43",  # BODYCRC crc32(b"a") = 0xE8B7BE43, & 0x7FFFFFFF
    "00000000",  # QUEUEID 0
    "00000000",  # FLAG 0
    "0000000000000000",  # QUEUEOFFSET 0
    "0000000000000000",  # PHYSICALOFFSET 0
    "00000000",  # SYSFLAG 0
    "0000000000000000",  # BORNTIMESTAMP 0
    "7F000001 00000000",  # BORNHOST 127.0.0.1 : 0
    "0000000000000000",  # STORETIMESTAMP 0
    "7F000001 00000000",  # STOREHOSTADDRESS 127.0.0.1 : 0
    "00000000",  # RECONSUMETIMES 0
    "0000000000000000",  # PREPARED_TX_OFFSET 0
    "00000001",  # BODYLEN 1
    "61",  # BODY "a"
    "0082",  # TOPICLEN 130 (2 bytes in v2)
    "74" * 130,  # TOPIC "ttt...t"
    "0000",  # PROPERTIESLEN 0
)

LITERALS = [
    pytest.param(V4_RECORD, V4_BYTES, id="v1-ipv4"),
    pytest.param(V6_BORN_RECORD, V6_BORN_BYTES, id="ipv6-born-host"),
    pytest.param(V6_STORE_RECORD, V6_STORE_BYTES, id="ipv6-store-host"),
    pytest.param(V2_RECORD, V2_BYTES, id="v2-long-topic"),
]


def corrupt(data: bytes, at: int, fmt: str, value: int) -> bytes:
    """A copy of ``data`` with the big-endian field at ``at`` overwritten."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


# ---------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(("record", "expected"), LITERALS)
def test_encode_matches_the_hand_built_record(record: r.Record, expected: bytes) -> None:
    assert r.encode_record(record).hex().upper() == expected.hex().upper()


@pytest.mark.parametrize(("record", "expected"), LITERALS)
def test_record_size_property_matches_the_literal_length(record: r.Record, expected: bytes) -> None:
    assert record.size == len(expected)


def test_literal_lengths_follow_the_documented_size_formula() -> None:
    # 91 + body + topic + properties for v1 with IPv4 hosts
    assert len(V4_BYTES) == 91 + 5 + 9 + 10 == 115
    # each IPv6 host adds 12 bytes (20 instead of 8)
    assert len(V6_BORN_BYTES) == 91 + 12 + 2 + 2 + 0
    assert len(V6_STORE_BYTES) == 91 + 12 + 2 + 2 + 11
    # v2 adds one byte for the 2-byte topic length
    assert len(V2_BYTES) == 91 + 1 + 1 + 130 + 0


@pytest.mark.parametrize(
    ("body", "topic", "props", "sysflag", "expected"),
    [
        (0, 0, 0, 0, 91),
        (5, 9, 10, 0, 115),
        (1024, 127, 300, 0, 91 + 1024 + 127 + 300),  # the longest v1 topic
        (1024, 128, 300, 0, 92 + 1024 + 128 + 300),  # the shortest v2 topic
        (0, 0, 0, 0x10, 103),
        (0, 0, 0, 0x20, 103),
        (0, 0, 0, 0x30, 115),
        (7, 200, 3, 0x30, 91 + 24 + 1 + 7 + 200 + 3),
    ],
)
def test_record_size_formula(body: int, topic: int, props: int, sysflag: int, expected: int):
    assert r.record_size(body, topic, props, sysflag) == expected


def test_topic_of_127_bytes_stays_v1_with_a_one_byte_length() -> None:
    data = r.encode_record(r.Record(topic="x" * 127, queue_id=0, body=b""))
    assert data[4:8] == bytes.fromhex("DAA320A7")
    # body is empty, so TOPICLEN sits right after BODYLEN at 88
    assert data[88] == 127
    assert data[89 : 89 + 127] == b"x" * 127
    assert len(data) == 91 + 127


def test_topic_length_is_counted_in_utf8_bytes_not_characters() -> None:
    topic = "日" * 43  # 43 characters, 129 UTF-8 bytes: needs v2
    data = r.encode_record(r.Record(topic=topic, queue_id=0, body=b""))
    assert data[4:8] == bytes.fromhex("DAA320AB")
    assert data[88:90] == bytes.fromhex("0081")
    assert r.decode_record(data).topic == topic


def test_body_crc_masks_the_top_bit_of_zlib_crc32() -> None:
    assert zlib.crc32(b"a") == 0xE8B7BE43  # the top bit is set ...
    assert r.crc32_body(b"a") == 0x68B7BE43  # ... and RocketMQ stores it cleared
    assert r.crc32_body(b"hello") == zlib.crc32(b"hello") == 0x3610A686
    stored = struct.unpack(">I", r.encode_record(V2_RECORD)[8:12])[0]
    assert stored == zlib.crc32(b"a") & 0x7FFFFFFF


def test_encoder_sets_host_bits_from_the_addresses_not_from_the_given_sysflag() -> None:
    claims_v6 = r.Record(topic="T", queue_id=0, body=b"", sysflag=0x30 | 0x1)
    data = r.encode_record(claims_v6)  # both hosts are 127.0.0.1:0
    assert struct.unpack(">i", data[36:40])[0] == 0x1
    assert len(data) == 92


def test_properties_over_32767_bytes_are_rejected_with_the_size() -> None:
    rec = r.Record(topic="T", queue_id=0, body=b"", properties=b"x" * 32768)
    with pytest.raises(InvalidArgumentError, match="32768"):
        r.encode_record(rec)


def test_topic_over_65535_bytes_is_rejected_with_the_size() -> None:
    with pytest.raises(InvalidArgumentError, match="65536"):
        r.encode_record(r.Record(topic="t" * 65536, queue_id=0, body=b""))


# ---------------------------------------------------------------------------- decoding


@pytest.mark.parametrize(("record", "literal"), LITERALS)
def test_decode_of_the_literal_gives_every_field(record: r.Record, literal: bytes) -> None:
    decoded = r.decode_record(literal)
    assert decoded == record
    assert decoded.body_crc == zlib.crc32(record.body) & 0x7FFFFFFF


def test_decode_v1_ipv4_literal_field_by_field() -> None:
    d = r.decode_record(V4_BYTES)
    assert d.topic == "TopicTest"
    assert d.queue_id == 1
    assert d.body == b"hello"
    assert d.properties == b"TAGS\x01TagA\x02"
    assert (d.queue_offset, d.physical_offset) == (7, 1234)
    assert (d.born_timestamp, d.store_timestamp) == (1_700_000_000_000, 1_700_000_000_123)
    assert (d.born_host, d.store_host) == ("192.168.1.10:54321", "10.0.0.1:10911")
    assert d.size == 115


def test_decode_ipv6_hosts_are_bracketed_and_flagged() -> None:
    born = r.decode_record(V6_BORN_BYTES)
    assert born.born_host == "[2001:db8::1]:8080"
    assert born.store_host == "127.0.0.1:10911"
    assert born.sysflag == 0x10
    assert (born.flag, born.reconsume_times) == (42, 2)
    store = r.decode_record(V6_STORE_BYTES)
    assert store.store_host == "[::1]:10911"
    assert store.sysflag == 0x28
    assert store.prepared_tx_offset == 99
    assert store.queue_offset == 1 << 40


def test_decode_v2_literal_reads_the_two_byte_topic_length() -> None:
    d = r.decode_record(V2_BYTES)
    assert d.topic == LONG_TOPIC
    assert d.body == b"a"
    assert d.size == 223


def test_decode_at_a_position_and_iterate_concatenated_literals() -> None:
    buf = V4_BYTES + V6_BORN_BYTES + V6_STORE_BYTES + V2_BYTES
    assert r.decode_record(buf, len(V4_BYTES)) == V6_BORN_RECORD
    assert r.decode_record(memoryview(buf), len(V4_BYTES) + len(V6_BORN_BYTES)) == (V6_STORE_RECORD)
    assert list(r.iter_records(buf)) == [V4_RECORD, V6_BORN_RECORD, V6_STORE_RECORD, V2_RECORD]


def test_iter_records_of_an_empty_buffer_yields_nothing() -> None:
    assert list(r.iter_records(b"")) == []


# ------------------------------------------------------------------------- decode errors

# Every bad record sits after a good one, so the error must name position 115.
AT = len(V4_BYTES)


def test_truncated_record_is_corrupt_and_names_its_position() -> None:
    buf = V4_BYTES + V6_BORN_BYTES[:-1]
    with pytest.raises(CorruptDataError, match=r"record at 115: size 107 does not fit in 106"):
        r.decode_record(buf, AT)
    with pytest.raises(CorruptDataError, match="record at 115"):
        list(r.iter_records(buf))


def test_record_shorter_than_its_header_is_corrupt() -> None:
    buf = V4_BYTES + V6_BORN_BYTES[:20]
    with pytest.raises(CorruptDataError, match="record at 115: only 20 bytes left"):
        r.decode_record(buf, AT)


def test_bad_magic_code_is_corrupt_and_named() -> None:
    buf = V4_BYTES + corrupt(V6_BORN_BYTES, 4, ">I", 0xDEADBEEF)
    with pytest.raises(CorruptDataError, match="record at 115: bad magic code 0xDEADBEEF"):
        r.decode_record(buf, AT)


def test_blank_end_marker_is_not_a_record() -> None:
    marker = struct.pack(">iI", 4096, r.BLANK_MAGIC)
    with pytest.raises(CorruptDataError, match="bad magic code 0xCBD43194"):
        r.decode_record(marker + bytes(100))


def test_totalsize_larger_than_the_fields_is_corrupt() -> None:
    grown = corrupt(V6_BORN_BYTES, 0, ">i", 108) + b"\x00"
    with pytest.raises(
        CorruptDataError, match="record at 115: fields take 107 bytes, TOTALSIZE 108"
    ):
        r.decode_record(V4_BYTES + grown, AT)


def test_totalsize_smaller_than_the_fields_is_corrupt() -> None:
    shrunk = corrupt(V6_STORE_BYTES, 0, ">i", 117)
    # another record follows, so reading past TOTALSIZE stays inside the buffer
    buf = V4_BYTES + shrunk + V2_BYTES
    with pytest.raises(
        CorruptDataError, match="record at 115: fields take 118 bytes, TOTALSIZE 117"
    ):
        r.decode_record(buf, AT)


def test_totalsize_below_the_minimum_record_is_corrupt() -> None:
    buf = V4_BYTES + corrupt(V6_BORN_BYTES, 0, ">i", 50)
    with pytest.raises(CorruptDataError, match="record at 115: size 50"):
        r.decode_record(buf, AT)


def test_body_length_overrunning_the_record_is_corrupt() -> None:
    # BODYLEN of the IPv4 literal sits at 84
    buf = corrupt(V4_BYTES, 84, ">i", 1000)
    with pytest.raises(CorruptDataError, match="record at 0: body length 1000"):
        r.decode_record(buf)
    negative = corrupt(V4_BYTES, 84, ">i", -1)
    with pytest.raises(CorruptDataError, match="body length -1"):
        r.decode_record(negative)


def test_body_crc_mismatch_is_corrupt_unless_crc_checking_is_off() -> None:
    flipped = bytearray(V4_BYTES)
    flipped[88] ^= 0x20  # "hello" -> "Hello"
    buf = V4_BYTES + bytes(flipped)
    with pytest.raises(CorruptDataError, match="record at 115: body CRC mismatch"):
        r.decode_record(buf, AT)
    loose = r.decode_record(buf, AT, check_crc=False)
    assert loose.body == b"Hello"
    assert loose.body_crc == 0x3610A686


def test_totalsize_too_small_at_the_end_of_the_buffer_is_corrupt() -> None:
    shrunk = corrupt(V6_BORN_BYTES, 0, ">i", 106)[:-1]
    with pytest.raises(CorruptDataError, match="record at 115"):
        r.decode_record(V4_BYTES + shrunk, AT)


def test_sysflag_claiming_ipv6_hosts_on_an_ipv4_record_is_corrupt() -> None:
    bad = corrupt(V2_BYTES, 36, ">i", 0x30)[:0x5C]
    bad = corrupt(bad, 0, ">i", 0x5C)
    with pytest.raises(CorruptDataError, match="record at 0"):
        r.decode_record(bad)


# ------------------------------------------------------------------- offset message ids


def test_offset_msg_id_ipv4_is_32_upper_case_hex_chars() -> None:
    msg_id = r.offset_msg_id("10.0.0.1:10911", 1234)
    assert msg_id == (
        "0A000001"  # store IP 10.0.0.1
        "00002A9F"  # store port 10911
        "00000000000004D2"  # physical offset 1234
    )
    assert len(msg_id) == 32


def test_offset_msg_id_ipv6_is_56_hex_chars() -> None:
    msg_id = r.offset_msg_id("[2001:db8::1]:8080", 1 << 33)
    assert msg_id == (
        "20010DB8000000000000000000000001"  # store IP 2001:db8::1
        "00001F90"  # store port 8080
        "0000000200000000"  # physical offset 2**33
    )
    assert len(msg_id) == 56


@pytest.mark.parametrize(
    ("host", "offset"),
    [
        ("10.0.0.1:10911", 1234),
        ("192.168.1.10:0", 0),
        ("255.255.255.255:65535", (1 << 63) - 1),
        ("[2001:db8::1]:8080", 1 << 33),
        ("[::1]:10911", 7),
    ],
)
def test_offset_msg_id_parses_back(host: str, offset: int) -> None:
    assert r.parse_offset_msg_id(r.offset_msg_id(host, offset)) == (host, offset)


@pytest.mark.parametrize(
    ("host", "prefix"),
    [("10.0.0.1:10911", "0A00000100002A9F"), ("[::1]:8080", "0" * 31 + "100001F90")],
)
def test_many_offset_msg_ids_are_the_prefix_and_each_offset(host: str, prefix: str) -> None:
    assert r.offset_msg_id_prefix(host) == prefix
    offsets = [0, 1, 255, 1234, 1 << 33, (1 << 63) - 1, -1, *range(10_000, 10_040)]
    one_by_one = [r.offset_msg_id(host, offset) for offset in offsets]
    assert r.offset_msg_ids(prefix, offsets) == one_by_one  # 47: laid out with numpy
    assert r.offset_msg_ids(prefix, offsets[:3]) == one_by_one[:3]  # 3: one f-string each
    assert r.offset_msg_ids(prefix, np.array(offsets, dtype=np.int64)) == one_by_one
    assert r.offset_msg_ids(prefix, np.array(offsets[:3], dtype=np.int64)) == one_by_one[:3]
    assert r.offset_msg_ids(prefix, []) == []
    assert one_by_one[6].endswith("FFFFFFFFFFFFFFFF")  # -1 as a Java long's 64 bits


def test_parse_offset_msg_id_of_the_ipv4_literal() -> None:
    assert r.parse_offset_msg_id("0A00000100002A9F00000000000004D2") == ("10.0.0.1:10911", 1234)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "hello",
        "0A00000100002A9F00000000000004D",  # 31 characters
        "0A00000100002A9F00000000000004D2FF",  # 34 characters
        "0A00000100002A9F00000000000004DZ",  # not hex
        "0A00000100002A9F00000000000004D20A000001",  # 40 characters
        "7F00000000002A9F" * 4,  # 64 characters
    ],
)
def test_bad_offset_msg_ids_are_rejected_naming_the_id(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not an offset message id") as info:
        r.parse_offset_msg_id(bad)
    assert repr(bad) in str(info.value)


# ------------------------------------------------------------------------------ hosts


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("10.0.0.1:10911", ("10.0.0.1", 10911)),
        ("[::1]:80", ("::1", 80)),
        ("[2001:db8::1]:0", ("2001:db8::1", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_parse_host(host: str, expected: tuple[str, int]) -> None:
    assert r.parse_host(host) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "localhost:80",
        "10.0.0.1",
        "10.0.0.1:",
        "10.0.0.1:http",
        "10.0.0.1:65536",
        "10.0.0.1:-1",
        "300.1.1.1:80",
        "[::1]",
        "[::g]:80",
        "",
    ],
)
def test_bad_hosts_are_rejected_naming_the_value(bad: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        r.parse_host(bad)
    assert repr(bad) in str(info.value)


def test_encoding_a_record_with_a_bad_host_names_the_host() -> None:
    with pytest.raises(InvalidArgumentError, match="'broker-a:10911'"):
        r.encode_record(r.Record(topic="T", queue_id=0, body=b"", store_host="broker-a:10911"))
    with pytest.raises(InvalidArgumentError, match=re.escape("'1.2.3.4:99999'")):
        r.offset_msg_id("1.2.3.4:99999", 0)


def test_encode_host_bytes() -> None:
    assert r.encode_host("10.0.0.1:10911") == (bytes.fromhex("0A000001 00002A9F"), False)
    assert r.encode_host("[::1]:1") == (bytes.fromhex("00" * 15 + "01" + "00000001"), True)


def test_ipv6_hosts_need_brackets_so_size_and_encoding_agree() -> None:
    rec = r.Record(topic="T", queue_id=0, body=b"", born_host="[::1]:80")
    assert rec.size == len(r.encode_record(rec)) == 91 + 1 + 12
    with pytest.raises(InvalidArgumentError, match=r"'::1:80'.*\[addr\]:port"):
        _ = r.Record(topic="T", queue_id=0, body=b"", born_host="::1:80").size


def test_iter_records_steps_by_totalsize() -> None:
    one = bytearray(r.encode_record(r.Record(topic="Tx", queue_id=0, body=b"")))
    one[90] = 0xFF  # the topic's second byte: "T\xff" is not UTF-8
    assert len(list(r.iter_records(bytes(one) * 2))) == 2
