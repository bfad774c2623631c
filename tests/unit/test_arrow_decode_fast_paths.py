"""The decoder's shortcuts for regular batches (every record with the same property names, a few
producer hosts remembered across calls) must give what the reference codec gives, and must not
be taken when a batch only looks regular."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_spark.codec.arrow_decode import RECORD_SCHEMA, decode_records, hosts, index_records
from rmq_spark.codec.properties import KEYS, TAGS, encode_properties
from rmq_spark.codec.record import Record, encode_record
from tests.support.arrow_records import oracle_rows  # the reference decoder's rows

BASE = Record(
    topic="TopicTest",
    queue_id=3,
    body=b"a body longer than twelve bytes",
    properties=encode_properties({TAGS: "TagA", KEYS: "k1 k2", "UNIQ_KEY": "AC1F"}),
    queue_offset=41,
    physical_offset=123_456,
    born_host="192.168.1.20:53211",
    store_host="10.0.0.5:10911",
)


def decode_both_ways(records: list[Record]) -> list[dict]:
    """Decode walking TOTALSIZE and with known positions; both must agree."""
    buf = b"".join(encode_record(r) for r in records)
    walked = decode_records(buf)
    index = index_records(buf)
    assert decode_records(buf, index.starts, index.sizes).equals(walked)
    assert walked.schema == RECORD_SCHEMA
    return walked.to_pylist()


def assert_like_reference(records: list[Record]) -> None:
    buf = b"".join(encode_record(r) for r in records)
    assert decode_both_ways(records) == oracle_rows(buf)


def with_props(props: bytes, i: int = 0, **changes) -> Record:
    return dataclasses.replace(BASE, properties=props, queue_offset=i, **changes)


# --- every record holds the same property names ---------------------------------------------

SAME_NAMES = {
    "names in one order, values differ": [
        encode_properties({TAGS: f"t{i}", KEYS: "k" * i, "UNIQ_KEY": str(i)}) for i in range(6)
    ],
    "empty values": [encode_properties({TAGS: "", KEYS: ""})] * 3,
    "only empty names": [b"\x01v\x02", b"\x01w\x02"],
    "empty name among others": [b"A\x01x\x02\x01y\x02", b"A\x01z\x02\x01\x02"],
    "no TAGS or KEYS": [encode_properties({"X": str(i)}) for i in range(3)],
    "values longer than a view head": [encode_properties({KEYS: "v" * (20 + i)}) for i in range(3)],
    "non-ascii names and values": [
        encode_properties({"名": "值" * i, TAGS: "标签"}) for i in range(1, 4)
    ],
}


WITHOUT_LAST_SEPARATOR = {
    # Apache RocketMQ's broker appends CLUSTER without \x02 to each message of a batch
    "every record": [
        b"TAGS\x01a\x02KEYS\x01k%d\x02CLUSTER\x01DefaultCluster" % i for i in range(3)
    ],
    "some records": [b"TAGS\x01a\x02", b"TAGS\x01b", b"", b"KEYS\x01k\x02TAGS\x01c"],
    "a last item without its \\x01": [b"TAGS\x01a\x02X", b"TAGS\x01b\x02"],
    "a last value that is empty": [b"TAGS\x01", b"TAGS\x01b\x02"],
}


@pytest.mark.parametrize(
    "props", WITHOUT_LAST_SEPARATOR.values(), ids=WITHOUT_LAST_SEPARATOR.keys()
)
def test_a_missing_last_separator_decodes_like_reference(props: list[bytes]) -> None:
    assert_like_reference([with_props(p, i) for i, p in enumerate(props)])


@pytest.mark.parametrize("props", SAME_NAMES.values(), ids=SAME_NAMES.keys())
def test_same_names_in_every_record_decode_like_reference(props: list[bytes]) -> None:
    assert_like_reference([with_props(p, i) for i, p in enumerate(props)])


def test_a_name_twice_in_every_record() -> None:
    """Producers never repeat a name; if one does, ``tags`` takes the last value as the
    reference does, and the map keeps both items (documented)."""
    records = [with_props(b"TAGS\x01a\x02TAGS\x01b\x02", i) for i in range(2)]
    for row in decode_both_ways(records):
        assert row["tags"] == "b"
        assert row["properties"] == [(TAGS, "a"), (TAGS, "b")]


LOOKS_REGULAR = {
    "a middle name differs, same length": [
        encode_properties({TAGS: "a", "AAAA": "x", KEYS: "k"}),
        encode_properties({TAGS: "a", "BBBB": "x", KEYS: "k"}),
    ],
    "same names, different lengths split": [b"AB\x01C\x02", b"A\x01BC\x02"],
    "names swap places": [
        encode_properties({TAGS: "a", KEYS: "k"}),
        encode_properties({KEYS: "k", TAGS: "a"}),
    ],
    "one record with an extra name": [
        encode_properties({TAGS: "a"}),
        encode_properties({TAGS: "b", KEYS: "k"}),
        encode_properties({TAGS: "c"}),
    ],
    "a value holding \\x01 in every record": [b"TAGS\x01a\x01b\x02"] * 2,
    "an item shorter than the name, last": [b"LONGNAME\x01v\x02"] * 2 + [b"X\x02"],
    "an item shorter than the name, between": [
        b"LONGNAME\x01v\x02",
        b"X\x02",
        b"LONGNAME\x01w\x02",
    ],
    "the name without its \\x01": [b"TAGS\x01a\x02", b"TAGSa\x02"],
    "a NUL byte in a value": [b"TAGS\x01a\x00b\x02", b"TAGS\x01c\x02"],
    "invalid utf-8 in one record": [b"TAGS\x01\xff\x02", b"TAGS\x01ok\x02"],
}


@pytest.mark.parametrize("props", LOOKS_REGULAR.values(), ids=LOOKS_REGULAR.keys())
def test_batches_that_only_look_regular_decode_like_reference(props: list[bytes]) -> None:
    assert_like_reference([with_props(p, i) for i, p in enumerate(props)])


values = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=30,
)
names = st.lists(
    st.sampled_from([TAGS, KEYS, "UNIQ_KEY", "A", "名", "TAGSX"]),
    min_size=1,
    max_size=4,
    unique=True,
)
host_pool = st.lists(
    st.builds(
        lambda a, b, port: f"10.{a}.{b}.1:{port}",
        st.integers(0, 3),
        st.integers(0, 255),
        st.integers(0, 65535),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names,
    st.lists(st.lists(values, min_size=4, max_size=4), min_size=1, max_size=40),
    host_pool,
    st.data(),
)
def test_random_batches_sharing_names_decode_like_reference(
    batch_names: list[str], batch_values: list[list[str]], pool: list[str], data
) -> None:
    records = []
    for i, vals in enumerate(batch_values):
        raw = b"".join(
            f"{name}\x01{value}\x02".encode()
            for name, value in zip(batch_names, vals, strict=False)
        )
        born = data.draw(st.sampled_from(pool))
        records.append(with_props(raw, i, born_host=born, physical_offset=1000 + i))
    assert_like_reference(records)


# --- producer hosts -------------------------------------------------------------------------


def test_hosts_remembered_from_an_earlier_batch_stay_right() -> None:
    first = [with_props(BASE.properties, i, born_host=f"10.0.0.{i % 3}:{i}") for i in range(9)]
    second = [with_props(BASE.properties, i, born_host=f"10.0.0.{i % 5}:{i}") for i in range(9)]
    assert_like_reference(first)
    assert_like_reference(second)  # some hosts known, some new
    assert_like_reference(first)


def test_more_records_than_looked_up_one_by_one() -> None:
    count = hosts.FEW_RECORDS + 50
    records = [
        with_props(BASE.properties, i, born_host=f"172.16.{i % 7}.9:{40000 + i % 11}")
        for i in range(count)
    ]
    assert_like_reference(records)


def test_more_distinct_hosts_than_are_remembered() -> None:
    count = hosts.KNOWN_LIMIT + 10
    records = [
        with_props(b"", i, born_host=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:{i}")
        for i in range(count)
    ]
    assert_like_reference(records)
    # Hosts seen again after the memory started over are still formatted right.
    assert_like_reference(records[:5] + records[-5:])


def test_store_hosts_differ_between_records() -> None:
    records = [
        with_props(BASE.properties, i, store_host=f"10.0.0.{i % 2}:{10911 + i % 2}")
        for i in range(6)
    ]
    assert_like_reference(records)


def test_remembered_hosts_start_over_when_full() -> None:
    few = [with_props(b"", i, born_host=f"10.1.0.{i}:{i}") for i in range(100)]
    many = [
        with_props(b"", i, born_host=f"10.2.{i >> 8 & 255}.{i & 255}:{i}")
        for i in range(hosts.KNOWN_LIMIT - 50)
    ]
    assert_like_reference(few)
    # With the hosts of ``few`` too many to keep: start over, keeping those seen again.
    assert_like_reference(few[:3] + many + few[-3:])
    assert_like_reference(few)
