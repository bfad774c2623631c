"""DELAY and TRANSACTION messages from the official RocketMQ 5 producer against a real broker
process: delivery at the asked time (also across a SIGKILL), commit, rollback, and the
broker asking a live producer about an orphaned transaction."""

from __future__ import annotations

import threading
import time

from rocketmq import (
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.client import Admin
from tests.support.broker_harness import free_port
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import Code, RawV2, config, running


def receive_all(endpoint: str, group: str, topic: str, expect: int, timeout_s: float):
    """(body, wall-clock time it arrived, message) for what a simple consumer gets, acked."""
    started = time.monotonic()
    out = []
    consumer = SimpleConsumer(
        config(endpoint), group, {topic: FilterExpression()}, await_duration=2
    )
    with running(consumer):
        while len(out) < expect and time.monotonic() - started < timeout_s:
            for message in consumer.receive(32, 15):
                out.append((message.body, time.time(), message))
                consumer.ack(message)
    return out


def delay_message(topic: str, body: bytes, at_s: int) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    message.add_property("kind", "reminder")
    # The Python client sends this value as whole seconds since the epoch.
    message.delivery_timestamp = at_s
    return message


def test_delay_messages_arrive_at_their_time_also_after_a_sigkill(broker_factory):
    port = free_port()
    broker = broker_factory("broker-delay", "--port", str(port))
    with Admin(broker.endpoint) as admin:
        admin.create_topic("v2-delay", queues=2, message_type="DELAY")
    now = int(time.time())
    with running(Producer(config(broker.endpoint), ("v2-delay",))) as producer:
        producer.send(delay_message("v2-delay", b"in-2s", now + 2))
        producer.send(delay_message("v2-delay", b"in-4s", now + 4))
        producer.send(delay_message("v2-delay", b"past", now - 60))
    broker.kill()  # with two messages waiting
    broker.start()
    got = receive_all(broker.endpoint, "g-delay", "v2-delay", 3, timeout_s=15)
    arrived = {body: at for body, at, _ in got}
    assert sorted(arrived) == [b"in-2s", b"in-4s", b"past"]  # each once, none lost
    assert now + 2 <= arrived[b"in-2s"] < now + 2 + 2.5
    assert now + 4 <= arrived[b"in-4s"] < now + 4 + 2.5
    for _, _, message in got:
        assert message.message_type == pb.DELAY
        assert message.properties == {"kind": "reminder"}
    assert {m.delivery_timestamp for _, _, m in got if m.body == b"in-4s"} == {(now + 4) * 1000}


def test_delay_time_too_far_ahead_is_refused_with_a_hint(broker_factory):
    broker = broker_factory("broker-delay-bad")
    with Admin(broker.endpoint) as admin:
        admin.create_topic("v2-delay-bad", queues=1, message_type="DELAY")
        admin.create_topic("v2-normal-only", queues=1)
    raw = RawV2(broker.endpoint)
    try:
        at = pb.SystemProperties().delivery_timestamp
        at.seconds = int(time.time() * 1000)  # milliseconds where seconds belong
        answer = raw.send("v2-delay-bad", b"x", delivery_timestamp=at)
        assert answer.status.code == Code.ILLEGAL_DELIVERY_TIME
        assert "whole seconds" in answer.status.message
        at.seconds = int(time.time()) + 10
        wrong_type = raw.send("v2-normal-only", b"x", delivery_timestamp=at)
        assert wrong_type.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name="v2-normal-only"),
            message_id="nope",
            transaction_id="no-such-transaction",
            resolution=pb.COMMIT,
        )
        unknown = raw.stub.EndTransaction(request, metadata=raw.metadata(), timeout=5)
        assert unknown.status.code == Code.INVALID_TRANSACTION_ID
    finally:
        raw.close()


class Checker(TransactionChecker):
    def __init__(self, answer) -> None:
        self.answer = answer
        self.asked: list[bytes] = []
        self.lock = threading.Lock()

    def check(self, message):
        with self.lock:
            self.asked.append(message.body)
        return self.answer


def half(topic: str, body: bytes) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    message.tag = "Tx"
    return message


def test_transactions_commit_rollback_and_orphans_resolved_by_the_check(broker_factory):
    broker = broker_factory(
        "broker-tx", "--transaction-check-after-ms", "5000", "--transaction-check-interval-ms",
        "1000",
    )  # fmt: skip
    with Admin(broker.endpoint) as admin:
        admin.create_topic("v2-tx", queues=2, message_type="TRANSACTION")
    first = Producer(config(broker.endpoint), ("v2-tx",), Checker(TransactionResolution.COMMIT))
    with running(first) as producer:
        committed = producer.begin_transaction()
        receipt = producer.send(half("v2-tx", b"committed"), committed)
        assert receipt.transaction_id == receipt.message_id
        committed.commit()
        rolled_back = producer.begin_transaction()
        producer.send(half("v2-tx", b"rolled-back"), rolled_back)
        rolled_back.rollback()
        orphan = producer.begin_transaction()
        producer.send(half("v2-tx", b"orphan"), orphan)
        # nothing visible yet but the committed one
        early = receive_all(broker.endpoint, "g-tx-early", "v2-tx", 2, timeout_s=1.5)
        assert [body for body, _, _ in early] == [b"committed"]
    # the producer that sent the orphan left before its check time (5 s); a new producer
    # of the topic is asked
    checker = Checker(TransactionResolution.COMMIT)
    with running(Producer(config(broker.endpoint), ("v2-tx",), checker)):
        eventually(lambda: checker.asked, what="the new producer to be asked", timeout=15)
        assert checker.asked == [b"orphan"]
        got = receive_all(broker.endpoint, "g-tx", "v2-tx", 2, timeout_s=10)
    assert sorted(body for body, _, _ in got) == [b"committed", b"orphan"]
    assert all(m.message_type == pb.TRANSACTION and m.tag == "Tx" for _, _, m in got)
