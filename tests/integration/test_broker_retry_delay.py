"""Delayed delivery and consumer send-back over real gRPC, with short delay levels.

Each test starts an in-process broker on port 0 with its own store directory. Delays are
checked on the records themselves: a delivered copy's store timestamp must be at least its
schedule record's store timestamp plus the level's delay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from rmq_spark.broker.delivery.schedule import SCHEDULE_TOPIC
from rmq_spark.codec.properties import (
    DELAY,
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
    UNIQ_KEY,
    decode_properties,
    encode_properties,
)
from rmq_spark.codec.record import Record, decode_record, iter_records
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, messaging_pb2
from tests.support.broker_harness import LocalBroker, Stubs, start_in_process_broker
from tests.support.eventually import eventually

LEVELS = "100ms 150ms 200ms 250ms 300ms"
LEVELS_MS = [100, 150, 200, 250, 300]
GROUP = "GroupA"
PULL_DEADLINE_S = 10


class Broker:
    """A started in-process broker and a messaging stub connected to it."""

    def __init__(self, local: LocalBroker, stubs: Stubs) -> None:
        self.local = local
        self.stub = stubs.messaging

    @property
    def store(self):
        return self.local.broker.store

    def send(self, topic: str, bodies: list[bytes], delay_level: int = 0, queue_id: int = 0):
        return self.stub.SendMessages(
            messaging_pb2.SendMessagesRequest(
                topic=topic,
                queue_id=queue_id,
                delay_level=delay_level,
                messages=[messaging_pb2.Message(body=b, tags="TagA") for b in bodies],
            )
        )

    def pull(self, topic: str, offset: int, suspend_ms: int = 0) -> list[Record]:
        answer = self.stub.PullMessages(
            messaging_pb2.PullMessagesRequest(
                queue=common_pb2.MessageQueue(topic=topic, queue_id=0),
                queue_offset=offset,
                max_messages=64,
                suspend_timeout_ms=suspend_ms,
            ),
            timeout=PULL_DEADLINE_S,
        )
        return list(iter_records(answer.records))

    def pull_until(self, topic: str, offset: int, count: int) -> list[Record]:
        """Long-poll until ``count`` records from ``offset`` arrived (fails after 5 s)."""
        records: list[Record] = []
        deadline = time.monotonic() + 5
        while len(records) < count and time.monotonic() < deadline:
            records += self.pull(topic, offset + len(records), suspend_ms=2000)
        assert len(records) == count, f"{len(records)} of {count} records reached {topic}"
        return records

    def view(self, offset_msg_id: str) -> Record:
        answer = self.stub.ViewMessage(
            messaging_pb2.ViewMessageRequest(
                message=messaging_pb2.MessageRef(offset_msg_id=offset_msg_id)
            )
        )
        return decode_record(answer.record)

    def send_back(self, record: Record, **fields):
        return self.stub.ConsumerSendBack(
            messaging_pb2.ConsumerSendBackRequest(
                consumer_group=GROUP,
                message=messaging_pb2.MessageRef(physical_offset=record.physical_offset),
                original_topic="TopicA",
                **fields,
            )
        )


@pytest.fixture
def start_broker(in_process_broker_factory, connect):
    """Start an in-process broker with the short LEVELS (BrokerConfig overrides as keywords)."""

    def start(**overrides) -> Broker:
        local = in_process_broker_factory(delay_levels=LEVELS, **overrides)
        return Broker(local, connect(local.endpoint))

    return start


@contextmanager
def broker_on(store_dir, connect) -> Iterator[Broker]:
    """A broker on ``store_dir`` for the length of the block (for restarts on one store)."""
    local = start_in_process_broker(store_dir, delay_levels=LEVELS)
    try:
        yield Broker(local, connect(local.endpoint))
    finally:
        local.stop()


def test_delayed_sends_arrive_after_their_delay_in_order(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    first_sent = time.monotonic()
    sent = [broker.send("TopicA", [b"a1", b"a2"], delay_level=3)]
    sent.append(broker.send("TopicA", [b"b1"], delay_level=3))
    sent.append(broker.send("TopicA", [b"c1", b"c2", b"c3"], delay_level=3))

    assert all(not e.HasField("queue_offset") for s in sent for e in s.entries)
    early = broker.pull("TopicA", 0)
    if time.monotonic() - first_sent < LEVELS_MS[2] / 1000:  # a busy machine may be slower
        assert early == []  # nothing before the delay
    records = broker.pull_until("TopicA", 0, 6)

    assert [r.body for r in records] == [b"a1", b"a2", b"b1", b"c1", b"c2", b"c3"]
    assert [r.queue_offset for r in records] == list(range(6))
    msg_ids = [e.msg_id for s in sent for e in s.entries]
    sent_at = [s.store_timestamp_ms for s in sent for _ in s.entries]
    for record, msg_id, stored in zip(records, msg_ids, sent_at, strict=True):
        props = decode_properties(record.properties)
        assert props[UNIQ_KEY] == msg_id
        assert props["TAGS"] == "TagA"
        assert DELAY not in props
        assert record.store_timestamp >= stored + LEVELS_MS[2]
    schedule_copy = broker.view(sent[0].entries[0].offset_msg_id)
    assert (schedule_copy.topic, schedule_copy.queue_id) == (SCHEDULE_TOPIC, 2)
    assert decode_properties(schedule_copy.properties)[DELAY] == "3"


def test_message_sent_back_three_times_retries_with_growing_delays(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    original = broker.send("TopicA", [b"order-42"]).entries[0]
    record = broker.pull("TopicA", 0)[0]
    retry_topic = f"%RETRY%{GROUP}"

    for attempt in (1, 2, 3):
        answer = broker.send_back(record)
        assert (answer.queue.topic, answer.queue.queue_id) == (retry_topic, 0)
        assert not answer.dead_lettered
        assert answer.reconsume_times == attempt
        assert answer.delay_level == 2 + attempt  # 3 + the record's reconsume count
        scheduled = broker.view(answer.offset_msg_id)
        assert (scheduled.topic, scheduled.queue_id) == (SCHEDULE_TOPIC, answer.delay_level - 1)
        assert broker.pull(retry_topic, attempt - 1) == []  # still waiting out its delay

        record = broker.pull_until(retry_topic, attempt - 1, 1)[0]

        delay_ms = LEVELS_MS[answer.delay_level - 1]
        assert record.store_timestamp >= scheduled.store_timestamp + delay_ms
        assert record.reconsume_times == attempt
        assert record.body == b"order-42"
        props = decode_properties(record.properties)
        assert props[UNIQ_KEY] == original.msg_id  # same message id across retries
        assert props[RETRY_TOPIC] == "TopicA"
        assert props[ORIGIN_MESSAGE_ID] == original.offset_msg_id
        assert DELAY not in props

    retry_config = broker.store.topics.get(retry_topic)
    assert (retry_config.write_queue_nums, retry_config.perm) == (1, 6)


def test_requested_level_above_the_highest_is_lowered_to_it(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    broker.send("TopicA", [b"x"])
    answer = broker.send_back(broker.pull("TopicA", 0)[0], delay_level=40)
    assert answer.delay_level == len(LEVELS_MS)


def test_message_goes_to_the_dlq_at_max_reconsume_times(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    msg_id = broker.send("TopicA", [b"poison"]).entries[0].msg_id
    record = broker.pull("TopicA", 0)[0]
    retry_topic, dlq_topic = f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"

    for attempt in (1, 2):
        assert not broker.send_back(record, max_reconsume_times=2).dead_lettered
        record = broker.pull_until(retry_topic, attempt - 1, 1)[0]
    answer = broker.send_back(record, max_reconsume_times=2)

    assert answer.dead_lettered
    assert (answer.queue.topic, answer.reconsume_times, answer.delay_level) == (dlq_topic, 3, 0)
    dead = broker.pull(dlq_topic, 0)  # at once: no delay for the DLQ
    assert [(r.body, r.reconsume_times) for r in dead] == [(b"poison", 3)]
    props = decode_properties(dead[0].properties)
    assert (props[UNIQ_KEY], props[RETRY_TOPIC]) == (msg_id, "TopicA")
    dlq_config = broker.store.topics.get(dlq_topic)
    assert (dlq_config.read_queue_nums, dlq_config.perm) == (1, 6)
    assert broker.pull(retry_topic, 2) == []


def test_dead_letter_now_skips_the_retries(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    broker.send("TopicA", [b"orderly-gave-up"])
    answer = broker.send_back(broker.pull("TopicA", 0)[0], dead_letter_now=True)
    assert answer.dead_lettered and answer.reconsume_times == 1
    assert [r.body for r in broker.pull(f"%DLQ%{GROUP}", 0)] == [b"orderly-gave-up"]


def test_the_consumers_count_of_local_retries_is_kept(start_broker):
    """A consumer that retried a message locally (orderly, or after a refused send-back)
    reports its count; the copy carries it and the delay and DLQ rules follow it."""
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    broker.send("TopicA", [b"a", b"b"])
    first, second = broker.pull("TopicA", 0)
    retried = broker.send_back(first, reconsume_times=1)
    assert (retried.dead_lettered, retried.reconsume_times, retried.delay_level) == (False, 2, 4)
    dead = broker.send_back(second, reconsume_times=2, max_reconsume_times=2)
    assert (dead.dead_lettered, dead.reconsume_times) == (True, 3)
    assert [r.reconsume_times for r in broker.pull(f"%DLQ%{GROUP}", 0)] == [3]


def test_send_back_to_a_read_only_broker_is_denied(start_broker):
    broker = start_broker(broker_perm=4)
    broker.store.topics.create("TopicA", 1)
    broker.store.append("TopicA", 0, [b"x"], [encode_properties({UNIQ_KEY: "ID1"})])
    record = broker.pull("TopicA", 0)[0]

    with pytest.raises(grpc.RpcError) as err:
        broker.send_back(record)

    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert broker.store.topics.find(f"%RETRY%{GROUP}") is None


def test_send_back_of_another_topics_record_is_refused(start_broker):
    """Access to a group and its topic must not reach records of other topics: a send-back
    naming TopicA may copy records of TopicA (or of the group's retry topic) only."""
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    broker.store.topics.create("Secret", 1)
    broker.send("Secret", [b"not yours"])
    with pytest.raises(grpc.RpcError) as err:
        broker.send_back(broker.pull("Secret", 0)[0])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "belongs to topic 'Secret'" in err.value.details()
    assert broker.store.topics.find(f"%RETRY%{GROUP}") is None
    # a retried copy (in the group's retry topic) may be sent back again under TopicA
    broker.send("TopicA", [b"mine"])
    broker.send_back(broker.pull("TopicA", 0)[0], dead_letter_now=False)
    retry = broker.pull_until(f"%RETRY%{GROUP}", 0, 1)[0]
    assert broker.send_back(retry).reconsume_times == 2


def test_send_back_of_an_unknown_record_is_not_found(start_broker):
    broker = start_broker()
    broker.store.topics.create("TopicA", 1)
    broker.send("TopicA", [b"x"])
    with pytest.raises(grpc.RpcError) as err:
        broker.stub.ConsumerSendBack(
            messaging_pb2.ConsumerSendBackRequest(
                consumer_group=GROUP, message=messaging_pb2.MessageRef(physical_offset=10**9)
            )
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_pending_delayed_messages_survive_a_restart_exactly_once(tmp_path, connect):
    store_dir = tmp_path / "restarted"
    with broker_on(store_dir, connect) as broker:
        broker.store.topics.create("TopicA", 1)
        broker.send("TopicA", [b"early-1", b"early-2"], delay_level=1)
        assert len(broker.pull_until("TopicA", 0, 2)) == 2
        broker.send("TopicA", [b"late-1", b"late-2"], delay_level=5)
        broker.send("TopicA", [b"late-3"], delay_level=5)
    # stopped before the late ones were due
    saved = json.loads((store_dir / "config" / "delayOffset.json").read_text())
    assert saved["offsetTable"]["1"] == 2 and saved["offsetTable"]["5"] == 0
    # they fall due while the broker is down: level 5 counts from the send, before the stop
    time.sleep(LEVELS_MS[4] / 1000)

    with broker_on(store_dir, connect) as broker:
        records = broker.pull_until("TopicA", 0, 5)
        bodies = [r.body for r in records]
        assert bodies == [b"early-1", b"early-2", b"late-1", b"late-2", b"late-3"]
        # settled: no delay level has anything left to deliver, so nothing more can come
        eventually(
            lambda: not any(broker.local.broker.delays.pending().values()),
            what="every delay level delivered",
        )
        assert broker.pull("TopicA", 5) == []  # no second delivery of either batch
    saved = json.loads((store_dir / "config" / "delayOffset.json").read_text())
    assert saved["offsetTable"]["5"] == 3
