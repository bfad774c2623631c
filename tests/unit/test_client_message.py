"""Messages the producer builds: ids, keys, bodies, and batch splitting by size."""

from __future__ import annotations

import re

import pytest

from rmq_spark.client import Message, new_unique_key
from rmq_spark.client.message import split_by_size, to_message
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2


def test_unique_keys_are_32_upper_hex_distinct_with_a_process_prefix():
    keys = [new_unique_key() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    assert len(set(keys)) == len(keys)
    assert len({k[:20] for k in keys}) == 1  # ip + pid + instance tag: fixed per process


def test_message_gets_a_unique_key_once_and_keeps_a_given_one():
    message = Message(b"x")
    assert len(message.unique_key) == 32
    assert message.to_pb(1).unique_key == message.unique_key
    assert Message(b"x", unique_key="MY-ID").unique_key == "MY-ID"


def test_message_normalizes_body_and_keys():
    message = Message("héllo", tags="TagA", keys="k1  k2", properties={"a": "b"})
    assert message.body == "héllo".encode()
    assert message.keys == ("k1", "k2")
    pb = message.to_pb(now_ms=123)
    assert (pb.tags, list(pb.keys), dict(pb.properties)) == ("TagA", ["k1", "k2"], {"a": "b"})
    assert pb.born_timestamp_ms == 123
    assert Message(b"", keys=["a", "b"]).keys == ("a", "b")


@pytest.mark.parametrize(
    ("kwargs", "bad"),
    [
        ({"body": 42}, "int"),
        ({"body": b"", "keys": ["ok", "has space"]}, "'has space'"),
        ({"body": b"", "keys": [""]}, "''"),
        ({"body": b"", "tags": "A || B"}, "'A || B'"),
        ({"body": b"", "tags": 7}, "7"),
    ],
)
def test_bad_message_fields_are_named(kwargs, bad):
    with pytest.raises(InvalidArgumentError, match=re.escape(bad)):
        Message(**kwargs)


def test_to_message_accepts_the_batch_item_shapes():
    assert to_message(b"a").body == b"a"
    assert to_message((b"a", "T", ["k"], {"p": "v"})).properties == {"p": "v"}
    assert to_message({"body": b"a", "tags": "T"}).tags == "T"
    given = Message(b"m")
    assert to_message(given) is given
    with pytest.raises(InvalidArgumentError, match="cannot make a message of int"):
        to_message(5)


def _sizes(runs):
    return [len(run) for run in runs]


def test_split_by_size_keeps_order_and_stays_under_the_limit():
    messages = [messaging_pb2.Message(body=b"x" * 1000) for _ in range(100)]
    runs = list(split_by_size(messages, 10_000))
    assert [m for run in runs for m in run] == messages
    assert all(sum(m.ByteSize() + 6 for m in run) <= 10_000 for run in runs)
    per_run = 10_000 // (messages[0].ByteSize() + 6)  # as many as fit, no fewer
    assert _sizes(runs) == [per_run] * (100 // per_run) + [100 % per_run]


def test_split_by_size_sends_an_oversized_message_alone():
    small = messaging_pb2.Message(body=b"s")
    big = messaging_pb2.Message(body=b"b" * 500)
    assert _sizes(split_by_size([small, big, small], 100)) == [1, 1, 1]
    assert _sizes(split_by_size([small] * 3, 1 << 20)) == [3]
    assert _sizes(split_by_size([], 100)) == []


def test_a_property_with_an_empty_value_is_refused_at_once():
    with pytest.raises(InvalidArgumentError, match="property 'region' has an empty value"):
        Message(b"x", properties={"region": "", "shop": "7"})
