"""Finding messages by key, the pure parts: which keys may be asked for, how an answer is
cut to a byte budget, and how a client drops the index's hash collisions."""

from __future__ import annotations

import pytest

from rmq_spark.broker.core.key_query import within_bytes
from rmq_spark.client.remoting.client import rows_with_key
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import validate_message_key


@pytest.mark.parametrize("key", ["order-1", "7F0000010000A1B2C3D4E5F600000001", "ключ", "a#b"])
def test_one_word_keys_are_taken_as_they_are(key):
    assert validate_message_key(key) == key


@pytest.mark.parametrize(
    ("key", "said"),
    [("", "non-empty"), (None, "non-empty"), ("two words", "holds a space")],
)
def test_empty_keys_and_keys_with_spaces_are_refused(key, said):
    with pytest.raises(InvalidArgumentError, match=said):
        validate_message_key(key)


def test_an_answer_keeps_records_up_to_the_byte_budget_and_never_none():
    records = [b"a" * 40, b"b" * 30, b"c" * 20]
    assert within_bytes(records, 70) == records[:2]
    assert within_bytes(records, 90) == records
    assert within_bytes(records, 10) == records[:1]  # one record over budget still goes
    assert within_bytes([], 10) == []


def _record(topic: str, offset: int, keys: str | None, uniq: str) -> bytes:
    props = {"UNIQ_KEY": uniq, **({"KEYS": keys} if keys is not None else {})}
    return encode_record(
        Record(topic=topic, queue_id=0, body=f"m{offset}".encode(),
               properties=encode_properties(props), physical_offset=offset)
    )  # fmt: skip


def test_a_client_keeps_only_the_topics_records_that_carry_the_key_newest_first():
    # what a RocketMQ broker may answer for topic#order-1: the index hash of other keys and
    # other topics can be the same, and its records come oldest first
    answer = b"".join(
        [
            _record("orders", 100, "order-1 vip", "U1"),
            _record("orders", 200, "order-10", "U2"),  # another key, same hash
            _record("payments", 300, "order-1", "U3"),  # another topic
            _record("orders", 400, None, "order-1"),  # the key is its UNIQ_KEY
            _record("orders", 500, "vip order-1", "U5"),
        ]
    )
    kept = rows_with_key(decode_records(answer), "orders", "order-1")
    assert kept.column("body").to_pylist() == [b"m500", b"m400", b"m100"]
