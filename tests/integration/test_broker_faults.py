"""A broker whose store fails a disk sync stops (fail-stop) and says why."""

from __future__ import annotations

import errno
import time

import grpc
import pytest

from rmq_spark.proto_gen.rocketlite.v1 import admin_pb2
from rmq_spark.proto_gen.rocketlite.v1 import messaging_pb2 as m
from rmq_spark.store import mapped_file


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
    deadline = time.monotonic() + 10
    while not broker.server.stopped:
        assert time.monotonic() < deadline, "the broker did not stop"
        time.sleep(0.05)
    failed = [r for r in caplog.records if "FAILED" in r.getMessage()]
    assert len(failed) == 1  # one clear line, not one per request
