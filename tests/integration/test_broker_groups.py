"""GroupService over real gRPC: membership, change notifications and queue locks.

Each test starts an in-process broker on port 0 with its own store directory and talks to
it through the generated stubs, as a client in another process would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, groups_pb2
from tests.support.eventually import eventually

CLUSTERING = groups_pb2.MESSAGE_MODEL_CLUSTERING
BROADCASTING = groups_pb2.MESSAGE_MODEL_BROADCASTING
PUSH = groups_pb2.CONSUME_TYPE_PUSH
STREAM_DEADLINE_S = 10


@pytest.fixture
def start_broker(in_process_broker_factory, connect):
    """Start an in-process broker (BrokerConfig overrides as keywords) -> (server, stub)."""

    def start(**overrides):
        local = in_process_broker_factory(**overrides)
        return local.server, connect(local.endpoint).groups

    return start


def heartbeat(stub, client_id: str, group: str = "GroupA", model: int = CLUSTERING):
    return stub.Heartbeat(
        groups_pb2.HeartbeatRequest(
            client_id=client_id,
            consumer_group=group,
            subscriptions=[groups_pb2.Subscription(topic="TopicA", expression="*")],
            message_model=model,
            consume_type=PUSH,
        )
    )


def watch(stub, group: str = "GroupA", client_id: str = "") -> Iterator:
    return stub.WatchConsumerChanges(
        groups_pb2.WatchConsumerChangesRequest(consumer_group=group, client_id=client_id),
        timeout=STREAM_DEADLINE_S,
    )


def members(event) -> list[str]:
    return list(event.consumer_ids)


def mq(topic: str, queue_id: int, broker_name: str = "") -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, broker_name=broker_name, queue_id=queue_id)


def test_clustering_heartbeat_creates_retry_topic_and_lists_sorted_members(start_broker):
    server, stub = start_broker(consumer_session_timeout_ms=30_000)
    server.broker.store.topics.create("TopicA", 4)  # the group consumes a topic of this broker
    first = heartbeat(stub, "10.0.0.9@2")
    second = heartbeat(stub, "10.0.0.1@7")

    assert first.session_timeout_ms == 30_000
    assert second.membership_version > first.membership_version
    answer = stub.GetConsumerList(groups_pb2.GetConsumerListRequest(consumer_group="GroupA"))
    assert list(answer.consumer_ids) == ["10.0.0.1@7", "10.0.0.9@2"]
    assert answer.membership_version == second.membership_version
    retry = server.broker.store.topics.find("%RETRY%GroupA")
    assert retry is not None and (retry.read_queue_nums, retry.write_queue_nums) == (1, 1)
    assert retry.perm == 6

    heartbeat(stub, "c1", group="GroupB", model=BROADCASTING)
    assert server.broker.store.topics.find("%RETRY%GroupB") is None
    empty = stub.GetConsumerList(groups_pb2.GetConsumerListRequest(consumer_group="Nobody"))
    assert list(empty.consumer_ids) == []


def test_bad_heartbeats_are_refused(start_broker):
    _, stub = start_broker()
    with pytest.raises(grpc.RpcError) as bad_group:
        heartbeat(stub, "c1", group="Group A")
    assert bad_group.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as no_model:
        stub.Heartbeat(groups_pb2.HeartbeatRequest(client_id="c1", consumer_group="GroupA"))
    assert no_model.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "message_model" in no_model.value.details()
    with pytest.raises(grpc.RpcError) as no_client:
        heartbeat(stub, "")
    assert no_client.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_watchers_see_joins_leaves_and_closed_streams(start_broker):
    _, stub = start_broker()
    observer = watch(stub)
    assert members(next(observer)) == []

    heartbeat(stub, "c1")
    assert members(next(observer)) == ["c1"]
    heartbeat(stub, "c2")
    assert members(next(observer)) == ["c1", "c2"]
    heartbeat(stub, "c3")
    joined_all = next(observer)
    assert members(joined_all) == ["c1", "c2", "c3"]

    # A clean shutdown: the member unregisters.
    stub.Unregister(groups_pb2.UnregisterRequest(client_id="c2", consumer_group="GroupA"))
    after_unregister = next(observer)
    assert members(after_unregister) == ["c1", "c3"]

    # A vanished client: its own watch stream ends, and the broker drops it at once.
    c3_stream = watch(stub, client_id="c3")
    assert members(next(c3_stream)) == ["c1", "c3"]
    c3_stream.cancel()
    after_close = next(observer)
    assert members(after_close) == ["c1"]
    assert joined_all.membership_version < after_unregister.membership_version
    assert after_unregister.membership_version < after_close.membership_version
    observer.cancel()


def test_silent_members_expire_and_watchers_are_told(start_broker):
    _, stub = start_broker(consumer_session_timeout_ms=500)
    observer = watch(stub)
    next(observer)
    heartbeat(stub, "c1")
    assert members(next(observer)) == ["c1"]
    joined = time.monotonic()

    assert members(next(observer)) == []  # no heartbeat for the session timeout
    assert 0.4 < time.monotonic() - joined < 3.0
    observer.cancel()


def test_queue_locks_conflict_and_are_taken_over_after_the_lease(start_broker):
    server, stub = start_broker()
    server.broker.store.topics.create("TopicA", 4)

    def lock(client_id: str, queue_ids: list[int], lease_ms: int = 0):
        return stub.LockQueues(
            groups_pb2.LockQueuesRequest(
                consumer_group="GroupA",
                client_id=client_id,
                queues=[mq("TopicA", q) for q in queue_ids],
                lease_ms=lease_ms,
            )
        )

    first = lock("c1", [1, 0], lease_ms=300)
    name = server.broker.name
    assert [(q.topic, q.broker_name, q.queue_id) for q in first.locked_queues] == [
        ("TopicA", name, 0),
        ("TopicA", name, 1),
    ]
    assert first.lease_ms == 300
    assert first.lease_expire_timestamp_ms >= time.time() * 1000
    conflict = lock("c2", [0, 1, 2])
    assert [q.queue_id for q in conflict.locked_queues] == [2]

    # c1 renews queue 0 with a long lease; queue 1's short lease runs out and c2 takes it.
    renewed = lock("c1", [0], lease_ms=30_000)
    assert [q.queue_id for q in renewed.locked_queues] == [0]
    assert renewed.lease_ms == 30_000
    # once the 300 ms lease ran out, c2 gets queue 1, and only it
    eventually(
        lambda: [q.queue_id for q in lock("c2", [0, 1]).locked_queues] == [1],
        what="c2 to take queue 1 once c1's short lease ran out",
    )

    # Unlocking someone else's queue does nothing; the holder's unlock frees it.
    def unlock(client_id: str, queue_ids: list[int]) -> None:
        stub.UnlockQueues(
            groups_pb2.UnlockQueuesRequest(
                consumer_group="GroupA",
                client_id=client_id,
                queues=[mq("TopicA", q) for q in queue_ids],
            )
        )

    unlock("c2", [0])
    assert [q.queue_id for q in lock("c2", [0]).locked_queues] == []
    unlock("c1", [0])
    assert [q.queue_id for q in lock("c2", [0]).locked_queues] == [0]


def test_lock_requests_naming_unknown_queues_fail_whole(start_broker):
    server, stub = start_broker()
    server.broker.store.topics.create("TopicA", 2)
    cases = [
        [mq("TopicA", 0), mq("Missing", 0)],
        [mq("TopicA", 0), mq("TopicA", 2)],
        [mq("TopicA", 0, broker_name="broker-z")],
    ]
    for queues in cases:
        request = groups_pb2.LockQueuesRequest(
            consumer_group="GroupA", client_id="c1", queues=queues
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.LockQueues(request)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "queues[" in err.value.details()
    assert server.broker.locks.holder("GroupA", ("TopicA", server.broker.name, 0)) is None


def test_broker_shutdown_ends_watch_streams_promptly(start_broker):
    server, stub = start_broker()
    heartbeat(stub, "c1")
    stream = watch(stub, client_id="c1")
    assert members(next(stream)) == ["c1"]

    started = time.monotonic()
    server.stop()

    assert list(stream) == []  # the stream ends cleanly instead of hanging to its deadline
    assert time.monotonic() - started < 1.5
