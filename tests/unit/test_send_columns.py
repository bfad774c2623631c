"""Columnar sends without a broker: the client's encoding and the broker's vectorised checks.

The broker checks property blobs in two ways: :func:`suspect_property_blobs` over the whole
column with numpy, and :func:`check_property_blob` per message (the reference). A randomised
test holds the fast one to the reference: every bad blob is a suspect, and the column is
refused exactly when some blob is bad, naming the first.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from rmq_spark.broker.v1.send_columns import (
    check_property_blob,
    check_property_columns,
    suspect_property_blobs,
    uniform_blobs_pass,
)
from rmq_spark.client.message import Message, encode_columns, new_unique_key
from rmq_spark.codec.properties import decode_properties
from rmq_spark.codec.record import offset_msg_ids
from rmq_spark.errors import InvalidArgumentError

NOW = 1_700_000_000_000


def blobs_of(columns) -> list[bytes]:
    data, out, at = columns.properties, [], 0
    for size in columns.properties_sizes:
        out.append(data[at : at + size])
        at += size
    return out


# -- client encoding ------------------------------------------------------------------------


def test_one_tag_needs_no_indexes_and_properties_are_in_record_order():
    messages = [Message(b"a", tags="T", keys="k1 k2"), Message(b"bc", tags="T")]
    (chunk,) = encode_columns(messages, NOW, 1 << 20)
    columns = chunk.columns
    assert list(columns.tags) == ["T"] and not columns.tag_indexes
    assert columns.bodies == b"abc" and list(columns.body_sizes) == [1, 2]
    assert blobs_of(columns) == [
        f"TAGS\x01T\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01{messages[0].unique_key}\x02".encode(),
        f"TAGS\x01T\x02UNIQ_KEY\x01{messages[1].unique_key}\x02".encode(),
    ]
    assert columns.born_timestamp_ms == NOW and not columns.born_timestamps_ms
    assert not columns.flags
    assert chunk.unique_keys == [m.unique_key for m in messages]


def test_several_tags_go_as_a_dictionary():
    messages = [Message(b"x", tags=t) for t in ("A", None, "B", "A", None)]
    (chunk,) = encode_columns(messages, NOW, 1 << 20)
    values = list(chunk.columns.tags)
    assert [values[i] for i in chunk.columns.tag_indexes] == ["A", "", "B", "A", ""]
    assert [decode_properties(b).get("TAGS") for b in blobs_of(chunk.columns)] == [
        "A",
        None,
        "B",
        "A",
        None,
    ]


def test_own_born_times_flags_and_non_ascii_sizes():
    messages = [
        Message("é", tags="ü", properties={"k": "välue"}, flag=3, born_timestamp_ms=5),
        Message(b"x"),
    ]
    (chunk,) = encode_columns(messages, NOW, 1 << 20)
    columns = chunk.columns
    assert list(columns.born_timestamps_ms) == [5, NOW]
    assert list(columns.flags) == [3, 0]
    assert list(columns.body_sizes) == [2, 1]
    blobs = blobs_of(columns)
    assert [len(b) for b in blobs] == list(columns.properties_sizes)
    assert decode_properties(blobs[0]) == {
        "TAGS": "ü",
        "UNIQ_KEY": messages[0].unique_key,
        "k": "välue",
    }


@pytest.mark.parametrize(
    "properties",
    [{"DELAY": "1"}, {"UNIQ_KEY": "x"}, {"a\x01": "b"}, {"a": "b\x02"}, {"": "v"}, {"a": 1}],
)
def test_messages_for_the_per_message_path_give_none(properties):
    messages = [Message(b"x"), Message(b"y", properties=properties)]
    assert encode_columns(messages, NOW, 1 << 20) is None


def test_oversized_properties_and_lost_keys_give_none():
    assert encode_columns([Message(b"x", properties={"v": "x" * 40_000})], NOW, 1 << 20) is None
    message = Message(b"x")
    message.unique_key = ""
    assert encode_columns([message], NOW, 1 << 20) is None


def test_batches_are_cut_under_max_bytes():
    messages = [Message(bytes(100), tags=("A" if i % 3 else "B")) for i in range(100)]
    chunks = encode_columns(messages, NOW, 2_000)
    assert chunks is not None and len(chunks) > 5
    assert sum(len(c.unique_keys) for c in chunks) == 100
    keys = [k for c in chunks for k in c.unique_keys]
    assert keys == [m.unique_key for m in messages]
    for chunk in chunks:
        columns = chunk.columns
        assert columns.ByteSize() <= 2_000
        assert len(columns.bodies) == sum(columns.body_sizes)
        assert len(columns.properties) == sum(columns.properties_sizes)
        tags = list(columns.tags)
        expected = [m.tags for m in chunk.messages]
        if columns.tag_indexes:
            assert [tags[i] for i in columns.tag_indexes] == expected
        else:
            assert tags == [expected[0]]
    # one message over the limit still goes, alone
    assert len(encode_columns([Message(bytes(5_000))] * 2, NOW, 2_000)) == 2


def test_offset_msg_ids_vectorised_match_formatting():
    rng = np.random.default_rng(7)
    offsets = [0, 1, 255, (1 << 63) - 1, *rng.integers(0, 1 << 62, 100).tolist()]
    expected = [f"7F0000012A9F{o:016X}" for o in offsets]
    assert offset_msg_ids("7F0000012A9F", offsets) == expected
    assert offset_msg_ids("7F0000012A9F", offsets[:3]) == expected[:3]


def test_unique_keys_keep_the_layout():
    keys = [new_unique_key() for _ in range(70_000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys[:1000])
    assert len(set(k[:20] for k in keys)) == 1  # ip + pid + instance tag
    assert len(set(keys)) > 65_000  # a 16-bit counter per millisecond


# -- broker checks ------------------------------------------------------------------------


def run_checks(blobs: list[bytes], tags: list[str]):
    """(suspects, error or None) of the fast path over ``blobs`` with per-message ``tags``."""
    values = sorted(set(tags))
    indexes = np.array([values.index(t) for t in tags], dtype=np.int64)
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    data = b"".join(blobs)
    suspects = suspect_property_blobs(data, sizes, np.cumsum(sizes), values, indexes)
    try:
        check_property_columns(data, sizes, np.cumsum(sizes), values, indexes)
    except InvalidArgumentError as exc:
        return suspects, str(exc)
    return suspects, None


def reference(blobs: list[bytes], tags: list[str]) -> int | None:
    for i, (blob, tag) in enumerate(zip(blobs, tags, strict=True)):
        try:
            check_property_blob(blob, tag)
        except InvalidArgumentError:
            return i
    return None


NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "REAL_TOPIC", "REAL_TOPIX", "REAL_QID",
         "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "ORIGIN_MESSAGE_ID", "user", "u", "TAG",
         "UNIQ_KEYS", "ÜNI", "RETRY_TOPIC", "k\x00"]  # fmt: skip


def random_blob(rng: random.Random, tag: str) -> bytes:
    props = [("UNIQ_KEY", f"ID{rng.randrange(1000)}")]
    if tag:
        props.insert(0, ("TAGS", tag))
    if rng.random() < 0.5:
        props.append(("KEYS", "a b"))
    props += [(f"user{i}", "v" * rng.randrange(3)) for i in range(rng.randrange(3))]
    blob = "".join(f"{n}\x01{v}\x02" for n, v in props).encode()
    if rng.random() < 0.3:  # break it somehow
        kind = rng.randrange(6)
        if kind == 0:
            name = rng.choice(NAMES)
            blob += f"{name}\x01{rng.choice(['', 'x', tag])}\x02".encode()
        elif kind == 1 and blob:
            cut = rng.randrange(len(blob))
            blob = blob[:cut] + bytes([rng.choice([0, 1, 2, 0xFF])]) + blob[cut + 1 :]
        elif kind == 2:
            blob = blob[: rng.randrange(len(blob) + 1)]
        elif kind == 3:
            blob = blob.replace(b"UNIQ_KEY\x01", b"UNIQ_KEY\x01\x02x\x01", 1)
        elif kind == 4:
            blob = blob.replace(b"TAGS\x01", b"TAGS\x01X", 1)
        else:
            blob = blob.replace(f"\x01{tag}\x02".encode(), b"\x01Tag\xc3\xa4\x02", 1)
    return blob


@pytest.mark.parametrize("seed", range(300))
def test_fast_checks_agree_with_the_reference(seed):
    rng = random.Random(seed)
    count = rng.randrange(1, 12) if seed % 3 else rng.randrange(48, 120)
    tags = [rng.choice(["", "TagA", "TagB", "Tagä", "LongerTagValue"]) for _ in range(count)]
    blobs = [random_blob(rng, tag) for tag in tags]
    bad = [i for i in range(count) if reference([blobs[i]], [tags[i]]) is not None]
    suspects, error = run_checks(blobs, tags)
    if suspects is not None:
        assert set(bad) <= set(suspects.tolist())
    if bad:
        assert error is not None and error.startswith(f"columns.properties of message {bad[0]}:")
    else:
        assert error is None


def test_good_columns_have_no_suspects():
    blobs = [b"TAGS\x01TagA\x02KEYS\x01k\x02UNIQ_KEY\x01ID\x02REAL_TOPIX\x01v\x02"] * 5
    suspects, error = run_checks(blobs, ["TagA"] * 5)
    assert error is None
    assert suspects is not None and suspects.tolist() == [0, 1, 2, 3, 4]  # same 8 bytes+length
    blobs = [b"TAGS\x01TagA\x02UNIQ_KEY\x01ID\x02u\x01\x00\x02"] * 3 + [b"UNIQ_KEY\x01x\x02"]
    suspects, error = run_checks(blobs, ["TagA"] * 3 + [""])
    assert error is None and suspects is not None and not len(suspects)


def uniform_blob(i: int, tag: str = "TagA") -> bytes:
    head = f"TAGS\x01{tag}\x02" if tag else ""
    return f"{head}UNIQ_KEY\x01{i:032X}\x02REAL_TOPIX\x01v{i % 10}\x02".encode()


def test_a_uniform_column_passes_the_cheap_check():
    blobs = [uniform_blob(i) for i in range(60)]
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    assert uniform_blobs_pass(b"".join(blobs), sizes, "TagA")
    assert run_checks(blobs, ["TagA"] * 60)[1] is None
    untagged = [uniform_blob(i, "") for i in range(60)]
    assert run_checks(untagged, [""] * 60)[1] is None


@pytest.mark.parametrize(
    "broken",
    [
        b"TAGS\x01TagB\x02UNIQ_KEY\x01" + b"7" * 32 + b"\x02REAL_TOPIX\x01v1\x02",  # other tag
        b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"7" * 32 + b"\x02REAL_TOPIC\x01v1\x02",  # reserved
        b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"7" * 31 + b"\x01\x02REAL_TOPIX\x01v1\x02",
        b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"7" * 31 + b"\x02\x02REAL_TOPIX\x01v1\x02",
        b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"7" * 31 + b"\xff\x02REAL_TOPIX\x01v1\x02",
        b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"7" * 32 + b"\x02REAL_TOPIX\x01v\x02\x02",
        b"TAGS\x01TagA\x02KEYS\x01" + b"7" * 36 + b"\x02REAL_TOPIX\x01v1\x02",  # no UNIQ_KEY
    ],
    ids=["tag", "reserved", "soh-in-value", "stx-in-value", "utf8", "empty-value", "no-key"],
)
@pytest.mark.parametrize("at", [0, 37, 59])
def test_a_uniform_column_with_one_bad_blob_names_it(broken, at):
    blobs = [uniform_blob(i) for i in range(60)]
    assert len(broken) == len(blobs[0])  # same size: the cheap check sees it first
    blobs[at] = broken
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    assert not uniform_blobs_pass(b"".join(blobs), sizes, "TagA")
    with pytest.raises(InvalidArgumentError) as reference_error:
        check_property_blob(broken, "TagA")
    _, error = run_checks(blobs, ["TagA"] * 60)
    assert error == f"columns.properties of message {at}: {reference_error.value}"
