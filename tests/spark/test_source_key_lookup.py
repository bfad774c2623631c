"""Batch reads of the messages stored under one key (option ``messageKey``), found through
the message index: through the brokers (gRPC and RocketMQ's remoting protocol) and in a
store directory. The rows are exactly the messages carrying the key, within the range the
other options give."""

from __future__ import annotations

import json

import pytest

from rmq_spark.client import Admin, Producer
from tests.support.eventually import eventually


def send_keyed(endpoint: str, topic: str, n: int = 300) -> dict[int, str]:
    """``n`` messages over 3 queues, message i with KEYS ``order-{i % 10} u{i}``; returns
    each message's UNIQ_KEY (its id) by i, once every key is in the index."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=3)
    ids = {}
    with Producer(endpoint) as producer:
        for i in range(n):
            sent = producer.send(
                topic, f"m-{i}".encode(), keys=[f"order-{i % 10}", f"u{i}"], queue=i % 3
            )
            ids[i] = sent.msg_id
    with Admin(endpoint) as admin:  # the index is built a moment behind the writes
        eventually(lambda: admin.query_messages(topic, f"u{n - 1}"), what="the last key indexed")
    return ids


def bodies(df) -> list[bytes]:
    return sorted(bytes(r.body) for r in df.select("body").collect())


def read(spark, **options):
    reader = spark.read.format("rocketlite")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_key_reads_exactly_its_messages(spark, broker_factory, topic):
    broker = broker_factory("broker-k", "--remoting-port", "0")
    ids = send_keyed(broker.endpoint, topic)
    order_3 = sorted(f"m-{i}".encode() for i in range(300) if i % 10 == 3)
    via_grpc = read(spark, endpoints=broker.endpoint, topic=topic, messageKey="order-3")
    assert bodies(via_grpc) == order_3
    by_id = read(spark, endpoints=broker.endpoint, topic=topic, messageKey=ids[123])
    assert bodies(by_id) == [b"m-123"]
    none = read(spark, endpoints=broker.endpoint, topic=topic, messageKey="order-none")
    assert bodies(none) == []
    # the other options still bound the read: queue 0 below offset 50 only
    ending = json.dumps({topic: {"broker-k": {"0": 50, "1": 0, "2": 0}}})
    bounded = read(
        spark, endpoints=broker.endpoint, topic=topic, messageKey="order-3", endingOffsets=ending
    )
    assert bodies(bounded) == sorted(f"m-{i}".encode() for i in range(150) if i % 30 == 3)
    # through RocketMQ's remoting protocol (rocketlite's port as the name server)
    via_remoting = read(
        spark, nameServer=broker.remoting_address, topic=topic, messageKey="order-3"
    )
    assert bodies(via_remoting) == order_3

    broker.stop()
    offline = read(
        spark, storePath=str(broker.store_dir), topic=topic, messageKey="order-3",
        brokerName="broker-k",
    )  # fmt: skip
    assert bodies(offline) == order_3


def test_a_bad_key_is_refused_naming_the_option(spark, broker, topic):
    with pytest.raises(Exception, match="messageKey"):
        read(spark, endpoints=broker.endpoint, topic=topic, messageKey="two words").collect()
