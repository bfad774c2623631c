"""The asynchronous server: waiting calls hold no thread, so they cannot starve the others.

A broker with only two worker threads holds hundreds of long polls and watch streams while
sends, pulls and admin calls on other topics keep answering promptly; when the waiting calls
end (answered, cancelled or timed out) nothing of them is left on the broker.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2, groups_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from rmq_spark.wire.pull import pull_index
from tests.support.eventually import eventually

#: above gRPC's default of 1,000 calls waiting to be picked up by the server
HELD_PULLS = 1_500
WATCH_STREAMS = 60
QUEUES = 16
WORKERS = 2


def _queue(topic: str, queue_id: int) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, broker_name="broker-t", queue_id=queue_id)


def server_stats(stubs) -> admin_pb2.ServerStats:
    return stubs.admin.GetBrokerInfo(admin_pb2.GetBrokerInfoRequest()).server_stats


def waiting_calls(stubs) -> tuple[int, int]:
    """(held pulls, open watch streams) on the broker."""
    stats = server_stats(stubs)
    return stats.held_pulls, stats.watch_streams


def create(stubs, topic: str, queues: int) -> None:
    stubs.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(topic=topic, read_queue_nums=queues, write_queue_nums=queues)
    )


def send(stubs, topic: str, body: bytes, queue_id: int = 0) -> m.SendMessagesResponse:
    request = m.SendMessagesRequest(topic=topic, queue_id=queue_id, messages=[m.Message(body=body)])
    return stubs.messaging.SendMessages(request, timeout=10)


@pytest.fixture
def loaded(in_process_broker_factory, connect):
    """A two-worker broker holding HELD_PULLS long polls and WATCH_STREAMS watch streams."""
    broker = in_process_broker_factory(worker_threads=WORKERS)
    stubs = connect(broker.endpoint)
    create(stubs, "Idle", QUEUES)
    create(stubs, "Busy", 2)
    threads_before = threading.active_count()
    pulls = [
        stubs.messaging.PullMessages.future(
            m.PullMessagesRequest(
                queue=_queue("Idle", i % QUEUES),
                suspend_timeout_ms=20_000,
            ),
            timeout=30,
        )
        for i in range(HELD_PULLS)
    ]
    watches = [
        stubs.groups.WatchConsumerChanges(
            groups_pb2.WatchConsumerChangesRequest(consumer_group=f"G{i % 7}"), timeout=30
        )
        for i in range(WATCH_STREAMS)
    ]
    eventually(
        lambda: waiting_calls(stubs) == (HELD_PULLS, WATCH_STREAMS),
        what="every pull held and every watch stream open",
        timeout=20,
    )
    # Every thread of an in-process broker is visible here: the calls added none (a broker
    # with a thread per waiting call would have added one per call, or stalled).
    assert threading.active_count() - threads_before <= WORKERS
    yield broker, stubs, pulls, watches
    for call in [*pulls, *watches]:
        call.cancel()


def test_other_calls_answer_promptly_while_hundreds_wait(loaded):
    _, stubs, _, _ = loaded
    latencies = []
    for i in range(50):
        started = time.monotonic()
        answer = send(stubs, "Busy", b"order %d" % i, queue_id=i % 2)
        latencies.append(time.monotonic() - started)
        assert answer.entries[0].queue_offset == i // 2
    assert max(latencies) < 1.0, latencies
    got = stubs.messaging.PullMessages(
        m.PullMessagesRequest(queue=_queue("Busy", 0), max_messages=100), timeout=10
    )
    assert len(pull_index(MessageQueue("Busy", "", 0), got)[1]) == 25


def test_a_send_wakes_exactly_the_pulls_of_its_queue(loaded):
    _, stubs, pulls, _ = loaded
    send(stubs, "Idle", b"wake queue 3", queue_id=3)
    woken = [p for i, p in enumerate(pulls) if i % QUEUES == 3]
    for pull in woken:
        answer = pull.result(timeout=10)
        assert pull_index(MessageQueue("Idle", "", 3), answer)[1].tolist() == [0]
    assert not any(p.done() for i, p in enumerate(pulls) if i % QUEUES != 3)
    eventually(
        lambda: server_stats(stubs).held_pulls == HELD_PULLS - len(woken),
        what="the woken pulls to leave the broker",
    )


def test_watch_streams_get_membership_changes_while_pulls_are_held(loaded):
    _, stubs, _, watches = loaded
    stubs.groups.Heartbeat(
        groups_pb2.HeartbeatRequest(
            consumer_group="G3",
            client_id="10.0.0.9@1",
            message_model=groups_pb2.MESSAGE_MODEL_CLUSTERING,
            consume_type=groups_pb2.CONSUME_TYPE_PUSH,
        ),
        timeout=10,
    )
    for i, stream in enumerate(watches):
        if i % 7 == 3:
            assert list(next(stream).consumer_ids) == []  # the first event: as it was
            assert list(next(stream).consumer_ids) == ["10.0.0.9@1"]


def test_cancelled_calls_leave_nothing_behind(loaded):
    _, stubs, pulls, watches = loaded
    for call in [*pulls, *watches]:
        call.cancel()
    eventually(lambda: waiting_calls(stubs) == (0, 0), what="no call left waiting")
    with pytest.raises(grpc.FutureCancelledError):
        pulls[0].result()
