"""Decoding some columns only (``decode_records(..., columns=...)``): each projection must
hold exactly the full decode's columns, and the records must be checked all the same."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_spark.codec.arrow_decode import (
    RECORD_SCHEMA,
    decode_records,
    index_records,
    property_map,
)
from rmq_spark.codec.compression import inflate_bodies
from rmq_spark.codec.properties import KEYS, TAGS, encode_properties
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import CorruptDataError, InvalidArgumentError
from tests.support.arrow_records import (  # the reference tests' records and corruptions
    BASE,
    CASES,
    corrupt_second_record,
    flip_body_byte,
    rec,
    records,
    records_buffer,
    set_magic,
)

TEXT = b"a body the producer compressed, " * 40


def compressed(**changes) -> Record:
    """A record as RocketMQ's Java producer writes a large body: zlib, SYSFLAG 0x301."""
    return rec(body=zlib.compress(TEXT), sysflag=0x301, **changes)


def every_kind() -> bytes:
    """Every variant of the reference tests (v1 and v2 magic, IPv6 hosts, odd properties,
    short and long bodies) plus compressed bodies, in one buffer, offsets in order."""
    kinds = [*CASES.values(), compressed(), compressed(born_host="[::1]:7")]
    return records_buffer(
        *(
            dataclasses.replace(r, queue_offset=i, physical_offset=100 + i)
            for i, r in enumerate(kinds * 2)
        )
    )


def regular() -> bytes:
    """A batch the fast paths take: one topic, one store host, the same property names."""
    return records_buffer(
        *(
            rec(
                queue_offset=i,
                born_host=f"10.1.0.{i % 3}:4000",
                properties=encode_properties({TAGS: f"t{i % 2}", KEYS: f"k{i}", "UNIQ_KEY": "U"}),
            )
            for i in range(40)
        )
    )


BUFFERS = {"every kind of record": every_kind, "regular batch": regular}
ALL = RECORD_SCHEMA.names
PROJECTIONS = {
    **{name: [name] for name in ALL},
    "what a 3-column read decodes": ["topic", "queueOffset", "body", "sysFlag"],
    "hosts": ["bornHost", "storeHost", "msgId"],
    "msgId alone of the hosts": ["queueOffset", "msgId"],
    "storeHost without msgId": ["storeHost", "queueId"],
    "tags and keys without the map": ["keys", "tags"],
    "the map without tags": ["properties", "queueOffset"],
    "every column, reversed": ALL[::-1],
}


@pytest.mark.parametrize("make", BUFFERS.values(), ids=BUFFERS.keys())
@pytest.mark.parametrize("columns", PROJECTIONS.values(), ids=PROJECTIONS.keys())
def test_a_projection_is_the_full_decodes_columns(make, columns) -> None:
    buf = make()
    full = decode_records(buf)
    projected = decode_records(buf, columns=columns)
    assert projected.schema.names == columns
    assert projected.equals(full.select(columns))
    index = index_records(buf)  # known positions take the same path
    assert decode_records(buf, index.starts, index.sizes, columns=columns).equals(projected)


def test_all_columns_by_name_are_the_full_decode() -> None:
    buf = every_kind()
    assert decode_records(buf, columns=ALL).equals(decode_records(buf))
    assert decode_records(buf, columns=ALL).schema == RECORD_SCHEMA


def test_compressed_bodies_inflate_the_same_from_a_projection() -> None:
    buf = every_kind()
    inflated = inflate_bodies(decode_records(buf, columns=["body", "sysFlag"]))
    assert inflated.column("body").equals(inflate_bodies(decode_records(buf)).column("body"))
    assert inflated.column("body").to_pylist().count(TEXT) == 4


def test_nothing_decodes_to_an_empty_batch_of_the_columns() -> None:
    empty = decode_records(b"", columns=["body", "queueOffset"])
    assert empty.num_rows == 0
    assert empty.schema.names == ["body", "queueOffset"]
    assert empty.schema.field("body").type == RECORD_SCHEMA.field("body").type


def test_an_unknown_column_is_refused_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"no record column 'brokerName'.*queueOffset"):
        decode_records(every_kind(), columns=["queueOffset", "brokerName"])


def lie_about_body(buf: bytearray, at: int) -> None:
    struct.pack_into(">i", buf, at + 84, 10_000)


def lie_about_topic(buf: bytearray, at: int) -> None:
    buf[at + 88 + len(BASE.body)] = 250  # the second record's v1 topic length field


def lie_about_properties(buf: bytearray, at: int) -> None:
    size = len(encode_record(rec(topic="Second")))
    struct.pack_into(">H", buf, at + size - len(BASE.properties) - 2, len(BASE.properties) + 1)


CORRUPTIONS = {
    "bad magic": (set_magic, "bad magic code 0xCAFEBABE"),
    "body length": (lie_about_body, "body length 10000 overruns"),
    "topic length": (lie_about_topic, "topic length 250 overruns"),
    "properties length": (lie_about_properties, "properties length field says"),
}


@pytest.mark.parametrize(("corrupt", "says"), CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
@pytest.mark.parametrize("columns", [["queueOffset"], ["body"], ["topic", "msgId"]])
def test_corrupt_records_are_refused_whatever_the_columns(corrupt, says, columns) -> None:
    buf, second = corrupt_second_record(corrupt)
    with pytest.raises(CorruptDataError, match=f"record 1 at byte {second}: {says}"):
        decode_records(buf, columns=columns)


@pytest.mark.parametrize("columns", [["queueOffset"], ["tags"]])
def test_a_torn_record_is_refused_whatever_the_columns(columns) -> None:
    buf = records_buffer(rec(), rec(), rec())
    last = index_records(buf).starts[-1]
    with pytest.raises(CorruptDataError, match=f"record 2 at byte {last}"):
        decode_records(buf[:-50], columns=columns)


def test_body_crc_is_checked_without_the_body_column() -> None:
    buf, second = corrupt_second_record(flip_body_byte)
    with pytest.raises(CorruptDataError, match=f"record 1 at byte {second}: body CRC"):
        decode_records(buf, check_crc=True, columns=["queueOffset"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(records, max_size=8),
    st.lists(st.sampled_from(ALL), min_size=1, max_size=6, unique=True),
)
def test_random_records_and_projections(batch_records: list[Record], columns) -> None:
    buf = records_buffer(*batch_records)
    projected = decode_records(buf, columns=columns)
    assert projected.equals(decode_records(buf).select(columns))


def test_the_regular_batch_takes_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    # Guards the projections above against a batch the slow paths would take anyway.
    def slow(props):
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(property_map, "_columns_slow", slow)
    for columns in (["tags"], ["properties"]):
        decode_records(regular(), columns=columns)
