"""The RocketMQ 5 service answers by the broker's shared rules, over a real broker process:
the queue permissions its routes announce are rocketlite.v1's, a producer cannot write into
the broker's own delay topic, reads need the read permission, and a long-polling pull waits
past messages its filter rejects (as a rocketlite.v1 pull does)."""

from __future__ import annotations

import threading

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.client import Admin
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.structs import Permission
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import Code, RawV2

#: how v2 routes announce a queue's permission, back in rocketlite's bits
_BITS = {
    pb.READ_WRITE: Permission.READ_WRITE,
    pb.READ: Permission.READ,
    pb.WRITE: Permission.WRITE,
    pb.NONE: Permission(0),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess

    root = tmp_path_factory.mktemp("v2-rules")
    process = BrokerProcess("broker-rules", root / "store", root / "broker.log", TEST_STORE_FLAGS)
    process.start()
    with Admin(process.endpoint) as admin:
        admin.create_topic("split", read_queues=4, write_queues=2)
        admin.create_topic("read-only", queues=2, perm=4)
        admin.create_topic("write-only", queues=2, perm=2)
        admin.create_topic("polled", queues=1)
    yield process
    process.clean_up()


@pytest.fixture
def raw(broker):
    client = RawV2(broker.endpoint)
    yield client
    client.close()


def pull_request(topic: str, offset: int, *, tag: str = "*", wait_s: float = 0):
    request = spb.PullMessageRequest(
        group=pb.Resource(name="g-rules"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        offset=offset,
        batch_size=8,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag),
    )
    request.long_polling_timeout.FromMilliseconds(int(wait_s * 1000))
    return request


@pytest.mark.parametrize("topic", ["split", "read-only", "write-only"])
def test_v2_routes_announce_the_queue_permissions_of_rocketlite_routes(broker, raw, topic):
    answer = raw.route(topic)
    assert answer.status.code == Code.OK
    announced = {q.id: _BITS[q.permission] for q in answer.message_queues}
    with Admin(broker.endpoint) as admin:
        route = admin.describe_topic(topic)
    expected = {mq.queue_id: perm for mq, perm in route.queues.items()}
    assert {qid: perm for qid, perm in announced.items() if perm} == expected
    if topic == "split":  # queues 2 and 3 are read queues only
        assert announced == {0: Permission.READ_WRITE, 1: Permission.READ_WRITE,
                             2: Permission.READ, 3: Permission.READ}  # fmt: skip


def test_a_v2_producer_cannot_write_into_the_delay_topic(raw):
    answer = raw.send(SCHEDULE_TOPIC, b"not a delayed message")
    assert answer.status.code == Code.ILLEGAL_TOPIC
    assert "delay_level" in answer.status.message


def test_reads_of_a_write_only_topic_are_forbidden_for_receive_and_pull(raw):
    assert raw.send("write-only", b"kept").status.code == Code.OK
    status, messages = raw.receive("g-rules", "write-only", wait_s=0)
    assert status.code == Code.FORBIDDEN and messages == []
    assert "not readable" in status.message
    frames = list(raw.stub.PullMessage(pull_request("write-only", 0), metadata=raw.metadata()))
    assert frames[0].status.code == Code.FORBIDDEN
    assert "not readable" in frames[0].status.message


def test_a_v2_long_poll_pull_waits_past_messages_its_filter_rejects(broker, raw):
    request = pull_request("polled", 0, tag="A", wait_s=8)
    frames: list = []
    puller = threading.Thread(
        target=lambda: frames.extend(
            raw.stub.PullMessage(request, metadata=raw.metadata(), timeout=15)
        )
    )
    puller.start()
    with Admin(broker.endpoint) as admin:

        def held() -> bool:
            info = next(iter(admin.broker_info().values()))
            return info.server_stats["held_pulls"] >= 1

        eventually(held, what="the pull is held by the broker")
        assert raw.send("polled", b"rejected", tag="B").status.code == Code.OK
        # the rejected arrival did not answer the pull: it is held again
        eventually(held, what="the pull is held again after a message it filters out")
        assert puller.is_alive()
        assert raw.send("polled", b"wanted", tag="A").status.code == Code.OK
    puller.join(timeout=15)
    assert frames[0].status.code == Code.OK
    assert [f.message.body for f in frames if f.HasField("message")] == [b"wanted"]
    assert frames[-1].next_offset == 2
