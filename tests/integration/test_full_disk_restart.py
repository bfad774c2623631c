"""A broker restarted on a full disk starts read-only: it serves reads, refuses sends with a
message naming the space it needs, and takes sends again once housekeeping sees the space.

The disk is real: a 4 MiB tmpfs in a namespace of its own (``tests/support/small_fs.py``). A
tmpfs is also where reading a hole of a sparse memory-mapped file on a full disk kills the
process with SIGBUS.
"""

from __future__ import annotations

import grpc
import pytest

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually
from tests.support.small_fs import SmallFilesystem

FS_BYTES = 4 << 20
SEGMENT_BYTES = 256 << 10
CQ_ENTRIES = 64
NEEDED = SEGMENT_BYTES + CQ_ENTRIES * 20  # one segment and one consume-queue file


@pytest.fixture
def small_fs(tmp_path):
    fs = SmallFilesystem(tmp_path / "mnt", FS_BYTES)
    yield fs
    fs.close()


def mq(topic: str) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, queue_id=0)


def send(stubs, *bodies: bytes) -> m.SendMessagesResponse:
    request = m.SendMessagesRequest(
        topic="Orders", queue_id=0, messages=[m.Message(body=b) for b in bodies]
    )
    return stubs.messaging.SendMessages(request, timeout=10)


def bodies_stored(stubs) -> list[bytes]:
    got, offset = [], 0
    while True:
        request = m.PullMessagesRequest(queue=mq("Orders"), queue_offset=offset, max_messages=64)
        answer = stubs.messaging.PullMessages(request, timeout=10)
        if answer.status != m.PULL_STATUS_FOUND:
            return got
        got += [r["body"] for r in decode_records(answer.records).to_pylist()]
        offset = answer.next_begin_offset


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_broker_restarted_on_a_full_disk_serves_reads_and_refuses_sends_until_space_is_back(
    small_fs, tmp_path, connect, how
):
    flags = ["--commitlog-segment-bytes", str(SEGMENT_BYTES)]
    flags += ["--consumequeue-entries-per-file", str(CQ_ENTRIES), "--cleanup-interval-ms", "100"]
    broker = BrokerProcess("full", small_fs.path / "store", tmp_path / "full.log", flags)
    try:
        broker.start()
        stubs = connect(broker.endpoint)
        stubs.admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="Orders", read_queue_nums=1))
        before = [f"before-{i}".encode() * 10 for i in range(150)]  # rolls a consume queue
        for i in range(0, len(before), 50):
            send(stubs, *before[i : i + 50])
        broker.stop() if how == "stop" else broker.kill()

        small_fs.fill()
        broker.start()  # no longer: "[Errno 28] No space left on device", or SIGBUS
        stubs = connect(broker.endpoint)
        read_only = [line for line in broker.log_text().splitlines() if "READ-ONLY" in line]
        assert len(read_only) == 1 and f"needs {NEEDED:,} bytes free" in read_only[0]

        assert bodies_stored(stubs) == before  # reads go on
        offsets = stubs.messaging.QueryOffsets(
            m.QueryOffsetsRequest(queries=[m.QueueOffsetsQuery(queue=mq("Orders"))])
        )
        assert offsets.offsets[0].max_offset == len(before)
        with pytest.raises(grpc.RpcError) as refused:
            send(stubs, b"while-full")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.value.details()
        assert f"needs {NEEDED:,} bytes free" in details and str(small_fs.path) in details

        small_fs.free()

        def taken() -> bool:
            try:
                send(stubs, b"after")
            except grpc.RpcError as refused:
                raise AssertionError(f"still refused: {refused}") from None
            return True

        # housekeeping (every 100 ms here) turns writes back on
        eventually(taken, what="sends to be taken again after space came back")
        assert bodies_stored(stubs) == [*before, b"after"]
        broker.stop()
        broker.start()  # and a clean restart keeps it all
        assert bodies_stored(connect(broker.endpoint)) == [*before, b"after"]
    finally:
        broker.clean_up()
