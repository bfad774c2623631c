"""A broker whose store fails a disk sync stops (fail-stop) and says why; a restart keeps
every SYNC send acknowledged before the failure."""

from __future__ import annotations

import errno

import grpc
import pytest

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.store import mapped_file
from rmq_spark.store.faults import FSYNC_FAIL_AFTER
from rmq_spark.store.verify import verify_store
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from tests.support.eventually import eventually


def test_a_failed_sync_answers_unavailable_and_stops_the_broker(
    in_process_broker_factory, connect, monkeypatch, caplog
):
    broker = in_process_broker_factory(flush_mode="SYNC")
    stubs = connect(broker.endpoint)
    stubs.admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="T", read_queue_nums=1))

    def failing_fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(mapped_file.os, "fdatasync", failing_fdatasync)
    request = m.SendMessagesRequest(topic="T", messages=[m.Message(body=b"x")])
    with pytest.raises(grpc.RpcError) as info:
        stubs.messaging.SendMessages(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    # Whichever sync fails first (this send's, or a periodic checkpoint's), the answer
    # says the store failed.
    details = info.value.details()
    assert "not stored durably" in details or "stopped after a failed" in details
    eventually(lambda: broker.server.stopped, what="the broker to stop")
    failed = [r for r in caplog.records if "FAILED" in r.getMessage()]
    assert len(failed) == 1  # one clear line, not one per request


def bodies_stored(stubs, topic: str) -> list[bytes]:
    got, offset = [], 0
    queue = common_pb2.MessageQueue(topic=topic, queue_id=0)
    while True:
        request = m.PullMessagesRequest(queue=queue, queue_offset=offset, max_messages=64)
        answer = stubs.messaging.PullMessages(request, timeout=10)
        if answer.status != m.PULL_STATUS_FOUND:
            return got
        got += [r["body"] for r in decode_records(answer.records).to_pylist()]
        offset = answer.next_begin_offset


def test_a_broker_process_with_an_injected_sync_failure_stops_and_its_restart_keeps_acked_sends(
    broker_factory, connect
):
    broker = broker_factory("broker-f", "--flush", "SYNC")
    stubs = connect(broker.endpoint)
    stubs.admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="T", read_queue_nums=1))
    broker.stop()
    nth = 5
    broker.start(env={FSYNC_FAIL_AFTER: str(nth)})
    stubs = connect(broker.endpoint)
    acked: list[bytes] = []
    with pytest.raises(grpc.RpcError) as info:
        for i in range(nth + 1):  # one sync per SYNC send, each waited for
            body = f"m{i}".encode()
            request = m.SendMessagesRequest(topic="T", queue_id=0, messages=[m.Message(body=body)])
            stubs.messaging.SendMessages(request, timeout=10)
            acked.append(body)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert 1 <= len(acked) < nth  # the syncs before the failing one succeeded
    assert broker.wait_exit(30) == 1
    lines = broker.log_text().splitlines()
    failed = [line for line in lines if " CRITICAL " in line and " FAILED: " in line]
    assert len(failed) == 1 and f"injected by {FSYNC_FAIL_AFTER}" in failed[0]

    broker.start()  # without the fault: crash recovery
    stored = bodies_stored(connect(broker.endpoint), "T")
    assert stored[: len(acked)] == acked  # nothing acknowledged is lost
    assert len(stored) <= len(acked) + 1  # at most the send whose sync failed
    broker.stop()
    report = verify_store(broker.store_dir)
    assert report.ok, report.problems[:5]
