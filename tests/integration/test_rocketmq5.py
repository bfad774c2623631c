"""The official RocketMQ 5 Python client (``rocketmq-python-client``), unmodified, against a
real ``rocketlite broker`` process: producing, simple and push consumption, FIFO order,
redelivery, dead letters, and both directions mixed with rocketlite's own client."""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.v5.exception import IllegalArgumentException

from rmq_spark.client import Admin
from rmq_spark.client import Producer as RocketliteProducer
from tests.support.broker_harness import read_queue
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import Code, RawV2, config, make_message, running

BROKER = "broker-v2"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess

    root = tmp_path_factory.mktemp("v2")
    process = BrokerProcess(
        BROKER,
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--max-message-bytes", "64KiB"],
    )
    process.start()
    with Admin(process.endpoint) as admin:
        admin.create_topic("v2-normal", queues=4)
        admin.create_topic("v2-mixed-in", queues=2)
        admin.create_topic("v2-fifo", queues=2, message_type="FIFO")
        admin.create_topic("v2-one", queues=1)
    yield process
    process.clean_up()


def committed(broker, group: str, topic: str, queue_id: int = 0) -> int | None:
    """The group's committed offset of one queue, as ``rocketlite offsets`` shows it."""
    with Admin(broker.endpoint) as admin:
        for mq, offset in admin.consumer_offsets(group, topic).items():
            if mq.queue_id == queue_id:
                return offset
    return None


def test_official_producer_messages_read_by_rocketlite_with_tags_keys_properties(broker):
    with running(Producer(config(broker.endpoint), ("v2-normal",))) as producer:
        receipts = [
            producer.send(
                make_message(
                    "v2-normal", f"order-{i}".encode(), tag="Paid", keys=[f"k{i}", "shared"],
                    props={"region": "eu", "n": str(i)},
                )
            )
            for i in range(8)
        ]  # fmt: skip
    rows = [row for q in range(4) for row in read_queue(broker.endpoint, "v2-normal", q, BROKER)]
    by_body = {row["body"]: row for row in rows}
    assert len(rows) == 8
    # every queue got some: the broker spreads messages without a group over the queues
    assert {row["queueId"] for row in rows} == {0, 1, 2, 3}
    for i, receipt in enumerate(receipts):
        row = by_body[f"order-{i}".encode()]
        assert row["tags"] == "Paid"
        assert sorted(row["keys"].split(" ")) == sorted([f"k{i}", "shared"])
        props = dict(row["properties"])
        assert props["UNIQ_KEY"] == receipt.message_id  # the client's id, unchanged
        assert props["region"] == "eu" and props["n"] == str(i)
        assert row["queueOffset"] == receipt.offset


def test_rocketlite_producer_messages_received_by_official_simple_consumer(broker):
    with RocketliteProducer(broker.endpoint) as producer:
        sent = [
            producer.send(
                "v2-mixed-in", f"hello-{i}".encode(), tags="TagA" if i % 2 else "TagB",
                keys=[f"key{i}"], properties={"origin": "rocketlite"},
            )
            for i in range(10)
        ]  # fmt: skip
    consumer = SimpleConsumer(
        config(broker.endpoint), "g-mixed", {"v2-mixed-in": FilterExpression("TagA")},
        await_duration=2,
    )  # fmt: skip
    with running(consumer):
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            for message in consumer.receive(16, 15):
                got.append(message)
                consumer.ack(message)
    assert sorted(m.body for m in got) == [f"hello-{i}".encode() for i in (1, 3, 5, 7, 9)]
    ids = {s.msg_id for s in sent}
    for message in got:
        assert message.tag == "TagA"
        assert message.message_id in ids
        assert message.properties == {"origin": "rocketlite"}
        assert message.delivery_attempt == 1
        assert len(message.keys) == 1 and next(iter(message.keys)).startswith("key")
    # TagB messages were filtered out for this group, and it acked the rest: no lag
    with Admin(broker.endpoint) as admin:
        progress = admin.consumer_progress("g-mixed", "v2-mixed-in")
    assert len(progress) == 2 and sum(p.lag for p in progress) == 0, progress


def test_unacked_message_comes_back_with_a_higher_attempt_and_old_handles_stop_working(broker):
    raw = RawV2(broker.endpoint)
    try:
        assert raw.send("v2-one", b"retry-me").status.code == Code.OK
        status, messages = raw.receive("g-redeliver", "v2-one", invisible_s=10)
        assert status.code == Code.OK and len(messages) == 1
        first = messages[0].system_properties
        assert first.delivery_attempt == 1
        # nothing else is visible while it is in flight
        status, messages = raw.receive("g-redeliver", "v2-one", wait_s=0.5)
        assert status.code == Code.MESSAGE_NOT_FOUND and messages == []
        # "not now": visible again in half a second
        changed = raw.change_invisible("g-redeliver", "v2-one", first.receipt_handle, 0.5)
        assert changed.status.code == Code.OK
        assert changed.receipt_handle != first.receipt_handle
        stale = raw.ack("g-redeliver", "v2-one", first.receipt_handle)
        assert stale.status.code == Code.INVALID_RECEIPT_HANDLE
        started = time.monotonic()
        status, messages = raw.receive("g-redeliver", "v2-one", wait_s=5)
        assert time.monotonic() - started < 3
        assert len(messages) == 1 and messages[0].body == b"retry-me"
        again = messages[0].system_properties
        assert again.delivery_attempt == 2
        assert again.message_id == first.message_id
        assert raw.ack("g-redeliver", "v2-one", again.receipt_handle).status.code == Code.OK
        # acked: never delivered again, and the group's offset moved past it
        status, messages = raw.receive("g-redeliver", "v2-one", wait_s=0.5)
        assert messages == []
        assert committed(broker, "g-redeliver", "v2-one") == again.queue_offset + 1
    finally:
        raw.close()


def test_committed_offset_advances_only_over_acked_messages(broker):
    raw = RawV2(broker.endpoint)
    try:
        for i in range(3):
            raw.send("v2-one", f"step-{i}".encode())
        _, messages = raw.receive("g-progress", "v2-one")
        bodies = [m.body for m in messages]
        assert bodies[-3:] == [b"step-0", b"step-1", b"step-2"]
        ordered = sorted(messages, key=lambda m: m.system_properties.queue_offset)
        first, *rest = ordered[-3:]
        for earlier in ordered[:-3]:  # messages other tests left in the queue
            raw.ack("g-progress", "v2-one", earlier.system_properties.receipt_handle)
        for message in rest:
            raw.ack("g-progress", "v2-one", message.system_properties.receipt_handle)
        held = committed(broker, "g-progress", "v2-one")
        assert held == first.system_properties.queue_offset  # held at the unacked one
        raw.ack("g-progress", "v2-one", first.system_properties.receipt_handle)
        assert (
            committed(broker, "g-progress", "v2-one") == rest[-1].system_properties.queue_offset + 1
        )
    finally:
        raw.close()


class Recorder(MessageListener):
    def __init__(self, fail_first: int = 0) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bytes, int]] = []
        self.failures: dict[bytes, int] = {}
        self.fail_first = fail_first

    def consume(self, message):
        with self.lock:
            failed = self.failures.get(message.body, 0)
            if failed < self.fail_first:
                self.failures[message.body] = failed + 1
                return ConsumeResult.FAILURE
            self.seen.append((message.message_group or "", message.body, message.delivery_attempt))
        return ConsumeResult.SUCCESS


def test_fifo_messages_of_a_group_are_consumed_in_order_by_the_official_push_consumer(broker):
    listener = Recorder()
    consumer = PushConsumer(
        config(broker.endpoint), "g-fifo", listener, {"v2-fifo": FilterExpression()}
    )
    with running(consumer), running(Producer(config(broker.endpoint), ("v2-fifo",))) as producer:
        receipts = [
            producer.send(make_message("v2-fifo", f"{i}".encode(), group=f"user-{i % 3}"))
            for i in range(30)
        ]
        eventually(lambda: len(listener.seen) >= 30, what="30 FIFO messages consumed", timeout=30)
    for group in ("user-0", "user-1", "user-2"):
        numbers = [int(body) for g, body, _ in listener.seen if g == group]
        assert numbers == sorted(numbers) and len(numbers) == 10, (group, numbers)
    # one message group stays on one queue
    queues = {}
    for i, receipt in enumerate(receipts):
        queues.setdefault(f"user-{i % 3}", set()).add(receipt.message_queue.message_queue0().id)
    assert all(len(q) == 1 for q in queues.values()), queues


def test_push_consumer_failure_is_redelivered_with_its_attempt(broker):
    listener = Recorder(fail_first=1)
    consumer = PushConsumer(
        config(broker.endpoint), "g-push-retry", listener, {"v2-normal": FilterExpression()}
    )
    with running(consumer):
        with running(Producer(config(broker.endpoint), ("v2-normal",))) as producer:
            producer.send(make_message("v2-normal", b"flaky", tag="F"))
        eventually(
            lambda: any(body == b"flaky" for _, body, _ in listener.seen),
            what="flaky consumed",
            timeout=30,
        )
    attempts = [a for _, body, a in listener.seen if body == b"flaky"]
    assert attempts == [2], attempts  # failed once, then consumed at the second delivery


def test_wrong_message_type_is_refused_by_the_broker_and_the_client(broker):
    raw = RawV2(broker.endpoint)
    try:
        answer = raw.send("v2-fifo", b"no group")  # NORMAL to a FIFO topic
        assert answer.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert "v2-fifo" in answer.status.message and "FIFO" in answer.status.message
        answer = raw.send("v2-normal", b"grouped", message_group="g1")
        assert answer.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    finally:
        raw.close()
    producer = Producer(config(broker.endpoint), ("v2-fifo",))
    with running(producer), pytest.raises(IllegalArgumentException, match="type not match"):
        producer.send(make_message("v2-fifo", b"no group"))
    assert raw_route_ok(broker, "v2-fifo")  # the broker still serves


def raw_route_ok(broker, topic: str) -> bool:
    raw = RawV2(broker.endpoint)
    try:
        return raw.route(topic).status.code == Code.OK
    finally:
        raw.close()


def test_bad_input_gets_a_clear_status_and_the_broker_keeps_serving(broker):
    raw = RawV2(broker.endpoint)
    try:
        assert raw.route("no-such-topic").status.code == Code.TOPIC_NOT_FOUND
        assert raw.route("v2-normal", client_id="").status.code == Code.CLIENT_ID_REQUIRED
        assert raw.send("no-such-topic", b"x").status.code == Code.TOPIC_NOT_FOUND
        too_big = raw.send("v2-normal", b"x" * (64 * 1024 + 1))
        assert too_big.status.code == Code.MESSAGE_BODY_TOO_LARGE
        assert "65,536" in too_big.status.message
        forged = raw.ack("g-bad", "v2-normal", "0.0.123abc")
        assert forged.status.code == Code.INVALID_RECEIPT_HANDLE
        garbage = raw.ack("g-bad", "v2-normal", "not a handle at all")
        assert garbage.status.code == Code.INVALID_RECEIPT_HANDLE
        status, _ = raw.receive("g-bad", "v2-normal", invisible_s=1)
        assert status.code == Code.ILLEGAL_INVISIBLE_TIME and "10 s" in status.message
        status, _ = raw.receive("g-bad", "no-such-topic")
        assert status.code == Code.TOPIC_NOT_FOUND
        bad_tag = raw.send("v2-normal", b"x", tag="a|b")
        assert bad_tag.status.code == Code.ILLEGAL_MESSAGE_TAG
        # still serving
        assert raw.send("v2-normal", b"after the bad ones").status.code == Code.OK
        assert raw.route("v2-normal").status.code == Code.OK
    finally:
        raw.close()
    producer = Producer(config(broker.endpoint))
    # the client turns the broker's TOPIC_NOT_FOUND route answer into this
    with running(producer), pytest.raises(Exception, match="no-such-topic route"):
        producer.send(make_message("no-such-topic", b"x"))


def test_v2_offset_calls_use_the_same_committed_offsets_as_rocketlite(broker):
    raw = RawV2(broker.endpoint)
    try:
        with RocketliteProducer(broker.endpoint) as producer:
            for i in range(5):
                producer.send("v2-mixed-in", f"pull-{i}".encode(), queue=1, tags="P")
        queue = pb.MessageQueue(topic=pb.Resource(name="v2-mixed-in"), id=1)
        group = pb.Resource(name="g-offsets")
        metadata = raw.metadata()
        missing = raw.stub.GetOffset(
            spb.GetOffsetRequest(group=group, message_queue=queue), metadata=metadata
        )
        assert missing.status.code == Code.OFFSET_NOT_FOUND
        end = raw.stub.QueryOffset(
            spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END),
            metadata=metadata,
        )
        begin = raw.stub.QueryOffset(
            spb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.BEGINNING),
            metadata=metadata,
        )
        assert begin.offset == 0 and end.offset >= 5
        request = spb.PullMessageRequest(
            group=group,
            message_queue=queue,
            offset=end.offset - 5,
            batch_size=3,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="P"),
        )
        frames = list(raw.stub.PullMessage(request, metadata=metadata, timeout=5))
        assert frames[0].status.code == Code.OK
        bodies = [f.message.body for f in frames if f.HasField("message")]
        assert bodies == [b"pull-0", b"pull-1", b"pull-2"]
        assert frames[-1].next_offset == end.offset - 2
        updated = raw.stub.UpdateOffset(
            spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=end.offset - 2),
            metadata=metadata,
        )
        assert updated.status.code == Code.OK
        got = raw.stub.GetOffset(
            spb.GetOffsetRequest(group=group, message_queue=queue), metadata=metadata
        )
        assert got.offset == end.offset - 2
        assert committed(broker, "g-offsets", "v2-mixed-in", queue_id=1) == end.offset - 2
        beyond = raw.stub.UpdateOffset(
            spb.UpdateOffsetRequest(group=group, message_queue=queue, offset=end.offset + 99),
            metadata=metadata,
        )
        assert beyond.status.code == Code.ILLEGAL_OFFSET
    finally:
        raw.close()
