"""The broker over real gRPC: messaging, offsets and admin services, long polling, error
codes, restarts and crashes of a broker process, and the command line.

Most tests run a broker inside the test process (fast); those about processes (restart,
SIGKILL, two brokers, flags) start ``python -m rmq_spark.broker`` subprocesses. Requests are
built with the generated stubs directly.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import threading
import time

import grpc
import pytest

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.record import offset_msg_id
from rmq_spark.codec.taghash import java_string_hash
from rmq_spark.errors import ERROR_CLASS_METADATA
from rmq_spark.offsets.json_codec import decode_offset_table
from rmq_spark.store.verify import verify_store
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2, offsets_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from rmq_spark.wire.pull import pull_index
from tests.support.broker_harness import CHANNEL_OPTIONS, Stubs, start_in_process_broker
from tests.support.eventually import eventually

Code = grpc.StatusCode
FOUND = m.PULL_STATUS_FOUND
NO_NEW_MSG = m.PULL_STATUS_NO_NEW_MSG
NO_MATCHED_MSG = m.PULL_STATUS_NO_MATCHED_MSG
OFFSET_ILLEGAL = m.PULL_STATUS_OFFSET_ILLEGAL
HEX32 = re.compile(r"[0-9A-F]{32}")


# -- helpers -------------------------------------------------------------------------------


def mq(topic: str, queue_id: int, broker_name: str = "") -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, broker_name=broker_name, queue_id=queue_id)


def create_topic(stubs, topic: str, queues: int = 4, **fields) -> admin_pb2.TopicConfig:
    request = admin_pb2.CreateTopicRequest(
        topic=topic, read_queue_nums=queues, write_queue_nums=queues, **fields
    )
    return stubs.admin.CreateTopic(request).topic


def send(stubs, topic: str, *bodies: bytes, **fields) -> m.SendMessagesResponse:
    messages = [m.Message(body=body) for body in bodies]
    return stubs.messaging.SendMessages(
        m.SendMessagesRequest(topic=topic, messages=messages, **fields), timeout=10
    )


def pull(stubs, topic: str, queue_id: int, offset: int = 0, **fields) -> m.PullMessagesResponse:
    timeout = 10 + fields.get("suspend_timeout_ms", 0) / 1000
    request = m.PullMessagesRequest(queue=mq(topic, queue_id), queue_offset=offset, **fields)
    return stubs.messaging.PullMessages(request, timeout=timeout)


def rows(response: m.PullMessagesResponse) -> list[dict]:
    return decode_records(response.records, check_crc=True).to_pylist()


def queue_offsets(response: m.PullMessagesResponse) -> list[int]:
    """The queue offsets the answer's index gives for its records (checked against them)."""
    return pull_index(MessageQueue("any", "", 0), response)[1].tolist()


def expect_error(code: grpc.StatusCode, call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    error = info.value
    assert error.code() == code, f"expected {code}, got {error.code()}: {error.details()}"
    return error


class BackgroundPull(threading.Thread):
    """A pull running in a thread; ``finished_at`` is its monotonic end time."""

    def __init__(self, stubs, topic: str, queue_id: int, offset: int = 0, **fields) -> None:
        super().__init__(daemon=True)
        self.args = (stubs, topic, queue_id, offset)
        self.fields = fields
        self.response: m.PullMessagesResponse | None = None
        self.error: BaseException | None = None
        self.finished_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.response = pull(*self.args, **self.fields)
        except BaseException as exc:
            self.error = exc
        self.finished_at = time.monotonic()

    def result(self, timeout_s: float = 10) -> m.PullMessagesResponse:
        self.join(timeout_s)
        assert not self.is_alive(), "the pull did not return"
        if self.error is not None:
            raise self.error
        return self.response


@pytest.fixture
def local(in_process_broker, connect):
    """(broker, stubs) for an in-process broker."""
    return in_process_broker, connect(in_process_broker.endpoint)


# -- send and pull -------------------------------------------------------------------------


def test_send_then_pull_returns_exactly_what_was_sent(local):
    broker, stubs = local
    create_topic(stubs, "Orders")
    messages = [
        m.Message(
            body=b"first",
            tags="TagA",
            keys=["k1", "k2"],
            properties={"color": "red", "note": "ü ✓"},
            unique_key="MY-ID-1",
            flag=7,
            born_timestamp_ms=1_700_000_000_000,
        ),
        m.Message(body=b""),
        m.Message(body=bytes(range(256)) * 40, tags="TagB", keys=["solo"]),
    ]
    before_ms = time.time_ns() // 1_000_000
    sent = stubs.messaging.SendMessages(
        m.SendMessagesRequest(topic="Orders", queue_id=2, messages=messages)
    )

    assert sent.queue == mq("Orders", 2, "broker-t")
    assert [e.queue_id for e in sent.entries] == [2, 2, 2]
    assert [e.queue_offset for e in sent.entries] == [0, 1, 2]
    assert sent.entries[0].msg_id == "MY-ID-1"
    assert all(HEX32.fullmatch(e.msg_id) for e in sent.entries[1:])

    got = pull(stubs, "Orders", 2)
    assert (got.status, got.next_begin_offset, got.min_offset, got.max_offset) == (FOUND, 3, 0, 3)
    assert queue_offsets(got) == [0, 1, 2]
    assert sum(pull_index(MessageQueue("Orders", "", 2), got)[0]) == len(got.records)
    decoded = rows(got)
    assert [r["body"] for r in decoded] == [msg.body for msg in messages]
    assert [r["tags"] for r in decoded] == ["TagA", None, "TagB"]
    assert [r["keys"] for r in decoded] == ["k1 k2", None, "solo"]
    assert dict(decoded[0]["properties"]) == {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "MY-ID-1",
        "color": "red",
        "note": "ü ✓",
    }
    assert dict(decoded[1]["properties"]) == {"UNIQ_KEY": sent.entries[1].msg_id}
    assert [r["msgId"] for r in decoded] == [e.offset_msg_id for e in sent.entries]
    assert [r["flag"] for r in decoded] == [7, 0, 0]
    assert decoded[0]["bornTimestamp"] == 1_700_000_000_000
    assert decoded[1]["bornTimestamp"] >= before_ms  # 0 = the broker's receive time
    assert all(r["storeTimestamp"] == sent.store_timestamp_ms for r in decoded)
    assert decoded[0]["storeHost"] == broker.endpoint
    host, port = decoded[0]["bornHost"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0  # the sender's address, from the peer


def test_offset_message_ids_find_the_records(local):
    broker, stubs = local
    create_topic(stubs, "Lookup")
    sent = send(stubs, "Lookup", b"a", b"bb", b"ccc", queue_id=0)
    records = pull(stubs, "Lookup", 0).records
    physical = [r["commitLogOffset"] for r in rows(pull(stubs, "Lookup", 0))]

    assert [e.offset_msg_id for e in sent.entries] == [
        offset_msg_id(broker.broker.store_host, p) for p in physical
    ]
    by_id = stubs.messaging.ViewMessage(
        m.ViewMessageRequest(message=m.MessageRef(offset_msg_id=sent.entries[1].offset_msg_id))
    )
    by_offset = stubs.messaging.ViewMessage(
        m.ViewMessageRequest(message=m.MessageRef(physical_offset=physical[2]))
    )
    first_size = physical[1] - physical[0]
    assert by_id.record == records[first_size : first_size + len(by_id.record)]
    assert by_offset.record == records[-len(by_offset.record) :]
    assert rows(m.PullMessagesResponse(records=by_offset.record))[0]["body"] == b"ccc"


def test_broker_generated_message_ids_are_unique(local):
    _, stubs = local
    create_topic(stubs, "Ids")
    ids = [e.msg_id for _ in range(2) for e in send(stubs, "Ids", *[b"x"] * 300).entries]
    assert len(set(ids)) == 600
    assert all(HEX32.fullmatch(i) for i in ids)


def test_query_offsets_gives_min_max_and_offset_by_timestamp(local):
    _, stubs = local
    create_topic(stubs, "Times")
    stamps = []
    for body in (b"a", b"b", b"c"):
        stamps.append(send(stubs, "Times", body, queue_id=0).store_timestamp_ms)
        time.sleep(0.01)
    queries = [
        m.QueueOffsetsQuery(queue=mq("Times", 0), timestamp_ms=stamps[1]),
        m.QueueOffsetsQuery(queue=mq("Times", 0), timestamp_ms=stamps[2] + 60_000),
        m.QueueOffsetsQuery(queue=mq("Times", 1, "broker-t")),
    ]
    answer = stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=queries)).offsets
    assert [(a.min_offset, a.max_offset) for a in answer] == [(0, 3), (0, 3), (0, 0)]
    assert [a.timestamp_offset for a in answer[:2]] == [1, 3]
    assert not answer[2].HasField("timestamp_offset")
    assert answer[2].queue == mq("Times", 1, "broker-t")


def test_pull_past_the_end_is_offset_illegal(local):
    _, stubs = local
    create_topic(stubs, "Ends")
    send(stubs, "Ends", b"a", b"b", queue_id=3)
    got = pull(stubs, "Ends", 3, offset=10)  # nothing deleted: back to the min (RocketMQ)
    assert (got.status, got.next_begin_offset, got.max_offset) == (OFFSET_ILLEGAL, 0, 2)
    assert pull(stubs, "Ends", 3, offset=2).status == NO_NEW_MSG


def test_tag_filter_returns_matching_tags_and_moves_past_gaps(local):
    _, stubs = local
    create_topic(stubs, "Tagged")
    tags = ["TagA", "TagC", "TagB", "TagC", "TagA", "TagC", "TagC"]
    messages = [m.Message(body=f"m{i}".encode(), tags=t) for i, t in enumerate(tags)]
    stubs.messaging.SendMessages(
        m.SendMessagesRequest(topic="Tagged", queue_id=0, messages=messages)
    )

    got = pull(stubs, "Tagged", 0, subscription_expression="TagA || TagB")
    assert got.status == FOUND
    assert [r["tags"] for r in rows(got)] == ["TagA", "TagB", "TagA"]
    assert queue_offsets(got) == [0, 2, 4]
    assert got.next_begin_offset == 7  # the trailing TagC entries were scanned too

    limited = pull(stubs, "Tagged", 0, subscription_expression="TagA||TagB", max_messages=2)
    assert queue_offsets(limited) == [0, 2]
    assert limited.next_begin_offset == 3

    gap = pull(stubs, "Tagged", 0, 5, subscription_expression="TagA || TagB")
    assert (gap.status, gap.next_begin_offset, gap.records) == (NO_MATCHED_MSG, 7, b"")
    assert pull(stubs, "Tagged", 0, 5, subscription_expression="*").status == FOUND


def test_sharding_key_keeps_each_key_on_one_queue(local):
    _, stubs = local
    create_topic(stubs, "Sharded")
    placed = collections.defaultdict(set)
    keys = [f"order-{i}" for i in range(12)]
    for _ in range(2):
        for key in keys:
            placed[key].add(send(stubs, "Sharded", key.encode(), sharding_key=key).queue.queue_id)
    assert all(len(queues) == 1 for queues in placed.values())
    assert {key: queues.pop() for key, queues in placed.items()} == {
        key: abs(java_string_hash(key)) % 4 for key in keys
    }
    assert len({abs(java_string_hash(key)) % 4 for key in keys}) > 1


def test_round_robin_spreads_batches_over_the_write_queues(local):
    _, stubs = local
    create_topic(stubs, "Spread")
    counts = collections.Counter(send(stubs, "Spread", b"x").queue.queue_id for _ in range(8))
    assert counts == {0: 2, 1: 2, 2: 2, 3: 2}

    stubs.admin.UpdateTopic(admin_pb2.UpdateTopicRequest(topic="Spread", write_queue_nums=2))
    later = {send(stubs, "Spread", b"y").queue.queue_id for _ in range(6)}
    assert later == {0, 1}  # only write queues; queues 2 and 3 stay readable


def test_delayed_batch_arrives_after_its_delay(local):
    _, stubs = local
    create_topic(stubs, "Later")
    sent_at = time.monotonic()
    sent = send(stubs, "Later", b"d1", b"d2", queue_id=1, delay_level=1)  # 200 ms here
    assert [e.HasField("queue_offset") for e in sent.entries] == [False, False]
    assert [e.queue_id for e in sent.entries] == [1, 1]
    schedule_record = stubs.messaging.ViewMessage(
        m.ViewMessageRequest(message=m.MessageRef(offset_msg_id=sent.entries[0].offset_msg_id))
    ).record
    assert rows(m.PullMessagesResponse(records=schedule_record))[0]["body"] == b"d1"
    assert pull(stubs, "Later", 1).status == NO_NEW_MSG

    got = pull(stubs, "Later", 1, suspend_timeout_ms=5000)
    waited = time.monotonic() - sent_at
    assert got.status == FOUND
    assert [r["body"] for r in rows(got)] == [b"d1", b"d2"]
    assert 0.15 < waited < 3.0
    expect_error(Code.INVALID_ARGUMENT, send, stubs, "Later", b"x", delay_level=4)


def test_auto_create_topics_creates_on_first_send(in_process_broker_factory, connect):
    broker = in_process_broker_factory(auto_create_topics=True, default_topic_queues=2)
    stubs = connect(broker.endpoint)
    assert send(stubs, "Fresh", b"x").queue.topic == "Fresh"
    route = stubs.admin.GetTopicRoute(admin_pb2.GetTopicRouteRequest(topic="Fresh"))
    assert (route.topic.read_queue_nums, route.topic.write_queue_nums) == (2, 2)


# -- long polling --------------------------------------------------------------------------


def test_long_poll_returns_right_after_a_send(local):
    broker, stubs = local
    create_topic(stubs, "Live")
    held = BackgroundPull(stubs, "Live", 0, suspend_timeout_ms=5000)
    eventually(lambda: broker.broker.notifier.waiting() == 1, what="the pull to be held")
    sent_at = time.monotonic()
    send(stubs, "Live", b"wake up", queue_id=0)
    got = held.result()
    assert got.status == FOUND
    assert [r["body"] for r in rows(got)] == [b"wake up"]
    assert held.finished_at - sent_at < 1.0


def test_long_poll_without_messages_waits_for_the_suspend_time(local):
    _, stubs = local
    create_topic(stubs, "Quiet")
    send(stubs, "Quiet", b"other queue", queue_id=1)  # a write elsewhere must not wake it
    started = time.monotonic()
    got = pull(stubs, "Quiet", 0, suspend_timeout_ms=800)
    waited = time.monotonic() - started
    assert (got.status, got.next_begin_offset) == (NO_NEW_MSG, 0)
    assert 0.75 < waited < 2.0


def test_long_poll_keeps_waiting_through_messages_its_filter_rejects(local):
    broker, stubs = local
    create_topic(stubs, "Picky")
    held = BackgroundPull(
        stubs, "Picky", 0, suspend_timeout_ms=5000, subscription_expression="TagA"
    )
    eventually(lambda: broker.broker.notifier.waiting() == 1, what="the pull to be held")
    tagged = [m.Message(body=b"b", tags="TagB")]
    stubs.messaging.SendMessages(m.SendMessagesRequest(topic="Picky", queue_id=0, messages=tagged))
    time.sleep(0.3)
    assert held.is_alive()
    wanted = [m.Message(body=b"a", tags="TagA")]
    stubs.messaging.SendMessages(m.SendMessagesRequest(topic="Picky", queue_id=0, messages=wanted))
    got = held.result()
    assert (got.status, queue_offsets(got), got.next_begin_offset) == (FOUND, [1], 2)


def test_long_poll_suspend_is_capped_by_the_broker(in_process_broker_factory, connect):
    broker = in_process_broker_factory(max_suspend_timeout_ms=300)
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Capped")
    started = time.monotonic()
    assert pull(stubs, "Capped", 0, suspend_timeout_ms=60_000).status == NO_NEW_MSG
    assert time.monotonic() - started < 2.0


def test_cancelled_long_poll_frees_its_server_thread(local):
    broker, stubs = local
    create_topic(stubs, "Cancel")
    request = m.PullMessagesRequest(queue=mq("Cancel", 0), suspend_timeout_ms=20_000)
    future = stubs.messaging.PullMessages.future(request, timeout=30)
    eventually(lambda: broker.broker.notifier.waiting() == 1, what="the pull to be held")
    future.cancel()
    eventually(
        lambda: broker.broker.notifier.waiting() == 0, what="the pull to be let go", timeout=1.0
    )


def test_stopping_the_broker_releases_held_pulls(in_process_broker_factory, connect):
    broker = in_process_broker_factory()
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Shutdown")
    held = BackgroundPull(stubs, "Shutdown", 0, suspend_timeout_ms=20_000)
    eventually(lambda: broker.broker.notifier.waiting() == 1, what="the pull to be held")
    started = time.monotonic()
    broker.stop()
    assert held.result(timeout_s=5).status == NO_NEW_MSG
    assert time.monotonic() - started < 2.0


def test_deleting_a_topic_ends_its_held_pulls(local):
    broker, stubs = local
    create_topic(stubs, "Doomed")
    held = BackgroundPull(stubs, "Doomed", 0, suspend_timeout_ms=20_000)
    eventually(lambda: broker.broker.notifier.waiting() == 1, what="the pull to be held")
    stubs.admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic="Doomed"))
    with pytest.raises(grpc.RpcError) as info:
        held.result(timeout_s=2)
    assert info.value.code() == Code.NOT_FOUND


# -- consumer offsets ----------------------------------------------------------------------


def update_offsets(stubs, group: str, *offsets, increase_only: bool = True):
    """``offsets``: (queue, offset) pairs."""
    items = [offsets_pb2.QueueOffset(queue=q, offset=o) for q, o in offsets]
    request = offsets_pb2.UpdateConsumerOffsetsRequest(
        consumer_group=group, offsets=items, increase_only=increase_only
    )
    return stubs.offsets.UpdateConsumerOffsets(request).results


def persisted_offsets(store_dir) -> dict:
    """The offsets in the store's ``config/consumerOffset.json`` ({} while it is not there)."""
    path = store_dir / "config" / "consumerOffset.json"
    return decode_offset_table(path.read_text()) if path.exists() else {}


def query_offsets(stubs, group: str, *queues) -> list:
    request = offsets_pb2.QueryConsumerOffsetsRequest(consumer_group=group, queues=queues)
    return list(stubs.offsets.QueryConsumerOffsets(request).offsets)


def test_offsets_never_committed_are_absent_not_zero(local):
    _, stubs = local
    create_topic(stubs, "Off")
    q0, q1 = mq("Off", 0), mq("Off", 1)
    assert [a.HasField("offset") for a in query_offsets(stubs, "G", q0, q1)] == [False, False]

    results = update_offsets(stubs, "G", (q0, 0), (q1, 5))
    assert [(r.offset, r.updated) for r in results] == [(0, True), (5, True)]
    answers = query_offsets(stubs, "G", q0, q1)
    assert [(a.HasField("offset"), a.offset) for a in answers] == [(True, 0), (True, 5)]
    assert answers[0].queue == mq("Off", 0, "broker-t")

    lower = update_offsets(stubs, "G", (q1, 3))
    assert [(r.offset, r.updated) for r in lower] == [(5, False)]
    reset = update_offsets(stubs, "G", (q1, 3), increase_only=False)
    assert [(r.offset, r.updated) for r in reset] == [(3, True)]

    everything = query_offsets(stubs, "G")
    assert [(a.queue.topic, a.queue.queue_id, a.offset) for a in everything] == [
        ("Off", 0, 0),
        ("Off", 1, 3),
    ]


def test_offset_updates_are_all_or_nothing(local):
    _, stubs = local
    create_topic(stubs, "Atomic")
    q0, q1 = mq("Atomic", 0), mq("Atomic", 1)
    bad_items = [
        (offsets_pb2.QueueOffset(queue=q0, offset=10), None),
        (offsets_pb2.QueueOffset(queue=q1, offset=-1), Code.INVALID_ARGUMENT),
        (offsets_pb2.QueueOffset(queue=q0, offset=11), Code.INVALID_ARGUMENT),  # q0 twice
        (offsets_pb2.QueueOffset(queue=mq("Atomic", 9), offset=1), Code.NOT_FOUND),
        (offsets_pb2.QueueOffset(queue=mq("Nope", 0), offset=1), Code.NOT_FOUND),
        (offsets_pb2.QueueOffset(queue=mq("Atomic", 0, "broker-x"), offset=1), Code.NOT_FOUND),
    ]
    first = bad_items[0][0]
    for bad, code in bad_items[1:]:
        request = offsets_pb2.UpdateConsumerOffsetsRequest(consumer_group="G", offsets=[first, bad])
        error = expect_error(code, stubs.offsets.UpdateConsumerOffsets, request)
        assert "offsets[1]" in error.details()
    assert not query_offsets(stubs, "G", q0)[0].HasField("offset")
    empty = offsets_pb2.UpdateConsumerOffsetsRequest(consumer_group="G")
    expect_error(Code.INVALID_ARGUMENT, stubs.offsets.UpdateConsumerOffsets, empty)


def test_pull_can_commit_an_offset_increase_only(local):
    _, stubs = local
    create_topic(stubs, "PullCommit")
    send(stubs, "PullCommit", b"a", b"b", b"c", queue_id=0)
    pull(stubs, "PullCommit", 0, offset=2, consumer_group="G", commit_offset=2)
    pull(stubs, "PullCommit", 0, offset=2, consumer_group="G", commit_offset=1)
    assert query_offsets(stubs, "G", mq("PullCommit", 0))[0].offset == 2
    error = expect_error(Code.INVALID_ARGUMENT, pull, stubs, "PullCommit", 0, commit_offset=1)
    assert "consumer_group" in error.details()


def test_consumer_progress_reports_lag_per_queue(local):
    _, stubs = local
    create_topic(stubs, "Lag")
    send(stubs, "Lag", *[b"x"] * 5, queue_id=0)
    send(stubs, "Lag", *[b"y"] * 2, queue_id=1)
    update_offsets(stubs, "G", (mq("Lag", 0), 3))

    for topic in ("Lag", ""):
        progress = stubs.offsets.GetConsumerProgress(
            offsets_pb2.GetConsumerProgressRequest(consumer_group="G", topic=topic)
        )
        table = [
            (
                q.queue.queue_id,
                q.broker_min_offset,
                q.broker_max_offset,
                q.committed_offset if q.HasField("committed_offset") else None,
                q.lag,
            )
            for q in progress.queues
        ]
        assert table == [
            (0, 0, 5, 3, 2),
            (1, 0, 2, None, 2),
            (2, 0, 0, None, 0),
            (3, 0, 0, None, 0),
        ]
        assert progress.total_lag == 4
    unknown = offsets_pb2.GetConsumerProgressRequest(consumer_group="G", topic="Missing")
    expect_error(Code.NOT_FOUND, stubs.offsets.GetConsumerProgress, unknown)


# -- admin ---------------------------------------------------------------------------------


def test_topic_lifecycle(local):
    _, stubs = local
    admin = stubs.admin
    created = create_topic(stubs, "Life", 4, perm=common_pb2.PERMISSION_READ_WRITE)
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (4, 4, 6)
    assert create_topic(stubs, "Life", 4) == created  # the same again is fine
    expect_error(Code.ALREADY_EXISTS, create_topic, stubs, "Life", 8)
    defaults = admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="Defaults")).topic
    assert (defaults.read_queue_nums, defaults.write_queue_nums, defaults.perm) == (4, 4, 6)

    updated = admin.UpdateTopic(admin_pb2.UpdateTopicRequest(topic="Life", write_queue_nums=2))
    assert (updated.topic.read_queue_nums, updated.topic.write_queue_nums) == (4, 2)
    unknown = admin_pb2.UpdateTopicRequest(topic="Ghost", perm=common_pb2.PERMISSION_READ)
    expect_error(Code.NOT_FOUND, admin.UpdateTopic, unknown)

    listed = admin.ListTopics(admin_pb2.ListTopicsRequest())
    assert listed.broker_name == "broker-t"
    assert [t.topic for t in listed.topics] == ["Defaults", "Life"]
    with_system = admin.ListTopics(admin_pb2.ListTopicsRequest(include_system_topics=True))
    assert len(with_system.topics) > len(listed.topics)  # the delay scheduler's topic

    update_offsets(stubs, "G", (mq("Life", 0), 7))
    admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic="Life"))
    expect_error(Code.NOT_FOUND, admin.GetTopicRoute, admin_pb2.GetTopicRouteRequest(topic="Life"))
    expect_error(Code.NOT_FOUND, admin.DeleteTopic, admin_pb2.DeleteTopicRequest(topic="Life"))
    create_topic(stubs, "Life", 4)
    assert not query_offsets(stubs, "G", mq("Life", 0))[0].HasField("offset")


@pytest.mark.parametrize(
    ("request_fields", "code"),
    [
        ({"topic": "%RETRY%mine"}, Code.INVALID_ARGUMENT),
        ({"topic": "bad name"}, Code.INVALID_ARGUMENT),
        ({"topic": "T", "read_queue_nums": 2000}, Code.INVALID_ARGUMENT),
        ({"topic": "T", "write_queue_nums": -1}, Code.INVALID_ARGUMENT),
        ({"topic": "T", "perm": 3}, Code.INVALID_ARGUMENT),
    ],
)
def test_create_topic_refuses_bad_settings(local, request_fields, code):
    _, stubs = local
    expect_error(code, stubs.admin.CreateTopic, admin_pb2.CreateTopicRequest(**request_fields))


def route_perms(stubs, topic: str) -> list[int]:
    route = stubs.admin.GetTopicRoute(admin_pb2.GetTopicRouteRequest(topic=topic))
    return [q.perm for q in route.queues]


def test_route_combines_queue_counts_topic_and_broker_permission(local):
    broker, stubs = local
    stubs.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(topic="Shrinking", read_queue_nums=4, write_queue_nums=2)
    )
    route = stubs.admin.GetTopicRoute(admin_pb2.GetTopicRouteRequest(topic="Shrinking"))
    assert (route.broker_name, route.endpoint, route.broker_perm) == (
        "broker-t",
        broker.endpoint,
        6,
    )
    assert [q.queue for q in route.queues] == [mq("Shrinking", i, "broker-t") for i in range(4)]
    assert route_perms(stubs, "Shrinking") == [6, 6, 4, 4]
    for perm, expected in ((4, [4, 4, 4, 4]), (2, [2, 2, 0, 0])):
        stubs.admin.UpdateTopic(admin_pb2.UpdateTopicRequest(topic="Shrinking", perm=perm))
        assert route_perms(stubs, "Shrinking") == expected


def test_broker_info_reports_limits_and_store(in_process_broker_factory, connect):
    broker = in_process_broker_factory(flush_mode="SYNC", max_message_bytes=1 << 20)
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Info")
    send(stubs, "Info", b"hello", queue_id=0)
    info = stubs.admin.GetBrokerInfo(admin_pb2.GetBrokerInfoRequest())
    assert (info.broker_name, info.endpoint, info.store_host) == (
        "broker-t",
        broker.endpoint,
        broker.endpoint,
    )
    assert info.version and info.flush_mode == admin_pb2.FLUSH_MODE_SYNC
    assert info.limits.max_message_bytes == 1 << 20
    assert info.limits.max_pull_messages == 65_536
    assert info.store_stats.commitlog_max_offset > 0
    assert info.store_stats.flushed_offset == info.store_stats.commitlog_max_offset
    assert info.start_timestamp_ms <= info.now_timestamp_ms


# -- error codes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One broker for the error table, with small limits and topics of every permission."""
    broker = start_in_process_broker(
        tmp_path_factory.mktemp("errors"), max_message_bytes=64 << 10, max_request_bytes=1 << 20
    )
    channel = grpc.insecure_channel(broker.endpoint, options=CHANNEL_OPTIONS)
    stubs = Stubs(channel)
    create_topic(stubs, "RW")
    create_topic(stubs, "ReadOnly", perm=common_pb2.PERMISSION_READ)
    create_topic(stubs, "WriteOnly", perm=common_pb2.PERMISSION_WRITE)
    send(stubs, "RW", b"x", queue_id=0)
    yield broker, stubs
    channel.close()
    broker.stop()


def _send(**fields):
    fields.setdefault("topic", "RW")
    fields.setdefault("messages", [m.Message(body=b"x")])
    return ("SendMessages", m.SendMessagesRequest(**fields))


def _pull(**fields):
    fields.setdefault("queue", mq("RW", 0))
    return ("PullMessages", m.PullMessagesRequest(**fields))


def _view(**ref):
    return ("ViewMessage", m.ViewMessageRequest(message=m.MessageRef(**ref)))


ERROR_CASES = {
    "send to unknown topic": (_send(topic="Nope"), Code.NOT_FOUND, "Nope"),
    "send to invalid topic name": (_send(topic="a b"), Code.INVALID_ARGUMENT, "a b"),
    "send to too long topic": (_send(topic="t" * 128), Code.INVALID_ARGUMENT, "127"),
    "send to system topic": (_send(topic="%DLQ%G"), Code.INVALID_ARGUMENT, "reserved"),
    "send to the schedule topic": (
        _send(topic="SCHEDULE_TOPIC_XXXX"),
        Code.INVALID_ARGUMENT,
        "delay_level",
    ),
    "send empty batch": (_send(messages=[]), Code.INVALID_ARGUMENT, "messages"),
    "send oversized body": (
        _send(messages=[m.Message(body=b"x" * ((64 << 10) + 1))]),
        Code.INVALID_ARGUMENT,
        "limit",
    ),
    "send over the gRPC limit": (
        _send(messages=[m.Message(body=b"x" * (2 << 20))]),
        Code.RESOURCE_EXHAUSTED,
        "",
    ),
    "send to read-only topic": (_send(topic="ReadOnly"), Code.PERMISSION_DENIED, "writable"),
    "send to queue beyond write queues": (_send(queue_id=4), Code.INVALID_ARGUMENT, "queue_id"),
    "send to negative queue": (_send(queue_id=-1), Code.INVALID_ARGUMENT, "queue_id"),
    "send with empty sharding key": (_send(sharding_key=""), Code.INVALID_ARGUMENT, "sharding"),
    "send reserved property": (
        _send(messages=[m.Message(body=b"x", properties={"UNIQ_KEY": "u"})]),
        Code.INVALID_ARGUMENT,
        "UNIQ_KEY",
    ),
    "send property with separator": (
        _send(messages=[m.Message(body=b"x", properties={"a": "b\x01c"})]),
        Code.INVALID_ARGUMENT,
        "separator",
    ),
    "send key with space": (
        _send(messages=[m.Message(body=b"x", keys=["a b"])]),
        Code.INVALID_ARGUMENT,
        "space",
    ),
    "send negative delay level": (_send(delay_level=-1), Code.INVALID_ARGUMENT, "delay_level"),
    "send negative born time": (
        _send(messages=[m.Message(body=b"x", born_timestamp_ms=-5)]),
        Code.INVALID_ARGUMENT,
        "born_timestamp_ms",
    ),
    "pull unknown topic": (_pull(queue=mq("Nope", 0)), Code.NOT_FOUND, "Nope"),
    "pull invalid topic": (_pull(queue=mq("", 0)), Code.INVALID_ARGUMENT, "topic"),
    "pull write-only topic": (_pull(queue=mq("WriteOnly", 0)), Code.PERMISSION_DENIED, "readable"),
    "pull queue beyond read queues": (_pull(queue=mq("RW", 4)), Code.NOT_FOUND, "queue 4"),
    "pull negative queue": (_pull(queue=mq("RW", -3)), Code.INVALID_ARGUMENT, "queue_id"),
    "pull from another broker's queue": (
        _pull(queue=mq("RW", 0, "broker-z")),
        Code.NOT_FOUND,
        "broker-z",
    ),
    "pull negative offset": (_pull(queue_offset=-1), Code.INVALID_ARGUMENT, "queue_offset"),
    "pull negative max messages": (_pull(max_messages=-1), Code.INVALID_ARGUMENT, "max_messages"),
    "pull negative max bytes": (_pull(max_bytes=-1), Code.INVALID_ARGUMENT, "max_bytes"),
    "pull negative suspend": (
        _pull(suspend_timeout_ms=-1),
        Code.INVALID_ARGUMENT,
        "suspend_timeout_ms",
    ),
    "pull bad subscription": (
        _pull(subscription_expression="TagA || || TagB"),
        Code.INVALID_ARGUMENT,
        "subscription",
    ),
    "pull invalid group": (_pull(consumer_group="g g"), Code.INVALID_ARGUMENT, "group"),
    "query no queues": (("QueryOffsets", m.QueryOffsetsRequest()), Code.INVALID_ARGUMENT, ""),
    "query unknown queue": (
        (
            "QueryOffsets",
            m.QueryOffsetsRequest(
                queries=[
                    m.QueueOffsetsQuery(queue=mq("RW", 0)),
                    m.QueueOffsetsQuery(queue=mq("RW", 99)),
                ]
            ),
        ),
        Code.NOT_FOUND,
        "queries[1]",
    ),
    "view nothing": (_view(), Code.INVALID_ARGUMENT, "offset_msg_id"),
    "view another store host": (
        _view(offset_msg_id=offset_msg_id("10.1.2.3:10911", 0)),
        Code.NOT_FOUND,
        "10.1.2.3:10911",
    ),
    "view malformed id": (_view(offset_msg_id="XYZ"), Code.INVALID_ARGUMENT, "XYZ"),
    "view inside a record": (_view(physical_offset=3), Code.NOT_FOUND, "3"),
    "view past the end": (_view(physical_offset=1 << 40), Code.NOT_FOUND, ""),
    "view negative offset": (_view(physical_offset=-1), Code.INVALID_ARGUMENT, "physical_offset"),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_codes(shared, case):
    _, stubs = shared
    (method, request), code, fragment = ERROR_CASES[case]
    error = expect_error(code, getattr(stubs.messaging, method), request, timeout=10)
    assert fragment in error.details()
    if code != Code.RESOURCE_EXHAUSTED:  # refused by gRPC itself, before the servicer
        metadata = dict(error.trailing_metadata())
        assert metadata[ERROR_CLASS_METADATA].endswith("Error")


def test_the_broker_answers_normally_after_errors(shared):
    _, stubs = shared
    assert send(stubs, "RW", b"fine", queue_id=1).entries[0].queue_offset == 0
    assert pull(stubs, "RW", 1).status == FOUND


# -- broker processes ----------------------------------------------------------------------


def test_offsets_and_messages_survive_a_clean_restart(broker_factory, connect):
    broker = broker_factory("broker-a")
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Durable")
    send(stubs, "Durable", *[f"m{i}".encode() for i in range(10)], queue_id=0)
    update_offsets(stubs, "G", (mq("Durable", 0), 4), (mq("Durable", 1), 0))
    assert broker.stop() == 0

    broker.restart()
    stubs = connect(broker.endpoint)
    answers = query_offsets(stubs, "G", mq("Durable", 0), mq("Durable", 1), mq("Durable", 2))
    assert [a.offset if a.HasField("offset") else None for a in answers] == [4, 0, None]
    got = pull(stubs, "Durable", 0, offset=4)
    assert [r["body"] for r in rows(got)] == [f"m{i}".encode() for i in range(4, 10)]
    assert broker.stop() == 0
    assert verify_store(broker.store_dir).ok


def test_acknowledged_messages_survive_sigkill_in_sync_mode(broker_factory, connect):
    broker = broker_factory("broker-s", "--flush", "sync", "--offsets-persist-interval-ms", "50")
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Crash", 2)
    acked = collections.defaultdict(list)
    for i in range(40):
        bodies = [f"batch{i}-{j}".encode() for j in range(3)]
        queue_id = send(stubs, "Crash", *bodies).queue.queue_id
        acked[queue_id].extend(bodies)
    update_offsets(stubs, "G", (mq("Crash", 0), 5))
    eventually(
        lambda: persisted_offsets(broker.store_dir).get(("Crash", "G")) == {0: 5},
        what="the commit to reach consumerOffset.json",
    )
    broker.kill()

    broker.restart()
    stubs = connect(broker.endpoint)
    for queue_id, bodies in acked.items():
        got = pull(stubs, "Crash", queue_id, max_messages=1000)
        assert [r["body"] for r in rows(got)] == bodies
    assert query_offsets(stubs, "G", mq("Crash", 0))[0].offset == 5
    assert broker.stop() == 0
    assert verify_store(broker.store_dir).ok


def test_two_brokers_side_by_side_answer_for_themselves(broker_factory, connect):
    brokers = [broker_factory("broker-a"), broker_factory("broker-b")]
    for broker in brokers:
        stubs = connect(broker.endpoint)
        create_topic(stubs, "Shared", 2)
        route = stubs.admin.GetTopicRoute(admin_pb2.GetTopicRouteRequest(topic="Shared"))
        assert (route.broker_name, route.endpoint) == (broker.name, broker.endpoint)
        assert {q.queue.broker_name for q in route.queues} == {broker.name}
        other = "broker-b" if broker.name == "broker-a" else "broker-a"
        request = m.PullMessagesRequest(queue=mq("Shared", 0, other))
        error = expect_error(Code.NOT_FOUND, stubs.messaging.PullMessages, request)
        assert other in error.details() and broker.name in error.details()


def test_read_only_broker_refuses_writes_but_serves_reads(broker_factory, connect):
    broker = broker_factory("broker-r", "--broker-perm", "4")
    stubs = connect(broker.endpoint)
    create_topic(stubs, "Frozen", 2)
    error = expect_error(Code.PERMISSION_DENIED, send, stubs, "Frozen", b"x")
    assert "broker-r" in error.details()
    assert pull(stubs, "Frozen", 0).status == NO_NEW_MSG
    assert route_perms(stubs, "Frozen") == [4, 4]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rmq_spark.broker", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--broker-perm", "5"], "--broker-perm"),
        (["--max-message-bytes", "lots"], "size"),
        (["--max-message-bytes", "40MiB"], "max_response_bytes"),
        (["--port", "70000"], "port"),
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, flags, fragment):
    # free ports unless the case names one: another broker on 9876 adds a line of its own
    ports = ["--port", "0", "--remoting-port", "0"]
    done = run_cli("--store", str(tmp_path / "store"), *ports, *flags)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], done.stderr


def test_a_taken_port_exits_1_with_one_line(broker_factory, tmp_path):
    running = broker_factory("broker-a")
    done = run_cli("--store", str(tmp_path / "other"), "--port", str(running.port))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert str(running.port) in done.stderr.strip().splitlines()[-1]


def test_query_offsets_measures_a_range_and_a_byte_budget(local):
    _, stubs = local
    create_topic(stubs, "Sized")
    bodies = [b"a" * 100, b"b" * 1000, b"c" * 100, b"d" * 100]
    for body in bodies:
        send(stubs, "Sized", body, queue_id=0)
    query = m.QueueOffsetsQuery(queue=mq("Sized", 0), size_from_offset=1, size_budget_bytes=10)
    answer = stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=[query])).offsets[0]
    assert answer.budget_end_offset == 2  # the 1000-byte message alone, for progress
    whole = m.QueueOffsetsQuery(queue=mq("Sized", 0), size_from_offset=0, size_to_offset=3)
    answer = stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=[whole])).offsets[0]
    headers = answer.size_bytes - 1200  # every record: its body, plus the same header
    assert headers > 0 and headers % 3 == 0 and not answer.size_estimated
    per_record = headers // 3
    fits = m.QueueOffsetsQuery(
        queue=mq("Sized", 0), size_from_offset=2, size_budget_bytes=2 * (100 + per_record)
    )
    answer = stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=[fits])).offsets[0]
    assert answer.budget_end_offset == 4


def test_the_broker_refuses_empty_property_values_in_rows_and_columns(local):
    from rmq_spark.client.message import Message, encode_columns

    _, stubs = local
    create_topic(stubs, "NoEmpty")
    row = m.Message(body=b"x", properties={"region": ""})
    with pytest.raises(grpc.RpcError) as info:
        stubs.messaging.SendMessages(m.SendMessagesRequest(topic="NoEmpty", messages=[row]))
    assert info.value.code() == Code.INVALID_ARGUMENT
    assert "property 'region' has an empty value" in info.value.details()
    # A columnar sender that skips the client's check: the broker refuses it too.
    messages = [Message(b"x", properties={"region": "eu"}) for _ in range(60)]
    (chunk,) = encode_columns(messages, now_ms=1, max_bytes=1 << 20)
    columns = chunk.columns
    # The same length, so the column sizes still add up: a property "regioneu" with no value.
    columns.properties = columns.properties.replace(b"region\x01eu\x02", b"regioneu\x01\x02")
    request = m.SendMessagesRequest(topic="NoEmpty", columns=columns)
    with pytest.raises(grpc.RpcError) as info:
        stubs.messaging.SendMessages(request)
    assert info.value.code() == Code.INVALID_ARGUMENT
    assert "empty value" in info.value.details()
    query = m.QueueOffsetsQuery(queue=mq("NoEmpty", 0))
    assert (
        stubs.messaging.QueryOffsets(m.QueryOffsetsRequest(queries=[query])).offsets[0].max_offset
        == 0
    )
