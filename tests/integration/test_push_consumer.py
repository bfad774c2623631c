"""The push consumer against real broker processes, as a user sees it.

What is checked is what an application notices: which messages its listener gets, how many
times, with which ``reconsume_times``, where failed ones end up (``%RETRY%{group}``,
``%DLQ%{group}``), and where the group's committed offsets stand after a clean shutdown
(a restarted consumer starts there, so "committed == max offset" means nothing is lost and
nothing will be redelivered).

Most tests share one broker process (each test has its own topic and group); tests that
need a broker of their own (read-only restart) start it. The broker uses short delay levels
so retries come back within a fraction of a second. Every consumer is shut down by the
``consumers`` fixture, which also checks that none of its threads outlives the test.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.client.push import (
    ConsumeContext,
    ConsumeStatus,
    OrderlyStatus,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
)
from rmq_spark.codec.properties import ORIGIN_MESSAGE_ID, RETRY_TOPIC, UNIQ_KEY
from rmq_spark.errors import PermissionDeniedError
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess, read_queue
from tests.support.eventually import eventually

#: short delay levels: a retry (level 3 + reconsumeTimes, lowered to the highest) waits 300 ms
DELAY_LEVELS = "100ms 200ms 300ms"
BROKER_NAME = "broker-push"
WAIT_S = 20.0


# --- helpers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One message as one listener call saw it."""

    msg_id: str
    body: bytes
    topic: str
    queue: MessageQueue
    queue_offset: int
    reconsume_times: int
    tags: str | None
    offset_msg_id: str
    batch: int  # number of the listener call, to see which messages came together


class Recorder:
    """A concurrent listener that records every delivery and answers with ``decide``.

    ``decide(messages, ctx, recorder)`` returns the status (default: CONSUME_SUCCESS); it
    runs after the messages are recorded.
    """

    def __init__(self, decide=None) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.batches: list[list[Delivery]] = []

    def __call__(self, messages: list[ReceivedMessage], ctx: ConsumeContext):
        with self.lock:
            number = len(self.batches)
            batch = [
                Delivery(
                    m.msg_id,
                    m.body,
                    m.topic,
                    m.message_queue,
                    m.queue_offset,
                    m.reconsume_times,
                    m.tags,
                    m.offset_msg_id,
                    number,
                )
                for m in messages
            ]
            self.batches.append(batch)
            self.deliveries.extend(batch)
        if self.decide is None:
            return ConsumeStatus.CONSUME_SUCCESS
        return self.decide(messages, ctx, self)

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)

    def count(self) -> int:
        with self.lock:
            return len(self.deliveries)

    def bodies(self) -> list[bytes]:
        return [d.body for d in self.snapshot()]

    def of(self, body: bytes) -> list[Delivery]:
        return [d for d in self.snapshot() if d.body == body]


def fast_config(**overrides) -> PushConsumerConfig:
    """Consumer settings scaled down for tests (short polls, persists and leases)."""
    settings = {
        "consume_from": "FIRST_OFFSET",
        "queue_lease_ms": 3_000,
        "long_poll_ms": 500,
        "persist_interval_ms": 300,
        "pull_retry_delay_ms": 300,
        "send_back_retry_delay_ms": 300,
        "suspend_current_queue_time_ms": 100,
        "drain_timeout_ms": 5_000,
        "consume_thread_count": 4,
    }
    settings.update(overrides)
    return PushConsumerConfig(**settings)


def max_offsets(endpoint: str, topic: str) -> dict[MessageQueue, int]:
    with Admin(endpoint) as admin:
        queues = admin.describe_topic(topic).queues
        return {mq: q.max_offset for mq, q in admin.query_offsets(queues).items()}


def committed(endpoint: str, group: str, topic: str) -> dict[MessageQueue, int]:
    with Admin(endpoint) as admin:
        return admin.consumer_offsets(group, topic)


def read_all(endpoint: str, topic: str, queue_id: int = 0) -> list[dict]:
    """Every stored message of one queue (offset 0 to the end) as row dicts."""
    return read_queue(endpoint, topic, queue_id, BROKER_NAME)


def push_threads(group: str) -> list[threading.Thread]:
    """Live threads that a push consumer of ``group`` started."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith(("rmq-push-", "rmq-consume-")) and group in t.name
    ]


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker process for the module, with short delay levels."""
    base = tmp_path_factory.mktemp("push-broker")
    process = BrokerProcess(
        BROKER_NAME,
        base / "store",
        base / "broker.log",
        [*TEST_STORE_FLAGS, "--delay-levels", DELAY_LEVELS],
    )
    process.start()
    try:
        yield process
    finally:
        process.clean_up()


@pytest.fixture
def producer(broker):
    with Producer(broker.endpoint) as p:
        yield p


@pytest.fixture
def admin(broker):
    with Admin(broker.endpoint) as a:
        yield a


@pytest.fixture
def consumers(broker):
    """``consumers(group, topic, listener, ...) -> PushConsumer`` (started); every one is
    shut down after the test and must leave no thread behind."""
    made: list[PushConsumer] = []

    def make(
        group: str,
        topic: str,
        listener,
        expression: str = "*",
        *,
        orderly: bool = False,
        message_model: str = "CLUSTERING",
        endpoint: str | None = None,
        **overrides,
    ) -> PushConsumer:
        consumer = PushConsumer(
            group,
            endpoint or broker.endpoint,
            message_model=message_model,
            config=fast_config(**overrides),
        )
        made.append(consumer)
        consumer.subscribe(topic, expression)
        consumer.register_listener(listener, orderly=orderly)
        return consumer.start()

    yield make
    for consumer in made:
        consumer.shutdown()
    for consumer in made:
        eventually(
            lambda c=consumer: not push_threads(c.group),
            what=f"the threads of group {consumer.group!r} to end",
            timeout=10,
        )


def wait_owned(consumer: PushConsumer, topic: str, count: int) -> None:
    """Until the consumer holds ``count`` queues of ``topic`` (start offsets are fixed)."""
    eventually(
        lambda: len([mq for mq in consumer.assignment() if mq.topic == topic]) == count,
        what=f"{consumer.client_id} to own {count} queues of {topic}",
        timeout=WAIT_S,
    )


# --- 1. exactly once, offsets committed ----------------------------------------------------


def test_every_message_is_delivered_once_and_offsets_reach_the_end(
    broker, producer, admin, consumers
):
    """400 messages over 4 queues (half sent before the consumer starts, half while it
    runs) reach the listener exactly once with their bodies intact, and after shutdown the
    group's committed offset of every queue is that queue's max offset."""
    topic, group = "PushAll", "PushAllGroup"
    admin.create_topic(topic, queues=4)
    sent: dict[bytes, str] = {}

    def send(start: int) -> None:
        for q in range(4):
            bodies = [f"all-{start + q * 50 + i}".encode() for i in range(50)]
            results = producer.send_batch(topic, bodies, queue=q)
            sent.update({b: r.msg_id for b, r in zip(bodies, results, strict=True)})

    send(0)
    recorder = Recorder()
    consumer = consumers(group, topic, recorder, consume_message_batch_max_size=3)
    send(200)
    eventually(lambda: recorder.count() >= 400, what="400 deliveries", timeout=WAIT_S)
    consumer.shutdown()

    got = recorder.snapshot()
    assert len(got) == 400
    assert {d.body: d.msg_id for d in got} == sent
    assert all(d.reconsume_times == 0 and d.topic == topic for d in got)
    assert {d.queue.queue_id for d in got} == {0, 1, 2, 3}
    ends = max_offsets(broker.endpoint, topic)
    assert set(ends.values()) == {100}
    assert committed(broker.endpoint, group, topic) == ends
    stats = consumer.stats()
    assert stats["consumed_ok"] == 400
    assert stats.get("consumed_failed", 0) == 0


# --- 2. tag filter --------------------------------------------------------------------------


def test_tag_filter_delivers_only_subscribed_tags_and_offsets_pass_the_rest(
    broker, producer, admin, consumers
):
    """With "TagA || TagB" the listener gets exactly the TagA and TagB messages; the TagC
    ones (including the last ones of each queue) are skipped, and the committed offsets
    still reach each queue's end, so the group shows no lag."""
    topic, group = "PushTags", "PushTagsGroup"
    admin.create_topic(topic, queues=2)
    wanted: set[bytes] = set()
    for q in range(2):
        batch = []
        for i in range(30):
            tag = ("TagA", "TagB", "TagC")[i % 3]
            body = f"tags-{q}-{i}".encode()
            batch.append((body, tag))
            if tag != "TagC":
                wanted.add(body)
        batch += [(f"tags-{q}-tail-{i}".encode(), "TagC") for i in range(5)]
        producer.send_batch(topic, batch, queue=q)

    recorder = Recorder()
    consumer = consumers(group, topic, recorder, "TagA || TagB")
    eventually(
        lambda: recorder.count() >= len(wanted), what=f"{len(wanted)} deliveries", timeout=WAIT_S
    )
    ends = max_offsets(broker.endpoint, topic)
    assert set(ends.values()) == {35}
    eventually(
        lambda: committed(broker.endpoint, group, topic) == ends,
        what="the committed offsets to pass the filtered tail",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    got = recorder.snapshot()
    assert sorted(d.body for d in got) == sorted(wanted)
    assert {d.tags for d in got} == {"TagA", "TagB"}
    assert committed(broker.endpoint, group, topic) == ends


# --- 3. ConsumeFromWhere and committed offsets -------------------------------------------------


def test_consume_from_where_applies_only_without_a_committed_offset(
    broker, producer, admin, consumers
):
    """A new group starts where ``consume_from`` says (LAST_OFFSET: only what is sent
    after it started; FIRST_OFFSET: everything; TIMESTAMP: the first message stored at or
    after the timestamp). Once the group has a committed offset, a restart continues from
    it whatever ``consume_from`` says: nothing skipped, nothing redelivered."""
    topic = "PushFromWhere"
    admin.create_topic(topic, queues=2)

    def send(prefix: str, n: int) -> list:
        return [producer.send(topic, f"{prefix}-{i}".encode()) for i in range(n)]

    old = send("old", 6)
    stamp = max(r.store_timestamp_ms for r in old) + 1
    eventually(
        lambda: time.time() * 1000 > stamp + 5,
        what="the clock to pass the timestamp",
        timeout=WAIT_S,
    )

    last, first = Recorder(), Recorder()
    c_last = consumers("FromLast", topic, last, consume_from="LAST_OFFSET")
    c_first = consumers("FromFirst", topic, first, consume_from="FIRST_OFFSET")
    wait_owned(c_last, topic, 2)
    new = send("new", 6)
    assert min(r.store_timestamp_ms for r in new) >= stamp

    stamped = Recorder()
    consumers("FromStamp", topic, stamped, consume_from="TIMESTAMP", consume_timestamp_ms=stamp)
    new_bodies = sorted(f"new-{i}".encode() for i in range(6))
    old_bodies = sorted(f"old-{i}".encode() for i in range(6))
    eventually(lambda: last.count() >= 6, what="LAST_OFFSET deliveries", timeout=WAIT_S)
    eventually(lambda: first.count() >= 12, what="FIRST_OFFSET deliveries", timeout=WAIT_S)
    eventually(lambda: stamped.count() >= 6, what="TIMESTAMP deliveries", timeout=WAIT_S)
    c_last.shutdown()
    c_first.shutdown()
    assert sorted(last.bodies()) == new_bodies
    assert sorted(first.bodies()) == sorted(old_bodies + new_bodies)
    assert sorted(stamped.bodies()) == new_bodies

    # committed offsets win: FIRST -> LAST does not skip, LAST -> FIRST does not redeliver
    send("later", 4)
    later_bodies = sorted(f"later-{i}".encode() for i in range(4))
    first_again, last_again = Recorder(), Recorder()
    consumers("FromFirst", topic, first_again, consume_from="LAST_OFFSET")
    consumers("FromLast", topic, last_again, consume_from="FIRST_OFFSET")
    eventually(
        lambda: first_again.count() >= 4, what="restarted FromFirst deliveries", timeout=WAIT_S
    )
    eventually(
        lambda: last_again.count() >= 4, what="restarted FromLast deliveries", timeout=WAIT_S
    )
    # a redelivery of old messages would have arrived with or before the later ones
    eventually(
        lambda: (
            committed(broker.endpoint, "FromLast", topic) == max_offsets(broker.endpoint, topic)
        ),
        what="FromLast to commit the end",
        timeout=WAIT_S,
    )
    assert sorted(first_again.bodies()) == later_bodies
    assert sorted(last_again.bodies()) == later_bodies


# --- 4. retry topic, reconsumeTimes, dead-letter queue ----------------------------------------


def test_a_failing_message_is_retried_with_growing_reconsume_times_then_dead_lettered(
    broker, producer, admin, consumers
):
    """With max_reconsume_times=3 a message whose listener always answers RECONSUME_LATER
    is delivered exactly four times (reconsume_times 0, 1, 2, 3; same msg_id; ``topic``
    stays the subscribed topic while the redeliveries come from ``%RETRY%{group}``), then
    lands in ``%DLQ%{group}`` with its body and retry properties and is not delivered
    again. Every other message is delivered once."""
    topic, group = "PushRetry", "PushRetryGroup"
    admin.create_topic(topic, queues=2)
    results = {}
    for i in range(10):
        body = b"poison" if i == 4 else f"retry-{i}".encode()
        results[body] = producer.send(topic, body, tags="TagR", keys=f"key-{i}")

    def decide(messages, ctx, rec):
        if any(m.body == b"poison" for m in messages):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    recorder = Recorder(decide)
    consumer = consumers(group, topic, recorder, max_reconsume_times=3)
    eventually(
        lambda: consumer.stats().get("dead_lettered") == 1, what="the DLQ send-back", timeout=WAIT_S
    )
    eventually(lambda: recorder.count() >= 13, what="all deliveries", timeout=WAIT_S)
    retry_topic, dlq_topic = f"%RETRY%{group}", f"%DLQ%{group}"
    eventually(
        lambda: (
            committed(broker.endpoint, group, topic) == max_offsets(broker.endpoint, topic)
            and committed(broker.endpoint, group, retry_topic)
            == max_offsets(broker.endpoint, retry_topic)
        ),
        what="the offsets of the topic and the retry topic to reach the end",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    poison = recorder.of(b"poison")
    original = results[b"poison"]
    assert [d.reconsume_times for d in poison] == [0, 1, 2, 3]
    assert {d.msg_id for d in poison} == {original.msg_id}
    assert {d.topic for d in poison} == {topic}
    assert [d.queue.topic for d in poison] == [topic, retry_topic, retry_topic, retry_topic]
    assert poison[0].queue == original.message_queue
    assert poison[0].queue_offset == original.queue_offset
    assert [d.queue_offset for d in poison[1:]] == [0, 1, 2]
    assert {d.tags for d in poison} == {"TagR"}
    others = [d for d in recorder.snapshot() if d.body != b"poison"]
    assert sorted(d.body for d in others) == sorted(b for b in results if b != b"poison")
    assert {d.reconsume_times for d in others} == {0}

    stats = consumer.stats()
    assert stats["sent_back"] == 3
    assert stats["dead_lettered"] == 1
    assert stats["consumed_failed"] == 4
    assert stats["consumed_ok"] == 9
    assert stats.get("send_back_failed", 0) == 0

    dead = read_all(broker.endpoint, dlq_topic)
    assert len(dead) == 1
    row = dead[0]
    props = dict(row["properties"])
    assert row["body"] == b"poison"
    assert row["topic"] == dlq_topic
    assert row["tags"] == "TagR"
    assert row["keys"] == "key-4"
    assert row["reconsumeTimes"] == 4
    assert props[RETRY_TOPIC] == topic
    assert props[UNIQ_KEY] == original.msg_id
    assert props[ORIGIN_MESSAGE_ID] == original.offset_msg_id
    # three copies went through the retry topic, and nothing else
    assert [r["body"] for r in read_all(broker.endpoint, retry_topic)] == [b"poison"] * 3


# --- 5. ack_index: partial retry of a batch -------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ack_index", "whole_batch", "retried"),
    [
        (ConsumeStatus.RECONSUME_LATER, 1, False, slice(2, None)),
        (ConsumeStatus.RECONSUME_LATER, 1, True, slice(0, None)),
        (ConsumeStatus.CONSUME_SUCCESS, 0, False, slice(1, None)),
    ],
    ids=["later-ack1", "later-ack1-whole-batch", "success-ack0"],
)
def test_ack_index_decides_which_messages_of_a_batch_are_retried(
    broker, producer, admin, consumers, status, ack_index, whole_batch, retried
):
    """Batches of 4: on the first delivery of each batch the listener sets ``ack_index``
    and answers ``status``. Exactly the messages after ``ack_index`` come back (from the
    retry topic, reconsume_times 1) -- or the whole batch with
    retry_whole_batch_on_failure=True (RocketMQ's behaviour) -- and the others never do."""
    topic = f"PushAck-{status.name}-{ack_index}-{whole_batch}"
    group = f"PushAckGroup-{status.name}-{ack_index}-{whole_batch}"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"ack-{i}".encode() for i in range(8)], queue=0)

    def decide(messages, ctx, rec):
        if messages[0].reconsume_times == 0:
            ctx.ack_index = ack_index
            return status
        return ConsumeStatus.CONSUME_SUCCESS

    recorder = Recorder(decide)
    consumer = consumers(
        group,
        topic,
        recorder,
        consume_message_batch_max_size=4,
        retry_whole_batch_on_failure=whole_batch,
    )
    first_batches = [[f"ack-{i}".encode() for i in range(s, s + 4)] for s in (0, 4)]
    expected_retries = sorted(b for batch in first_batches for b in batch[retried])
    eventually(
        lambda: recorder.count() >= 8 + len(expected_retries),
        what=f"{8 + len(expected_retries)} deliveries",
        timeout=WAIT_S,
    )
    retry = f"%RETRY%{group}"
    eventually(
        lambda: committed(broker.endpoint, group, retry) == max_offsets(broker.endpoint, retry),
        what="the retried messages to be consumed",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    got = recorder.snapshot()
    firsts = [d for d in got if d.reconsume_times == 0]
    # two batches of 4 (run on two pool threads, so in either order)
    assert sorted([d.body for d in b] for b in recorder.batches if b[0].reconsume_times == 0) == (
        first_batches
    )
    assert sorted(d.body for d in firsts) == sorted(b for batch in first_batches for b in batch)
    again = [d for d in got if d.reconsume_times > 0]
    assert sorted(d.body for d in again) == expected_retries
    assert {(d.reconsume_times, d.queue.topic, d.topic) for d in again} == {(1, retry, topic)}
    assert committed(broker.endpoint, group, topic) == max_offsets(broker.endpoint, topic)
    stats = consumer.stats()
    assert stats["sent_back"] == len(expected_retries)
    assert stats["consumed_failed"] == len(expected_retries)
    assert stats["consumed_ok"] == 8  # the first round's successes plus every retry


# --- 6. listener raising or returning nonsense -------------------------------------------------


@pytest.mark.parametrize("failure", ["raise", "return-none"])
def test_a_listener_that_raises_or_returns_none_gets_the_messages_again(
    broker, producer, admin, consumers, caplog, failure
):
    """A listener that raises (or returns None instead of a ConsumeStatus) on a message's
    first delivery gets that message again with reconsume_times 1; the error is logged and
    the consumer keeps consuming later messages."""
    topic, group = f"PushRaise-{failure}", f"PushRaiseGroup-{failure}"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"raise-{i}".encode() for i in range(3)], queue=0)

    def decide(messages, ctx, rec):
        if messages[0].reconsume_times == 0 and messages[0].body.startswith(b"raise-"):
            if failure == "raise":
                raise RuntimeError("listener bug")
            return None
        return ConsumeStatus.CONSUME_SUCCESS

    recorder = Recorder(decide)
    caplog.set_level(logging.ERROR, logger="rmq_spark.client.push")
    consumer = consumers(group, topic, recorder)
    eventually(
        lambda: recorder.count() >= 6, what="the first deliveries and the retries", timeout=WAIT_S
    )
    producer.send(topic, b"after")
    eventually(
        lambda: recorder.of(b"after"), what="a message sent after the failures", timeout=WAIT_S
    )
    retry = f"%RETRY%{group}"
    eventually(
        lambda: committed(broker.endpoint, group, retry) == max_offsets(broker.endpoint, retry),
        what="the retried messages to be consumed",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    got = recorder.snapshot()
    for i in range(3):
        body = f"raise-{i}".encode()
        assert [d.reconsume_times for d in recorder.of(body)] == [0, 1], body
    assert [d.reconsume_times for d in recorder.of(b"after")] == [0]
    assert len(got) == 7
    stats = consumer.stats()
    assert (stats["consumed_failed"], stats["sent_back"], stats["consumed_ok"]) == (3, 3, 4)
    errors = [r for r in caplog.records if r.name == "rmq_spark.client.push"]
    assert len(errors) == 3
    if failure == "raise":
        assert all(r.exc_info and "listener bug" in str(r.exc_info[1]) for r in errors)
    else:
        assert all("returned None" in r.getMessage() for r in errors)


# --- 7. send-back refused: local retry ------------------------------------------------------


def test_when_the_broker_refuses_the_send_back_the_message_is_retried_locally(
    broker_factory, consumers, caplog
):
    """On a read-only broker (restarted with --broker-perm 4) giving a failed message back
    answers PERMISSION_DENIED: the consumer consumes it again itself after
    send_back_retry_delay_ms with reconsume_times + 1, counts send_back_failed, and the
    queue's committed offset stays at the message while it is being retried, then moves to
    the end once it succeeds."""
    topic, group = "PushReadOnly", "PushReadOnlyGroup"
    ro = broker_factory("broker-ro", "--delay-levels", DELAY_LEVELS)
    with Admin(ro.endpoint) as admin:
        admin.create_topic(topic, queues=1)
    with Producer(ro.endpoint) as producer:
        producer.send_batch(topic, [f"ro-{i}".encode() for i in range(5)], queue=0)
    ro.stop()
    ro.args += ["--broker-perm", "4"]
    ro.start()
    with Producer(ro.endpoint) as producer, pytest.raises(PermissionDeniedError):
        producer.send(topic, b"refused")  # the broker really is read-only

    release = threading.Event()
    third_attempt = threading.Event()

    def decide(messages, ctx, rec):
        (m,) = messages
        if m.body != b"ro-2":
            return ConsumeStatus.CONSUME_SUCCESS
        if m.reconsume_times < 2:
            return ConsumeStatus.RECONSUME_LATER
        third_attempt.set()
        release.wait(WAIT_S)
        return ConsumeStatus.CONSUME_SUCCESS

    recorder = Recorder(decide)
    caplog.set_level(logging.WARNING, logger="rmq_spark.client.push")
    consumer = consumers(group, topic, recorder, endpoint=ro.endpoint, send_back_retry_delay_ms=300)
    mq = MessageQueue(topic, "broker-ro", 0)
    try:
        eventually(
            third_attempt.is_set, what="the third delivery of the failing message", timeout=WAIT_S
        )
        eventually(lambda: recorder.count() >= 7, what="the other messages", timeout=WAIT_S)
        # offsets 0, 1 done, 2 in flight, 3, 4 done: the committed offset stops at 2
        eventually(
            lambda: committed(ro.endpoint, group, topic).get(mq) == 2,
            what="the offset of the messages before the failing one to be committed",
            timeout=WAIT_S,
        )
        seen = [committed(ro.endpoint, group, topic)[mq]]
        deadline = time.monotonic() + 3 * consumer.config.persist_interval_ms / 1000
        while time.monotonic() < deadline:  # several persists happen meanwhile
            seen.append(committed(ro.endpoint, group, topic)[mq])
            time.sleep(0.05)
        assert set(seen) == {2}
    finally:
        release.set()
    eventually(
        lambda: committed(ro.endpoint, group, topic).get(mq) == 5,
        what="the offset to reach the end once the message succeeded",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    assert [d.reconsume_times for d in recorder.of(b"ro-2")] == [0, 1, 2]
    assert {d.queue for d in recorder.of(b"ro-2")} == {mq}  # never through a retry topic
    assert sorted(recorder.bodies()) == sorted(
        [f"ro-{i}".encode() for i in range(5)] + [b"ro-2", b"ro-2"]
    )
    stats = consumer.stats()
    assert stats["send_back_failed"] == 2
    assert stats["local_retries"] == 2
    assert stats.get("sent_back", 0) == 0
    assert committed(ro.endpoint, group, topic) == {mq: 5}
    refusals = [r.getMessage() for r in caplog.records if "cannot give message" in r.getMessage()]
    assert len(refusals) == 2
    assert all("read-only" in text for text in refusals), refusals


# --- 8. orderly consumption -------------------------------------------------------------------


class OrderlyRecorder:
    """An orderly listener: records (offset, reconsume_times, answer) in call order."""

    def __init__(self, decide) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.calls: list[tuple[int, int, OrderlyStatus]] = []
        self.active = 0
        self.overlaps = 0

    def __call__(self, messages, ctx):
        with self.lock:
            self.active += 1
            self.overlaps += self.active > 1
        try:
            (m,) = messages
            status = self.decide(m, self)
            with self.lock:
                self.calls.append((m.queue_offset, m.reconsume_times, status))
            return status
        finally:
            with self.lock:
                self.active -= 1

    def snapshot(self) -> list[tuple[int, int, OrderlyStatus]]:
        with self.lock:
            return list(self.calls)

    def succeeded(self) -> list[int]:
        return [o for o, _, s in self.snapshot() if s is OrderlyStatus.SUCCESS]


def test_orderly_suspend_retries_the_same_message_and_keeps_queue_order(
    broker, producer, admin, consumers
):
    """An orderly listener that answers SUSPEND_CURRENT_QUEUE_A_MOMENT the first time it
    sees offsets 10 and 30 gets exactly 0..49 successfully, in order, one call at a time;
    10 and 30 come twice (reconsume_times 0 then 1) and nothing after them is delivered
    before they succeed."""
    topic, group = "PushOrderly", "PushOrderlyGroup"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"o-{i}".encode() for i in range(50)], queue=0)
    suspended: set[int] = set()

    def decide(m, rec):
        if m.queue_offset in (10, 30) and m.queue_offset not in suspended:
            suspended.add(m.queue_offset)
            return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyStatus.SUCCESS

    recorder = OrderlyRecorder(decide)
    consumer = consumers(group, topic, recorder, orderly=True, suspend_current_queue_time_ms=100)
    eventually(lambda: len(recorder.succeeded()) >= 50, what="50 successful calls", timeout=WAIT_S)
    consumer.shutdown()

    calls = recorder.snapshot()
    assert recorder.succeeded() == list(range(50))
    expected = [(o, 0) for o in range(11)] + [(10, 1)] + [(o, 0) for o in range(11, 31)]
    expected += [(30, 1)] + [(o, 0) for o in range(31, 50)]
    assert [(o, r) for o, r, _ in calls] == expected
    assert recorder.overlaps == 0
    assert committed(broker.endpoint, group, topic) == {MessageQueue(topic, BROKER_NAME, 0): 50}
    stats = consumer.stats()
    assert (stats["consumed_ok"], stats["consumed_failed"]) == (50, 2)


def test_orderly_message_that_always_fails_goes_to_the_dlq_and_the_queue_moves_on(
    broker, producer, admin, consumers
):
    """With max_reconsume_times=2 an orderly message that always fails is tried three times
    locally (reconsume_times 0, 1, 2) while the queue waits, then goes to ``%DLQ%{group}``
    and the queue continues in order with the next message."""
    topic, group = "PushOrderlyDlq", "PushOrderlyDlqGroup"
    admin.create_topic(topic, queues=1)
    sent = producer.send_batch(topic, [f"od-{i}".encode() for i in range(10)], queue=0)

    def decide(m, rec):
        if m.queue_offset == 4:
            return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyStatus.SUCCESS

    recorder = OrderlyRecorder(decide)
    consumer = consumers(
        group,
        topic,
        recorder,
        orderly=True,
        suspend_current_queue_time_ms=100,
        max_reconsume_times=2,
    )
    eventually(
        lambda: len(recorder.succeeded()) >= 9, what="the other nine messages", timeout=WAIT_S
    )
    eventually(
        lambda: committed(broker.endpoint, group, topic) == max_offsets(broker.endpoint, topic),
        what="the offset to pass the dead-lettered message",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    calls = [(o, r) for o, r, _ in recorder.snapshot()]
    assert calls == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (4, 1), (4, 2)] + [
        (o, 0) for o in range(5, 10)
    ]
    assert recorder.succeeded() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    stats = consumer.stats()
    assert stats["dead_lettered"] == 1
    assert stats.get("sent_back", 0) == 0
    dead = read_all(broker.endpoint, f"%DLQ%{group}")
    assert [r["body"] for r in dead] == [b"od-4"]
    props = dict(dead[0]["properties"])
    assert props[UNIQ_KEY] == sent[4].msg_id
    assert props[RETRY_TOPIC] == topic
    # a retry topic is not used by orderly consumption
    assert read_all(broker.endpoint, f"%RETRY%{group}") == []


# --- 9. broadcasting ------------------------------------------------------------------------


def file_offsets(base, client_id: str, group: str, topic: str, suffix: str = "") -> dict:
    """queue id -> offset of ``topic`` in a member's local offsets file (or its backup)."""
    path = base / client_id / group / f"offsets.json{suffix}"
    doc = json.loads(path.read_text())
    assert (doc["clientId"], doc["group"]) == (client_id, group)
    return {int(q): o for q, o in doc["offsetTable"][topic][BROKER_NAME].items()}


def broadcast_member(consumers, tmp_path, group, topic, client_id, recorder) -> PushConsumer:
    return consumers(
        group,
        topic,
        recorder,
        message_model="BROADCASTING",
        client_id=client_id,
        offsets_dir=tmp_path,
    )


def test_broadcasting_members_each_get_everything_and_resume_from_their_file(
    broker, producer, admin, consumers, tmp_path, caplog
):
    """Two BROADCASTING members of one group both receive every message. Each keeps its
    progress in offsets_dir/<client_id>/<group>/offsets.json, holding the queue's max
    offset after shutdown, so a restarted member receives only new messages. With the main
    file corrupted it falls back to offsets.json.bak: it does not crash and receives
    exactly what the backup says is not consumed yet, each message once."""
    topic, group = "PushBroadcast", "PushBroadcastGroup"
    admin.create_topic(topic, queues=1)
    every: list[bytes] = []  # every body in queue order: its index is its offset

    def send(prefix: str, n: int) -> list[bytes]:
        bodies = [f"{prefix}-{i}".encode() for i in range(n)]
        producer.send_batch(topic, bodies, queue=0)
        every.extend(bodies)
        return bodies

    def member(client_id: str, recorder: Recorder) -> PushConsumer:
        return broadcast_member(consumers, tmp_path, group, topic, client_id, recorder)

    first = send("b1", 20)
    one, two = Recorder(), Recorder()
    c1, c2 = member("bc-1", one), member("bc-2", two)
    eventually(
        lambda: one.count() >= 20 and two.count() >= 20,
        what="both members to get 20",
        timeout=WAIT_S,
    )
    c1.shutdown()
    c2.shutdown()
    assert sorted(one.bodies()) == sorted(first)
    assert sorted(two.bodies()) == sorted(first)
    assert file_offsets(tmp_path, "bc-1", group, topic) == {0: 20}
    assert file_offsets(tmp_path, "bc-2", group, topic) == {0: 20}
    assert committed(broker.endpoint, group, topic) == {}  # nothing on the broker

    # restart: only what was sent meanwhile
    second = send("b2", 6)
    again = Recorder()
    c1b = member("bc-1", again)
    eventually(
        lambda: again.count() >= 6,
        what="the restarted member to get the new messages",
        timeout=WAIT_S,
    )
    c1b.shutdown()
    assert sorted(again.bodies()) == sorted(second)
    assert file_offsets(tmp_path, "bc-1", group, topic) == {0: 26}

    # corrupt the main file: the backup decides where the member resumes
    resume_at = file_offsets(tmp_path, "bc-1", group, topic, ".bak")[0]
    assert 0 <= resume_at <= 26
    (tmp_path / "bc-1" / group / "offsets.json").write_text("{ not json")
    send("b3", 4)
    resumed = Recorder()
    caplog.set_level(logging.WARNING, logger="rmq_spark.store")
    c1c = member("bc-1", resumed)
    eventually(
        lambda: resumed.count() >= 30 - resume_at,
        what=f"{30 - resume_at} deliveries",
        timeout=WAIT_S,
    )
    c1c.shutdown()
    assert sorted(resumed.bodies()) == sorted(every[resume_at:])
    assert any("using the backup" in r.getMessage() for r in caplog.records)
    assert file_offsets(tmp_path, "bc-1", group, topic) == {0: 30}


def test_broadcasting_shutdown_keeps_the_offsets_of_every_queue(
    broker, producer, admin, consumers, tmp_path
):
    """A BROADCASTING member of a 2-queue topic finds both queues' offsets in its file
    after shutdown, and a restarted member receives only new messages."""
    topic, group = "PushBroadcast2", "PushBroadcast2Group"
    admin.create_topic(topic, queues=2)
    for q in range(2):
        producer.send_batch(topic, [f"b2q-{q}-{i}".encode() for i in range(5)], queue=q)
    first = Recorder()
    c1 = broadcast_member(consumers, tmp_path, group, topic, "bq-1", first)
    eventually(lambda: first.count() >= 10, what="10 deliveries", timeout=WAIT_S)
    c1.shutdown()
    producer.send(topic, b"b2q-new", queue=0)
    again = Recorder()
    c2 = broadcast_member(consumers, tmp_path, group, topic, "bq-1", again)
    eventually(lambda: again.count() >= 1, what="the new message", timeout=WAIT_S)
    c2.shutdown()
    assert again.bodies() == [b"b2q-new"], "redelivered after a clean restart"
    assert file_offsets(tmp_path, "bq-1", group, topic) == {0: 6, 1: 5}


# --- 10. OFFSET_ILLEGAL --------------------------------------------------------------------


def start_past_the_end(broker, producer, admin, topic: str, group: str) -> MessageQueue:
    """A 1-queue topic with 5 messages and ``group``'s committed offset reset to 50."""
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"il-old-{i}".encode() for i in range(5)], queue=0)
    mq = MessageQueue(topic, BROKER_NAME, 0)
    done = admin.commit_offsets(group, {mq: 50}, increase_only=False)
    assert done[mq].offset == 50
    return mq


def test_a_committed_offset_past_the_end_is_reported_and_nothing_is_skipped(
    broker, producer, admin, consumers, caplog
):
    """A group whose committed offset lies past the queue's end (reset by hand, or the
    queue was recreated) gets OFFSET_ILLEGAL on its first pull: the consumer logs an error
    and starts over where the broker says. Nothing was ever deleted from the queue, so that
    is its beginning (RocketMQ's rule): the 5 stored messages and the 3 sent afterwards
    arrive, once each."""
    topic, group = "PushIllegal", "PushIllegalGroup"
    start_past_the_end(broker, producer, admin, topic, group)
    caplog.set_level(logging.ERROR, logger="rmq_spark.client.push")
    recorder = Recorder()
    consumer = consumers(group, topic, recorder)
    eventually(
        lambda: consumer.stats().get("offset_illegal") == 1,
        what="the OFFSET_ILLEGAL answer",
        timeout=WAIT_S,
    )
    new = [f"il-new-{i}".encode() for i in range(3)]
    producer.send_batch(topic, new, queue=0)
    eventually(
        lambda: recorder.count() >= 8,
        what="the stored messages and those sent after",
        timeout=WAIT_S,
    )
    consumer.shutdown()

    old = [f"il-old-{i}".encode() for i in range(5)]
    assert sorted(recorder.bodies()) == sorted(old + new)
    assert sorted(d.queue_offset for d in recorder.snapshot()) == list(range(8))
    assert consumer.stats()["offset_illegal"] == 1
    errors = [r.getMessage() for r in caplog.records if r.name == "rmq_spark.client.push"]
    assert len(errors) == 1
    assert "offset 50" in errors[0] and "illegal" in errors[0] and "jumping to 0" in errors[0]


def test_the_corrected_offset_reaches_the_broker_and_a_restart_skips_nothing(
    broker, producer, admin, consumers
):
    """After the OFFSET_ILLEGAL jump the broker holds the corrected (lower) offset, then
    the consumed end; so a member restarted after 50 more messages were sent receives
    exactly those 50."""
    topic, group = "PushIllegal2", "PushIllegal2Group"
    mq = start_past_the_end(broker, producer, admin, topic, group)
    recorder = Recorder()
    consumer = consumers(group, topic, recorder)
    eventually(
        lambda: consumer.stats().get("offset_illegal") == 1,
        what="the OFFSET_ILLEGAL answer",
        timeout=WAIT_S,
    )
    producer.send_batch(topic, [f"il-a-{i}".encode() for i in range(3)], queue=0)
    eventually(
        lambda: recorder.count() >= 8, what="the 5 stored and 3 new messages", timeout=WAIT_S
    )
    consumer.shutdown()
    assert committed(broker.endpoint, group, topic) == {mq: 8}
    later = [f"il-b-{i}".encode() for i in range(50)]
    producer.send_batch(topic, later, queue=0)
    again = Recorder()
    consumer = consumers(group, topic, again)
    eventually(lambda: again.count() >= 8, what="deliveries after the restart", timeout=WAIT_S)
    eventually(
        lambda: committed(broker.endpoint, group, topic) == {mq: 58},
        what="the offset to reach 58",
        timeout=WAIT_S,
    )
    consumer.shutdown()
    assert sorted(again.bodies()) == sorted(later), f"{50 - again.count()} messages skipped"


# --- 11. regressions found in review ---------------------------------------------------------


def test_a_subscription_changed_while_running_delivers_the_new_tags(
    broker, producer, admin, consumers
):
    """subscribe() again with another expression: messages with the new tags arrive (the
    client-side tag check follows the new expression, it does not skip them)."""
    topic, group = "PushResubscribe", "PushResubscribeGroup"
    admin.create_topic(topic, queues=2)
    recorder = Recorder()
    consumer = consumers(group, topic, recorder, "TagA")
    wait_owned(consumer, topic, 2)
    producer.send_batch(topic, [(b"a-1", "TagA"), (b"b-1", "TagB")], queue=0)
    eventually(lambda: recorder.count() >= 1, what="the TagA message", timeout=WAIT_S)
    consumer.subscribe(topic, "TagB")
    # The new expression goes with the pulls sent from now on. A pull sent just before carries
    # the old one (TagA: the broker would skip b-2 for it) and the broker holds it for up to
    # long_poll_ms; wait that long again on top, for the request and its answer to travel.
    time.sleep(2 * consumer.config.long_poll_ms / 1000)
    producer.send_batch(topic, [(b"a-2", "TagA"), (b"b-2", "TagB")], queue=1)
    eventually(
        lambda: b"b-2" in recorder.bodies(),
        what="the TagB message sent after the change",
        timeout=WAIT_S,
    )
    consumer.shutdown()
    assert sorted(recorder.bodies()) == [b"a-1", b"b-2"]


def test_a_recreated_topic_restarts_from_its_new_beginning_without_loss(
    broker, producer, admin, consumers
):
    """A topic deleted and created again (offsets start over below the group's position):
    the consumer answers OFFSET_ILLEGAL by starting the queue over from its beginning,
    commits the lower offset, and no message of the new topic is lost or delivered twice,
    also across a restart."""
    topic, group = "PushRecreated", "PushRecreatedGroup"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"old-{i}".encode() for i in range(20)], queue=0)
    first = Recorder()
    consumer = consumers(group, topic, first)
    eventually(lambda: first.count() >= 20, what="the 20 old messages", timeout=WAIT_S)
    admin.delete_topic(topic)
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"new-{i}".encode() for i in range(5)], queue=0)
    eventually(
        lambda: consumer.stats().get("offset_illegal", 0) >= 1,
        what="OFFSET_ILLEGAL",
        timeout=WAIT_S,
    )
    consumer.shutdown()
    producer.send_batch(topic, [f"later-{i}".encode() for i in range(10)], queue=0)
    (ended_at,) = committed(broker.endpoint, group, topic).values()
    assert ended_at <= 5  # not the old position 20
    second = Recorder()
    consumers(group, topic, second)
    wanted = {f"new-{i}".encode() for i in range(5)} | {f"later-{i}".encode() for i in range(10)}
    eventually(
        lambda: wanted <= set(first.bodies() + second.bodies()),
        what="the 15 messages of the recreated topic",
        timeout=WAIT_S,
    )
    # what came after the jump, over both runs: nothing lost, nothing twice
    after_jump = [b for b in first.bodies() + second.bodies() if not b.startswith(b"old-")]
    assert set(after_jump) == wanted
    assert len(after_jump) == len(set(after_jump))


def test_shutdown_called_from_the_listener_finishes_cleanly(broker, producer, admin, consumers):
    """A listener that decides to stop the consumer may call shutdown(): the call returns,
    the message is still acknowledged, and the consumer stops and commits."""
    topic, group = "PushSelfStop", "PushSelfStopGroup"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [b"stop"], queue=0)
    holder: dict[str, PushConsumer] = {}

    def decide(messages, ctx, recorder):
        holder["consumer"].shutdown()
        return ConsumeStatus.CONSUME_SUCCESS

    recorder = Recorder(decide)
    holder["consumer"] = consumers(group, topic, recorder)
    eventually(lambda: not push_threads(group), what="the consumer to stop by itself", timeout=20)
    assert recorder.bodies() == [b"stop"]
    assert committed(broker.endpoint, group, topic) == max_offsets(broker.endpoint, topic)


# --- slow listeners ---------------------------------------------------------------------------


def test_a_slow_listener_gets_the_batches_of_one_pull_on_several_threads(
    broker, producer, admin, consumers
):
    """A pull's listener batches normally run one after the other on one thread; once a
    call is slow (here 200 ms), the rest of the pull is spread over the idle threads, so an
    I/O-bound listener still runs in parallel within one queue."""
    topic, group = "PushSlow", "PushSlowGroup"
    admin.create_topic(topic, queues=1)
    producer.send_batch(topic, [f"slow-{i}".encode() for i in range(8)], queue=0)
    lock = threading.Lock()
    running = peak = 0
    seen: list[int] = []

    def slow(messages, ctx):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.2)
        with lock:
            running -= 1
            seen.extend(m.queue_offset for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = consumers(group, topic, slow, consume_thread_count=4)
    eventually(lambda: len(seen) >= 8, what="8 deliveries", timeout=WAIT_S)
    consumer.shutdown()
    assert sorted(seen) == list(range(8))
    assert peak > 1
    assert committed(broker.endpoint, group, topic)[MessageQueue(topic, BROKER_NAME, 0)] == 8
