"""The vectorised batch encoder must lay out exactly what the reference record codec does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_spark.codec import record as r
from rmq_spark.codec.batch_encode import SMALL_BATCH, finish_batch, prepare_batch
from rmq_spark.codec.properties import encode_properties
from rmq_spark.errors import InvalidArgumentError

V4_BORN = "192.168.1.10:54321"
V4_STORE = "10.0.0.1:10911"
V6_BORN = "[2001:db8::1]:8080"
V6_STORE = "[::1]:10911"
LONG_TOPIC = "L" * 130  # needs v2 (2-byte topic length)

STORE_TS = 1_700_000_000_123
FIRST_PHYS = 3 * 1024 * 1024 * 1024 + 17


def make_messages(n: int, seed: int):
    rng = np.random.default_rng(seed)
    bodies = [rng.bytes(int(k)) for k in rng.integers(0, 200, n)]
    props = [
        encode_properties({"TAGS": f"Tag{i % 3}", "KEYS": f"k{i}"} if i % 4 else {})
        for i in range(n)
    ]
    flags = rng.integers(-(2**31), 2**31, n).tolist()
    born_ts = rng.integers(0, 2**41, n).tolist()
    reconsume = rng.integers(0, 17, n).tolist()
    return bodies, props, flags, born_ts, reconsume


def reference(
    topic,
    queue_id,
    bodies,
    props,
    flags,
    born_ts,
    reconsume,
    *,
    born,
    store,
    sysflag,
    first_qoff,
    phys,
):
    v6 = (r.SYSFLAG_BORNHOST_V6 if born.startswith("[") else 0) | (
        r.SYSFLAG_STOREHOST_V6 if store.startswith("[") else 0
    )
    return [
        r.encode_record(
            r.Record(
                topic=topic,
                queue_id=queue_id,
                body=bodies[i],
                properties=props[i],
                flag=flags[i],
                queue_offset=first_qoff + i,
                physical_offset=int(phys[i]),
                sysflag=sysflag | v6,
                born_timestamp=born_ts[i],
                born_host=born,
                store_timestamp=STORE_TS,
                store_host=store,
                reconsume_times=reconsume[i],
            )
        )
        for i in range(len(bodies))
    ]


@pytest.mark.parametrize("n", [1, 5, SMALL_BATCH - 1, SMALL_BATCH, 300])
@pytest.mark.parametrize(
    ("born", "store"),
    [(V4_BORN, V4_STORE), (V6_BORN, V4_STORE), (V4_BORN, V6_STORE), (V6_BORN, V6_STORE)],
    ids=["v4-v4", "v6born", "v6store", "v6-v6"],
)
@pytest.mark.parametrize("topic", ["TopicTest", LONG_TOPIC], ids=["v1", "v2"])
def test_batch_equals_concatenated_reference_records(n, born, store, topic) -> None:
    bodies, props, flags, born_ts, reconsume = make_messages(n, seed=n)
    batch = prepare_batch(
        topic,
        5,
        bodies,
        props,
        born_host=born,
        store_host=store,
        born_timestamps=born_ts,
        flags=flags,
        reconsume_times=reconsume,
        sysflag=r.SYSFLAG_MULTI_TAGS,
    )
    phys = FIRST_PHYS + np.concatenate([[0], np.cumsum(batch.sizes)[:-1]])
    data = finish_batch(batch, 1000, phys, STORE_TS)
    expected = reference(
        topic,
        5,
        bodies,
        props,
        flags,
        born_ts,
        reconsume,
        born=born,
        store=store,
        sysflag=r.SYSFLAG_MULTI_TAGS,
        first_qoff=1000,
        phys=phys,
    )
    assert isinstance(data, memoryview)
    assert bytes(data) == b"".join(expected)
    assert batch.sizes.tolist() == [len(x) for x in expected]
    assert batch.count == n
    assert batch.total_bytes == len(data)


@pytest.mark.parametrize("n", [3, SMALL_BATCH + 2])
def test_physical_offsets_are_copied_as_given(n: int) -> None:
    batch = prepare_batch("T", 0, [b"x"] * n)
    phys = np.arange(n, dtype=np.int64) * 1_000_003 + 7  # not contiguous on purpose
    decoded = list(r.iter_records(finish_batch(batch, 0, phys, 0)))
    assert [d.physical_offset for d in decoded] == phys.tolist()


@pytest.mark.parametrize("n", [4, SMALL_BATCH + 4])
def test_queue_offsets_are_consecutive_from_the_first(n: int) -> None:
    batch = prepare_batch("T", 2, [b"m%d" % i for i in range(n)])
    data = finish_batch(batch, 88526, np.zeros(n, dtype=np.int64), STORE_TS)
    decoded = list(r.iter_records(data))
    assert [d.queue_offset for d in decoded] == list(range(88526, 88526 + n))
    assert {d.queue_id for d in decoded} == {2}
    assert {d.store_timestamp for d in decoded} == {STORE_TS}


@pytest.mark.parametrize("n", [2, SMALL_BATCH + 1])
def test_scalar_and_default_per_message_fields(n: int) -> None:
    batch = prepare_batch("T", 0, [b"b"] * n, born_timestamps=123, flags=7)
    decoded = list(r.iter_records(finish_batch(batch, 0, np.zeros(n, dtype=np.int64), 9)))
    assert {(d.born_timestamp, d.flag, d.reconsume_times) for d in decoded} == {(123, 7, 0)}
    assert {(d.born_host, d.store_host, d.properties) for d in decoded} == {
        ("127.0.0.1:0", "127.0.0.1:0", b"")
    }


def test_sizes_follow_the_record_size_formula() -> None:
    bodies = [b"", b"hello", b"x" * 300]
    props = [b"", b"TAGS\x01TagA\x02", b""]
    batch = prepare_batch("TopicTest", 0, bodies, props)
    assert batch.sizes.tolist() == [91 + 9, 91 + 5 + 9 + 10, 91 + 300 + 9]
    v2 = prepare_batch(LONG_TOPIC, 0, bodies, props, born_host=V6_BORN)
    assert v2.sizes.tolist() == [x + 1 + 121 + 12 for x in batch.sizes.tolist()]


def test_host_bits_come_from_the_addresses() -> None:
    batch = prepare_batch("T", 0, [b"a"], sysflag=0x30 | 0x1)  # both hosts default IPv4
    assert r.decode_record(finish_batch(batch, 0, np.zeros(1, dtype=np.int64), 0)).sysflag == 1


def test_finishing_twice_restamps_the_offsets() -> None:
    batch = prepare_batch("T", 0, [b"a", b"b"])
    finish_batch(batch, 0, np.array([0, 92]), 1)
    again = bytes(finish_batch(batch, 10, np.array([500, 592]), 2))
    decoded = list(r.iter_records(again))
    assert [(d.queue_offset, d.physical_offset, d.store_timestamp) for d in decoded] == [
        (10, 500, 2),
        (11, 592, 2),
    ]


# ------------------------------------------------------------------------------ errors


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one message"):
        prepare_batch("T", 0, [])


def test_properties_count_must_match_bodies() -> None:
    with pytest.raises(InvalidArgumentError, match="2 property blobs for 3 message bodies"):
        prepare_batch("T", 0, [b"a", b"b", b"c"], [b"", b""])


@pytest.mark.parametrize("name", ["flags", "born_timestamps", "reconsume_times"])
def test_per_message_field_count_must_match(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{name} has 2 values for 3 messages"):
        prepare_batch("T", 0, [b"a", b"b", b"c"], **{name: [1, 2]})


def test_properties_too_large_are_rejected_naming_the_message_and_size() -> None:
    props = [b"", b"TAGS\x01" + b"v" * 32762 + b"\x02", b""]  # 32768 bytes
    with pytest.raises(InvalidArgumentError, match="message 1: properties take 32768 bytes"):
        prepare_batch("T", 0, [b"a", b"b", b"c"], props)
    props[1] = props[1][1:]  # 32767 bytes is fine
    assert prepare_batch("T", 0, [b"a", b"b", b"c"], props).sizes[1] == 91 + 1 + 1 + 32767


def test_bad_host_is_rejected_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match="'broker-a:10911'"):
        prepare_batch("T", 0, [b"a"], store_host="broker-a:10911")


def test_topic_too_long_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError):
        prepare_batch("t" * 65536, 0, [b"a"])


# --------------------------------------------------------------------------- property

PROP_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
MESSAGE = st.tuples(
    st.binary(max_size=300),
    st.dictionaries(
        st.text(PROP_CHARS, min_size=1, max_size=8),
        st.text(PROP_CHARS, max_size=20),
        max_size=4,
    ),
    st.integers(-(2**31), 2**31 - 1),  # flag
    st.integers(0, 2**62),  # born timestamp
    st.integers(0, 16),  # reconsume times
)
# Both encoder paths: the struct path below SMALL_BATCH and the Arrow path from it on.
MESSAGES = st.one_of(
    st.lists(MESSAGE, min_size=1, max_size=SMALL_BATCH - 1),
    st.lists(MESSAGE, min_size=SMALL_BATCH, max_size=SMALL_BATCH + 40),
)


@settings(max_examples=60, deadline=None)
@given(
    messages=MESSAGES,
    topic=st.sampled_from(["T", "TopicTest", "%RETRY%group_a", LONG_TOPIC, "é" * 70]),
    hosts=st.sampled_from([(V4_BORN, V4_STORE), (V6_BORN, V4_STORE), (V4_BORN, V6_STORE)]),
    first_qoff=st.integers(0, 2**40),
    queue_id=st.integers(0, 255),
)
def test_random_batches_round_trip_through_iter_records(
    messages, topic, hosts, first_qoff, queue_id
) -> None:
    bodies = [m[0] for m in messages]
    props = [encode_properties(m[1]) for m in messages]
    batch = prepare_batch(
        topic,
        queue_id,
        bodies,
        props,
        born_host=hosts[0],
        store_host=hosts[1],
        flags=[m[2] for m in messages],
        born_timestamps=[m[3] for m in messages],
        reconsume_times=[m[4] for m in messages],
    )
    phys = 1_000 + np.concatenate([[0], np.cumsum(batch.sizes)[:-1]])
    data = finish_batch(batch, first_qoff, phys, STORE_TS)
    decoded = list(r.iter_records(data))
    assert len(decoded) == len(messages)
    for i, (d, m) in enumerate(zip(decoded, messages, strict=True)):
        assert d.topic == topic
        assert d.queue_id == queue_id
        assert d.body == m[0]
        assert d.properties == props[i]
        assert (d.flag, d.born_timestamp, d.reconsume_times) == m[2:]
        assert d.queue_offset == first_qoff + i
        assert d.physical_offset == phys[i]
        assert (d.born_host, d.store_host, d.store_timestamp) == (*hosts, STORE_TS)
        assert d.size == batch.sizes[i]
