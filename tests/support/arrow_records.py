"""Commit-log records for the decoder tests (``tests/unit/test_arrow_decode*.py``): a record
whose every field differs from its default, the edge cases, the reference decoder's rows,
corruptions of a buffer's second record, and a hypothesis strategy of records."""

from __future__ import annotations

import dataclasses
import struct

from hypothesis import strategies as st

from rmq_spark.codec.properties import KEYS, TAGS, decode_properties, encode_properties
from rmq_spark.codec.record import (
    POS_MAGIC,
    Record,
    encode_record,
    iter_records,
    offset_msg_id,
)

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


def corrupt_second_record(transform) -> tuple[bytes, int]:
    first = encode_record(rec())
    buf = bytearray(first + encode_record(rec(topic="Second")) + encode_record(rec()))
    transform(buf, len(first))
    return bytes(buf), len(first)


def set_magic(buf: bytearray, at: int) -> None:
    struct.pack_into(">I", buf, at + POS_MAGIC, 0xCAFEBABE)


def flip_body_byte(buf: bytearray, at: int) -> None:
    buf[at + 88 + 5] ^= 0x01


# --- property-based: random records ----------------------------------------------------

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
