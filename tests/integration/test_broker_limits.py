"""Requests the broker bounds: each refused whole, before anything is stored, with a message
that names the limit and the flag that sets it, and the broker keeps serving."""

from __future__ import annotations

import concurrent.futures

import grpc
import pytest

from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2, groups_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def queue(topic: str, queue_id: int = 0) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, queue_id=queue_id)


def max_offset(stubs, topic: str) -> int:
    query = m.QueueOffsetsQuery(queue=queue(topic))
    answer = stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=[query]))
    return answer.offsets[0].max_offset


def refused(call, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    return info.value


def heartbeat(stubs, group: str, topic: str, expression: str = "*"):
    return stubs.groups.Heartbeat(
        groups_pb2.HeartbeatRequest(
            client_id="10.0.0.5@1",
            consumer_group=group,
            subscriptions=[groups_pb2.Subscription(topic=topic, expression=expression)],
            message_model=groups_pb2.MESSAGE_MODEL_CLUSTERING,
            consume_type=groups_pb2.CONSUME_TYPE_PUSH,
        )
    )


@pytest.fixture
def start(in_process_broker_factory, connect):
    def start_broker(**overrides):
        local = in_process_broker_factory(**overrides)
        stubs = connect(local.endpoint)
        stubs.admin.CreateTopic(
            admin_pb2.CreateTopicRequest(topic="Orders", read_queue_nums=1, write_queue_nums=1)
        )
        return local, stubs

    return start_broker


def test_a_batch_over_the_message_limit_is_refused_and_nothing_is_stored(start):
    _, stubs = start(max_batch_messages=100)
    batch = [m.Message(body=b"x")] * 101
    error = refused(
        stubs.messaging.SendMessages, m.SendMessagesRequest(topic="Orders", messages=batch)
    )
    assert error.code() == INVALID
    assert "101 messages" in error.details() and "--max-batch-messages" in error.details()
    assert max_offset(stubs, "Orders") == 0
    stubs.messaging.SendMessages(m.SendMessagesRequest(topic="Orders", messages=batch[:100]))
    assert max_offset(stubs, "Orders") == 100


def test_a_batch_whose_answer_would_not_fit_is_refused_before_it_is_stored(start):
    # A small response limit stands for a huge batch of tiny messages against the default.
    _, stubs = start(
        max_message_bytes=16 << 10,
        max_pull_bytes=64 << 10,
        max_response_bytes=256 << 10,
        max_request_bytes=16 << 20,
    )
    batch = [m.Message(body=b"x")] * 5_000  # 5,000 answer entries do not fit in 256 KiB
    error = refused(
        stubs.messaging.SendMessages, m.SendMessagesRequest(topic="Orders", messages=batch)
    )
    assert error.code() == INVALID
    assert "--max-response-bytes" in error.details()
    assert max_offset(stubs, "Orders") == 0  # not stored: a retry cannot duplicate it


def test_a_huge_subscription_expression_is_refused_and_not_echoed_whole(start):
    _, stubs = start()
    expression = " || ".join(f"Tag{i}" for i in range(20_000))  # about 150 KB
    pull = m.PullMessagesRequest(queue=queue("Orders"), subscription_expression=expression)
    for error in (
        refused(stubs.messaging.PullMessages, pull),
        refused(heartbeat, stubs, "GroupA", "Orders", expression),
    ):
        assert error.code() == INVALID
        assert "--max-subscription-chars" in error.details()
        assert len(error.details()) < 400


def test_a_heartbeat_compiles_at_most_the_selector_limit(start):
    _, stubs = start(max_heartbeat_selectors=2)
    request = groups_pb2.HeartbeatRequest(
        client_id="10.0.0.5@1",
        consumer_group="GroupS",
        subscriptions=[
            groups_pb2.Subscription(topic=topic, expression=f"n = {i}", expression_type="SQL92")
            for i, topic in enumerate(("Orders", "Refunds", "Returns"))
        ],
        message_model=groups_pb2.MESSAGE_MODEL_CLUSTERING,
        consume_type=groups_pb2.CONSUME_TYPE_PUSH,
    )
    error = refused(stubs.groups.Heartbeat, request)
    assert error.code() == INVALID
    assert "3 different SQL92 selectors" in error.details()
    assert "--max-heartbeat-selectors" in error.details()
    del request.subscriptions[2]
    stubs.groups.Heartbeat(request)  # two: within the limit


def test_heartbeats_create_retry_topics_only_for_groups_that_consume_here(start):
    _, stubs = start()
    for i in range(20):
        heartbeat(stubs, f"Ghost{i}", "NoSuchTopic")
    heartbeat(stubs, "Real", "Orders")
    retry_topics = [
        t.topic
        for t in stubs.admin.ListTopics(
            admin_pb2.ListTopicsRequest(include_system_topics=True)
        ).topics
        if t.topic.startswith("%RETRY%")
    ]
    assert retry_topics == ["%RETRY%Real"]


def test_retry_topics_made_by_heartbeats_are_capped(start):
    _, stubs = start(max_consumer_groups=3)
    for i in range(3):
        heartbeat(stubs, f"G{i}", "Orders")
    error = refused(heartbeat, stubs, "G3", "Orders")
    assert error.code() == EXHAUSTED
    assert "--max-consumer-groups" in error.details()
    heartbeat(stubs, "G1", "Orders")  # existing groups keep their heartbeats


def test_groups_a_broker_tracks_are_capped(start):
    _, stubs = start(max_consumer_groups=2)
    heartbeat(stubs, "G0", "NoSuchTopic")
    heartbeat(stubs, "G1", "NoSuchTopic")
    error = refused(heartbeat, stubs, "G2", "NoSuchTopic")
    assert error.code() == EXHAUSTED and "--max-consumer-groups" in error.details()
    watch = stubs.groups.WatchConsumerChanges(
        groups_pb2.WatchConsumerChangesRequest(consumer_group="G9"), timeout=5
    )
    error = refused(next, watch)
    assert error.code() == EXHAUSTED
    stubs.groups.Unregister(
        groups_pb2.UnregisterRequest(consumer_group="G0", client_id="10.0.0.5@1")
    )
    heartbeat(stubs, "G2", "NoSuchTopic")  # room again once a group is gone


def test_lists_in_requests_are_capped(start):
    _, stubs = start(max_request_items=10)
    queues = [queue("Orders", 0)] * 11
    requests = (
        (
            stubs.messaging.QueryOffsets,
            m.QueryOffsetsRequest(queries=[m.QueueOffsetsQuery(queue=q) for q in queues]),
        ),
        (
            stubs.groups.LockQueues,
            groups_pb2.LockQueuesRequest(consumer_group="G", client_id="c@1", queues=queues),
        ),
    )
    for call, request in requests:
        error = refused(call, request)
        assert error.code() == INVALID and "--max-request-items" in error.details()


def test_sends_over_the_in_flight_budget_wait_their_turn_and_all_succeed(start):
    one_mib = 1 << 20
    _, stubs = start(max_request_bytes=2 * one_mib, max_inflight_send_bytes=2 * one_mib)
    body = b"y" * (900 << 10)
    request = m.SendMessagesRequest(topic="Orders", messages=[m.Message(body=body)])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda _: stubs.messaging.SendMessages(request, timeout=30), range(16))
        )
    assert sorted(a.entries[0].queue_offset for a in answers) == list(range(16))
