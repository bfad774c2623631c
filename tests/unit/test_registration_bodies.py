"""REGISTER_BROKER's bodies: RocketMQ's RegisterBrokerBody as JSON (what its 4.9 brokers
send by default, and what rocketlite's send), its compressed form, and bad ones refused
with a clear error."""

from __future__ import annotations

import struct
import zlib

import pytest

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.bodies import BrokerTopics, TopicConfigRow

#: a body as Apache RocketMQ 4.9.7's broker writes it (fastjson), cut to two topics
JAVA_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":7,'
    b'"timestamp":1700000000123},"topicConfigTable":{"TBW102":{"order":false,"perm":7,'
    b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,'
    b'"writeQueueNums":8},"%RETRY%g":{"order":false,"perm":6,"readQueueNums":1,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%g","topicSysFlag":0,'
    b'"writeQueueNums":1}}}}'
)
TOPICS = (TopicConfigRow("orders", 8, 4, 6), TopicConfigRow("%RETRY%g", 1, 1, 6, 2, True))


def by_topic(registration: BrokerTopics) -> dict[str, TopicConfigRow]:
    return {row.topic: row for row in registration.topics}


def test_a_java_body_is_read():
    read = bodies.read_register_broker_body(JAVA_BODY, compressed=False)
    assert (read.timestamp_ms, read.counter) == (1700000000123, 7)
    assert by_topic(read) == {
        "TBW102": TopicConfigRow("TBW102", 8, 8, 7),
        "%RETRY%g": TopicConfigRow("%RETRY%g", 1, 1, 6),
    }


def test_the_bare_wrapper_of_older_brokers_is_read():
    wrapper = JAVA_BODY[JAVA_BODY.index(b":{") + 1 : -1]
    read = bodies.read_register_broker_body(wrapper, compressed=False, wrapped=False)
    assert set(by_topic(read)) == {"TBW102", "%RETRY%g"}


def test_what_rocketlite_sends_reads_back_and_is_compact():
    sent = BrokerTopics(1700000000000, 3, TOPICS)
    body = bodies.register_broker_body(sent)
    assert b" " not in body and body.startswith(b'{"filterServerList":[],')
    read = bodies.read_register_broker_body(body, compressed=False)
    assert by_topic(read) == by_topic(sent) and read.counter == 3


def test_the_compressed_form_reads_back():
    sent = BrokerTopics(5, 9, TOPICS)
    read = bodies.read_register_broker_body(
        bodies.compressed_register_broker_body(sent), compressed=True
    )
    # that form carries name, queue counts and perm only (RocketMQ's TopicConfig.encode)
    assert by_topic(read) == {
        "orders": TopicConfigRow("orders", 8, 4, 6),
        "%RETRY%g": TopicConfigRow("%RETRY%g", 1, 1, 6),
    }
    assert (read.timestamp_ms, read.counter) == (5, 9)


def test_the_crc_is_crc32_without_the_sign_bit():
    assert bodies.body_crc32(b"123456789") == 0xCBF43926 & 0x7FFFFFFF
    assert all(bodies.body_crc32(bytes([i])) < 1 << 31 for i in range(256))


def _packed(*chunks: bytes, count: int | None = None) -> bytes:
    version = b'{"counter":1,"timestamp":2}'
    parts = [struct.pack(">i", len(version)), version]
    if count is not None:
        parts.append(struct.pack(">i", count))
    for chunk in chunks:
        parts += [struct.pack(">i", len(chunk)), chunk]
    return zlib.compress(b"".join(parts))


@pytest.mark.parametrize(
    ("body", "compressed", "said"),
    [
        (b"{not json", False, "the registration body is not JSON"),
        (b"[1,2]", False, "holds no topic config wrapper"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":[]}}', False, "is not an object"),
        (
            b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}',
            False,
            "topic 'T' is malformed",
        ),
        (
            b'{"topicConfigSerializeWrapper":{"dataVersion":{"timestamp":"now"}}}',
            False,
            "whole-number timestamp",
        ),
        (b"not deflate", True, "does not inflate"),
        (_packed(), True, "cut short in its topic count"),
        (_packed(count=2), True, "cut short in topic config 0"),
        (_packed(b"T 4 4", count=1), True, "is not 'name read write perm filterType'"),
    ],
)
def test_bad_bodies_are_refused_saying_what_is_wrong(body, compressed, said):
    with pytest.raises(InvalidArgumentError, match=said):
        bodies.read_register_broker_body(body, compressed=compressed)
