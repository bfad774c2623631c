"""Plain batches (bodies, or (body, tag) pairs) are encoded in columns without a Message
each: the columns must be exactly those encode_columns makes of the same Messages."""

from __future__ import annotations

import re

import pytest

from rmq_spark.client.message import Message, encode_columns, new_unique_key, new_unique_keys
from rmq_spark.client.plain_batch import PlainBatch
from rmq_spark.errors import InvalidArgumentError

NOW = 1_700_000_000_000


def as_messages(batch: PlainBatch) -> list[Message]:
    return [
        Message(body, tag, unique_key=key)
        for body, tag, key in zip(batch.bodies, batch.tags, batch.unique_keys, strict=True)
    ]


@pytest.mark.parametrize(
    "items",
    [
        [b"a", b"bc", b""] * 10,
        [(b"x%d" % i, "TagA") for i in range(40)],
        [(b"x%d" % i, ("A", None, "B", "", "A")[i % 5]) for i in range(40)],
        [(b"y", "\u00e9t\u00e9")] * 20,  # a tag whose UTF-8 is longer than its text
    ],
    ids=["bodies", "one-tag", "tags-and-none", "non-ascii-tag"],
)
def test_columns_equal_those_of_the_same_messages(items):
    batch = PlainBatch.of(items)
    assert batch is not None
    (chunk,) = batch.encode(NOW, 1 << 20)
    (expected,) = encode_columns(as_messages(batch), NOW, 1 << 20)
    assert chunk.columns == expected.columns
    assert chunk.unique_keys == expected.unique_keys == batch.unique_keys


def test_big_batches_are_split_as_the_general_path_splits():
    batch = PlainBatch.of([(b"z" * 100, "T")] * 50)
    chunks = batch.encode(NOW, 2000)
    expected = encode_columns(as_messages(batch), NOW, 2000)
    assert len(chunks) > 1
    assert [c.columns for c in chunks] == [c.columns for c in expected]
    assert [key for c in chunks for key in c.unique_keys] == batch.unique_keys


@pytest.mark.parametrize(
    "items",
    [
        [],
        [Message(b"m")] * 3,
        ["text body"] * 3,
        [(b"a", "T", "key")] * 3,
        [(b"a", "T"), b"b"],
        [("text", "T")] * 3,
        [(b"a",)] * 3,
    ],
    ids=["empty", "messages", "str", "keys", "mixed", "str-in-tuple", "one-tuple"],
)
def test_anything_else_takes_the_general_path(items):
    assert PlainBatch.of(items) is None


@pytest.mark.parametrize("tag", ["a||b", " padded", 7])
def test_bad_tags_are_refused_as_a_message_refuses_them(tag):
    with pytest.raises(InvalidArgumentError) as general:
        Message(b"", tag)
    with pytest.raises(InvalidArgumentError) as plain:
        PlainBatch.of([(b"x", "ok"), (b"y", tag)])
    assert str(plain.value) == str(general.value)


def test_messages_are_made_on_demand_with_the_batch_ids():
    batch = PlainBatch.of([(b"a", "T"), (b"b", None), (b"c", "")])
    assert len(batch) == 3
    assert [(m.body, m.tags, m.unique_key) for m in batch] == list(
        zip([b"a", b"b", b"c"], ["T", None, None], batch.unique_keys, strict=True)
    )
    assert [m.body for m in batch[1:]] == [b"b", b"c"]


def test_unique_keys_in_bulk_keep_the_layout_and_never_repeat():
    keys = new_unique_keys(70_000)  # more than one millisecond's share
    assert len(set(keys)) == 70_000
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys[::97])
    assert {k[:20] for k in keys} == {new_unique_key()[:20]}  # ip + pid + instance tag


def test_batches_under_the_columns_minimum_take_the_general_path():
    items = [(b"a", "T")] * 16
    assert PlainBatch.of(items, 17) is None and PlainBatch.of(items, 0) is None
    assert PlainBatch.of(items, 16) is not None
