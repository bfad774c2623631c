"""The client against real brokers: producer, pull consumer and admin over gRPC.

Most tests run two brokers inside the test process (fast); one runs them as processes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future

import pyarrow as pa
import pytest

from rmq_spark.client import (
    Admin,
    ClientConfig,
    ConsumerConfig,
    Message,
    Producer,
    ProducerConfig,
    PullConsumer,
    RetryPolicy,
)
from rmq_spark.codec.arrow_decode import RECORD_SCHEMA
from rmq_spark.codec.taghash import java_string_hash
from rmq_spark.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    RocketliteError,
    UnavailableError,
)
from rmq_spark.structs import MessageQueue, PullStatus
from tests.support.eventually import eventually

FAST_RETRY = RetryPolicy(attempts=2, backoff_ms=20, max_backoff_ms=50)
TOPIC = "ClientTopic"


def producer_config(**overrides) -> ProducerConfig:
    return ProducerConfig(retry=FAST_RETRY, request_timeout_ms=5_000, **overrides)


def consumer_config(**overrides) -> ConsumerConfig:
    settings = {"retry": FAST_RETRY, "consume_from": "FIRST_OFFSET", "long_poll_margin_ms": 2_000}
    settings.update(overrides)
    return ConsumerConfig(**settings)


@pytest.fixture
def brokers(in_process_broker_factory):
    """Two in-process brokers, broker-a and broker-b, and TOPIC with 4 queues on each."""
    pair = [in_process_broker_factory(name=name) for name in ("broker-a", "broker-b")]
    endpoints = ",".join(b.endpoint for b in pair)
    with Admin(endpoints, ClientConfig(retry=FAST_RETRY)) as admin:
        admin.create_topic(TOPIC, queues=4)
    return pair


@pytest.fixture
def endpoints(brokers) -> str:
    return ",".join(b.endpoint for b in brokers)


@pytest.fixture
def admin(endpoints):
    with Admin(endpoints, ClientConfig(retry=FAST_RETRY)) as client:
        yield client


@pytest.fixture
def producer(endpoints):
    with Producer(endpoints, config=producer_config()) as client:
        yield client


def all_queues(topic: str = TOPIC) -> list[MessageQueue]:
    return [MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(4)]


def read_all(consumer: PullConsumer, queues, expect: int, timeout_s: float = 5.0) -> pa.Table:
    """Poll until ``expect`` messages arrived; one table with a brokerName column."""
    consumer.assign(queues)
    batches, count = [], 0
    deadline = time.monotonic() + timeout_s
    while count < expect and time.monotonic() < deadline:
        for result in consumer.poll(timeout_ms=500):
            batches.append(result.with_broker_name())
            count += result.message_count
    assert count == expect, f"got {count} of {expect} messages"
    return pa.Table.from_batches(batches).sort_by(
        [("brokerName", "ascending"), ("queueId", "ascending"), ("queueOffset", "ascending")]
    )


# --- producing and pulling ----------------------------------------------------------------


def test_round_trip_keeps_body_tags_keys_properties_and_ids(producer, endpoints):
    sent = producer.send(
        TOPIC, b"\x00payload\xff", tags="TagA", keys=["order-1", "user-7"], properties={"p": "v"}
    )
    assert sent.message_queue in all_queues() and sent.queue_offset == 0
    with PullConsumer(endpoints, config=consumer_config()) as consumer:
        consumer.assign([sent.message_queue])
        result = consumer.pull(sent.message_queue, max_messages=10)
    assert result.status == PullStatus.FOUND
    assert result.batch.schema == RECORD_SCHEMA
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (1, 0, 1)
    row = result.batch.to_pylist()[0]
    assert row["body"] == b"\x00payload\xff"
    assert (row["tags"], row["keys"]) == ("TagA", "order-1 user-7")
    props = dict(row["properties"])
    assert props["p"] == "v"
    assert props["UNIQ_KEY"] == sent.msg_id  # the client message id
    assert row["msgId"] == sent.offset_msg_id  # store host + commit-log offset
    assert (row["topic"], row["queueId"], row["queueOffset"]) == (TOPIC, sent.message_queue[2], 0)
    assert row["storeTimestamp"] == sent.store_timestamp_ms


def test_round_robin_spreads_sends_over_both_brokers_queues(producer, endpoints):
    assert producer.writable_queues(TOPIC) == all_queues()
    results = [producer.send(TOPIC, f"m{i}".encode()) for i in range(24)]
    per_queue = Counter(r.message_queue for r in results)
    assert set(per_queue) == set(all_queues())
    assert set(per_queue.values()) == {3}
    with PullConsumer(endpoints, config=consumer_config()) as consumer:
        table = read_all(consumer, all_queues(), 24)
    assert sorted(table.column("body").to_pylist()) == sorted(f"m{i}".encode() for i in range(24))
    assert set(table.column("brokerName").to_pylist()) == {"broker-a", "broker-b"}


def test_sharding_key_pins_a_queue_across_producers(producer, endpoints):
    queues = all_queues()
    for key in ["order-1", "order-2", "customer-99", "polygenelubricants"]:
        expected = queues[abs(java_string_hash(key)) % len(queues)]
        first = [producer.send(TOPIC, b"x", sharding_key=key) for _ in range(3)]
        with Producer(endpoints, config=producer_config()) as other:
            second = other.send(TOPIC, b"y", sharding_key=key)
        assert {r.message_queue for r in [*first, second]} == {expected}
        offsets = [r.queue_offset for r in [*first, second]]
        assert offsets == sorted(offsets)  # in order within the queue


def test_explicit_queue_and_queue_id(producer, endpoints):
    mq = MessageQueue(TOPIC, "broker-b", 3)
    assert producer.send(TOPIC, b"a", queue=mq).message_queue == mq
    with pytest.raises(InvalidArgumentError, match=r"queue=1 is ambiguous.*broker-a.*broker-b"):
        producer.send(TOPIC, b"a", queue=1)
    with pytest.raises(InvalidArgumentError, match=r"give queue=.* or sharding_key=.*not both"):
        producer.send(TOPIC, b"a", queue=mq, sharding_key="k")


def test_send_batch_goes_to_one_queue_in_order_and_splits_by_size(endpoints):
    config = producer_config(max_batch_bytes=16 * 1024)  # ~15 messages of 1 KiB per request
    with Producer(endpoints, config=config) as producer:
        items = [Message(b"%04d" % i + b"." * 1020, tags="T", keys=[f"k{i}"]) for i in range(50)]
        items += [b"plain", (b"tuple", "TagT")]
        results = producer.send_batch(TOPIC, items)
    assert len({r.message_queue for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(52))
    assert [r.msg_id for r in results[:50]] == [m.unique_key for m in items[:50]]
    with PullConsumer(endpoints, config=consumer_config(pull_batch_size=100)) as consumer:
        table = read_all(consumer, [results[0].message_queue], 52)
    assert table.column("body").to_pylist()[50:] == [b"plain", b"tuple"]
    assert table.column("tags").to_pylist()[-1] == "TagT"


@pytest.mark.parametrize("columns_min_batch", [16, 0], ids=["columns", "messages"])
def test_send_batch_larger_than_a_commit_log_segment_is_split_to_fit(
    in_process_broker_factory, columns_min_batch
):
    segment = 64 * 1024  # the broker refuses a request whose records do not fit in one
    broker = in_process_broker_factory(
        store_options={"commitlog_segment_bytes": segment, "consumequeue_entries_per_file": 64}
    )
    with Admin(broker.endpoint, ClientConfig(retry=FAST_RETRY)) as admin:
        admin.create_topic("Big", queues=2)
        assert admin.broker_info()["broker-t"].limits["commitlog_segment_bytes"] == segment
    items = [Message(b"%04d" % i + b"." * 996, tags="T", keys=[f"k{i}"]) for i in range(300)]
    config = producer_config(columns_min_batch=columns_min_batch)
    with Producer(broker.endpoint, config=config) as producer:
        results = producer.send_batch("Big", items)  # ~330 KB: five segments' worth
    assert len({r.message_queue for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(300))
    assert [r.msg_id for r in results] == [m.unique_key for m in items]
    with PullConsumer(broker.endpoint, config=consumer_config(pull_batch_size=100)) as consumer:
        table = read_all(consumer, [results[0].message_queue], 300)
    assert table.column("body").to_pylist() == [m.body for m in items]


def test_plain_send_batch_over_a_segment_is_split_and_keeps_its_ids(in_process_broker_factory):
    broker = in_process_broker_factory(
        store_options={"commitlog_segment_bytes": 64 * 1024, "consumequeue_entries_per_file": 64}
    )
    with Admin(broker.endpoint, ClientConfig(retry=FAST_RETRY)) as admin:
        admin.create_topic("Plain", queues=2)
    items = [(b"%04d" % i + b"." * 996, ("A", "B", "")[i % 3]) for i in range(300)]
    with Producer(broker.endpoint, config=producer_config()) as producer:
        results = producer.send_batch("Plain", items)  # (body, tag) pairs: no Message each
    assert [r.queue_offset for r in results] == list(range(300))
    with PullConsumer(broker.endpoint, config=consumer_config(pull_batch_size=100)) as consumer:
        table = read_all(consumer, [results[0].message_queue], 300)
    assert table.column("body").to_pylist() == [body for body, _ in items]
    assert table.column("tags").to_pylist() == [tag or None for _, tag in items]
    assert table.column("msgId").to_pylist() == [r.offset_msg_id for r in results]
    stored_keys = [dict(p)["UNIQ_KEY"] for p in table.column("properties").to_pylist()]
    assert stored_keys == [r.msg_id for r in results] and len(set(stored_keys)) == 300


def test_send_async_futures_and_callbacks(producer):
    done = []
    lock = threading.Lock()

    def callback(future: Future) -> None:
        with lock:
            done.append(future.result().msg_id)

    futures = [producer.send_async(TOPIC, b"a%d" % i, callback=callback) for i in range(40)]
    results = [f.result(timeout=10) for f in futures]
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 40
    eventually(lambda: len(done) >= 40, what="every callback")
    assert sorted(done) == sorted(r.msg_id for r in results)
    failing = producer.send_async("NoSuchTopic", b"x")
    with pytest.raises(NotFoundError, match="NoSuchTopic"):
        failing.result(timeout=10)


def test_close_sends_the_pending_async_sends_then_refuses_new_ones(endpoints):
    producer = Producer(endpoints, config=producer_config())
    futures = [producer.send_async(TOPIC, b"p%d" % i) for i in range(50)]
    producer.close()  # most of these have not started yet
    assert [f.exception(timeout=0) for f in futures] == [None] * 50
    assert len({(r.message_queue, r.queue_offset) for r in (f.result() for f in futures)}) == 50
    with pytest.raises(RocketliteError, match="producer is closed"):
        producer.send_async(TOPIC, b"late")


def test_round_robin_fails_over_when_a_broker_stops(brokers, endpoints, caplog):
    config = producer_config(unavailable_broker_backoff_ms=60_000)
    with Producer(endpoints, config=config) as producer:
        producer.send(TOPIC, b"warm-up")  # route cached with both brokers
        brokers[0].server.stop(grace_s=0)
        with caplog.at_level(logging.WARNING, logger="rmq_spark.client"):
            results = [producer.send(TOPIC, b"m%d" % i) for i in range(10)]
        assert {r.message_queue.broker_name for r in results} == {"broker-b"}
        assert "retrying on another broker" in caplog.text
        # An explicit queue does not move: the error names the broker's endpoint.
        with pytest.raises(UnavailableError, match=brokers[0].endpoint):
            producer.send(TOPIC, b"x", queue=MessageQueue(TOPIC, "broker-a", 0))


def test_round_robin_gives_up_after_the_retries_naming_the_brokers(brokers, endpoints):
    with Producer(endpoints, config=producer_config()) as producer:
        producer.send(TOPIC, b"warm-up")
        for broker in brokers:
            broker.server.stop(grace_s=0)
        with pytest.raises(UnavailableError, match=r"failed 3 times \(brokers tried: broker-"):
            producer.send(TOPIC, b"x")


def test_delayed_send_has_no_offset_until_delivered(producer, endpoints):
    mq = MessageQueue(TOPIC, "broker-b", 0)
    sent = producer.send(TOPIC, b"later", queue=mq, delay_level=1)  # 200 ms on test brokers
    assert sent.queue_offset is None and len(sent.offset_msg_id) == 32
    with PullConsumer(endpoints, config=consumer_config()) as consumer:
        consumer.assign([mq])
        assert consumer.pull(mq).status == PullStatus.NO_NEW_MSG
        result = consumer.pull(mq, timeout_ms=3_000)
    assert result.batch.column("body").to_pylist() == [b"later"]
    assert dict(result.batch.column("properties")[0].as_py())["UNIQ_KEY"] == sent.msg_id


# --- pull consumer ------------------------------------------------------------------------


@pytest.fixture
def one_queue(producer):
    """Queue broker-a/0 holding 10 messages with tags TagA, TagB, TagC, none, TagA, ..."""
    mq = MessageQueue(TOPIC, "broker-a", 0)
    tags = ["TagA", "TagB", "TagC", None]
    for i in range(10):
        producer.send(TOPIC, b"m%d" % i, tags=tags[i % 4], queue=mq)
    return mq


def test_seek_position_and_offset_illegal(endpoints, one_queue, caplog):
    mq = one_queue
    with PullConsumer(endpoints, config=consumer_config(consume_from="LAST_OFFSET")) as consumer:
        consumer.assign([mq])
        assert consumer.position(mq) == 10  # no group: starts at the end
        consumer.seek(mq, 4)
        result = consumer.pull(mq, max_messages=3)
        assert result.batch.column("queueOffset").to_pylist() == [4, 5, 6]
        assert consumer.position(mq) == 7
        consumer.seek_to_beginning()
        assert consumer.position(mq) == 0
        consumer.seek_to_end([mq])
        assert consumer.pull(mq).status == PullStatus.NO_NEW_MSG
        consumer.seek(mq, 50)
        with caplog.at_level(logging.WARNING, logger="rmq_spark.client"):
            result = consumer.pull(mq)
        assert result.status == PullStatus.OFFSET_ILLEGAL
        # nothing was ever deleted from the queue: start over rather than skip (RocketMQ)
        assert consumer.position(mq) == result.next_begin_offset == 0
        assert "offset 50" in caplog.text and "illegal" in caplog.text
        with pytest.raises(InvalidArgumentError, match="not assigned"):
            consumer.seek(MessageQueue(TOPIC, "broker-b", 0), 0)
        with pytest.raises(InvalidArgumentError, match="-1"):
            consumer.seek(mq, -1)


def test_seek_to_timestamp(producer, endpoints):
    mq = MessageQueue(TOPIC, "broker-b", 1)
    before = producer.send(TOPIC, b"old", queue=mq)
    time.sleep(0.05)
    after = producer.send(TOPIC, b"new", queue=mq)
    assert after.store_timestamp_ms > before.store_timestamp_ms
    with PullConsumer(endpoints, config=consumer_config()) as consumer:
        consumer.assign([mq])
        consumer.seek_to_timestamp([mq], after.store_timestamp_ms)
        assert consumer.position(mq) == after.queue_offset
        consumer.seek_to_timestamp(None, after.store_timestamp_ms + 60_000)
        assert consumer.position(mq) == 2  # every message older: the end


def test_tag_subscription_rechecks_real_tags(endpoints, one_queue, producer):
    mq = one_queue
    # "Aa" and "BB" share Java's String.hashCode: the broker's hash filter lets both through.
    assert java_string_hash("Aa") == java_string_hash("BB")
    producer.send(TOPIC, b"collides", tags="BB", queue=mq)
    producer.send(TOPIC, b"wanted", tags="Aa", queue=mq)
    with PullConsumer(endpoints, subscription="TagA || TagC", config=consumer_config()) as c:
        c.assign([mq])
        result = c.pull(mq, max_messages=100)
        assert result.batch.column("tags").to_pylist() == ["TagA", "TagC", "TagA", "TagC", "TagA"]
        assert c.position(mq) == result.next_begin_offset == 12
    with PullConsumer(endpoints, subscription="Aa", config=consumer_config()) as c:
        c.assign([mq])
        c.seek(mq, 10)
        result = c.pull(mq)
        assert result.batch.column("body").to_pylist() == [b"wanted"]
        c.seek(mq, 10)
        only_collision = c.pull(mq, max_messages=1)
        assert only_collision.status == PullStatus.NO_MATCHED_MSG  # "BB" removed client side
        assert only_collision.message_count == 0 and c.position(mq) == 11


def test_commit_and_committed(endpoints, one_queue, admin):
    mq = one_queue
    with PullConsumer(endpoints, group="client-group", config=consumer_config()) as consumer:
        consumer.assign(consumer.queues(TOPIC))
        assert consumer.committed(mq) is None
        results = consumer.poll()
        assert [r.message_queue for r in results] == [mq]
        assert consumer.commit() == {q: (10 if q == mq else 0) for q in all_queues()}
        assert consumer.committed(mq) == 10
        consumer.seek(mq, 3)
        assert consumer.commit({mq: 3}) == {mq: 10}  # increase-only by default
        assert consumer.commit({mq: 3}, increase_only=False) == {mq: 3}
    # A new consumer of the group starts at the committed offset, not consume_from.
    with PullConsumer(endpoints, group="client-group", config=consumer_config()) as consumer:
        consumer.assign([mq])
        assert consumer.position(mq) == 3
    assert admin.consumer_offsets("client-group", TOPIC)[mq] == 3
    with (
        PullConsumer(endpoints, config=consumer_config()) as anonymous,
        pytest.raises(InvalidArgumentError, match="commit needs a consumer group"),
    ):
        anonymous.commit()


def test_poll_long_polls_until_a_message_arrives(endpoints, producer):
    with PullConsumer(endpoints, config=consumer_config(consume_from="LAST_OFFSET")) as consumer:
        consumer.assign(all_queues())
        started = time.monotonic()
        assert consumer.poll(timeout_ms=300) == []
        assert 0.25 < time.monotonic() - started < 2.0
        timer = threading.Timer(0.3, lambda: producer.send(TOPIC, b"late"))
        timer.start()
        started = time.monotonic()
        results = consumer.poll(timeout_ms=5_000)
        waited = time.monotonic() - started
        timer.join()
    assert [r.batch.column("body").to_pylist() for r in results] == [[b"late"]]
    assert 0.2 < waited < 2.0


def test_poll_skips_a_stopped_broker(brokers, endpoints, producer, caplog):
    producer.send(TOPIC, b"on-b", queue=MessageQueue(TOPIC, "broker-b", 2))
    with PullConsumer(endpoints, config=consumer_config()) as consumer:
        consumer.assign(all_queues())
        consumer.position(all_queues()[0])  # positions known before the broker goes
        brokers[0].server.stop(grace_s=0)
        with caplog.at_level(logging.WARNING, logger="rmq_spark.client"):
            results = consumer.poll()
    assert [r.message_queue.broker_name for r in results] == ["broker-b"]
    assert "skipped" in caplog.text


# --- admin --------------------------------------------------------------------------------


def test_admin_topics_across_brokers(admin):
    created = admin.create_topic("AdminTopic", queues=2, broker="broker-b")
    assert list(created) == ["broker-b"] and created["broker-b"].read_queue_nums == 2
    topics = admin.list_topics()
    assert [t.broker_name for t in topics[TOPIC]] == ["broker-a", "broker-b"]
    assert [t.broker_name for t in topics["AdminTopic"]] == ["broker-b"]
    assert all(not name.startswith("%") for name in topics)
    updated = admin.update_topic("AdminTopic", write_queues=1)
    assert updated["broker-b"].write_queue_nums == 1
    route = admin.describe_topic("AdminTopic")
    assert [q.queue_id for q in route.writable] == [0]
    assert [q.queue_id for q in route.readable] == [0, 1]
    assert admin.delete_topic("AdminTopic") == ["broker-b"]
    with pytest.raises(NotFoundError, match="'AdminTopic' does not exist on any broker"):
        admin.describe_topic("AdminTopic")
    info = admin.broker_info()
    assert sorted(info) == ["broker-a", "broker-b"]
    assert info["broker-a"].limits["max_request_bytes"] == 64 << 20


def test_admin_offsets_and_progress(admin, producer):
    mq = MessageQueue(TOPIC, "broker-a", 2)
    for i in range(5):
        producer.send(TOPIC, b"p%d" % i, queue=mq)
    offsets = admin.query_offsets(all_queues())
    assert offsets[mq].min_offset == 0 and offsets[mq].max_offset == 5
    assert offsets[mq].timestamp_offset is None
    stamped = admin.query_offsets([mq], timestamp_ms=0)
    assert stamped[mq].timestamp_offset == 0
    assert admin.consumer_offsets("admin-group", TOPIC) == {}
    committed = admin.commit_offsets("admin-group", {mq: 2})
    assert committed[mq].offset == 2 and committed[mq].updated
    assert admin.commit_offsets("admin-group", {mq: 1}, increase_only=True)[mq].offset == 2
    assert admin.consumer_offsets("admin-group", TOPIC) == {mq: 2}
    rows = {row.message_queue: row for row in admin.consumer_progress("admin-group", TOPIC)}
    assert (rows[mq].broker_max_offset, rows[mq].committed_offset, rows[mq].lag) == (5, 2, 3)


# --- errors -------------------------------------------------------------------------------


def test_errors_name_the_bad_values(admin, producer, endpoints):
    with pytest.raises(NotFoundError, match="'Missing' does not exist on any broker"):
        producer.send("Missing", b"x")
    with pytest.raises(AlreadyExistsError):
        admin.create_topic(TOPIC, queues=8)  # exists with another queue count
    with pytest.raises(InvalidNameError, match="bad topic"):
        admin.describe_topic("bad topic")  # raised by the broker, class kept over the wire
    with pytest.raises(InvalidArgumentError, match="UNIQ_KEY"):
        producer.send(TOPIC, b"x", properties={"UNIQ_KEY": "mine"})
    with pytest.raises(InvalidArgumentError, match="queue_id=9 is out of range"):
        producer.send(TOPIC, b"x", queue=MessageQueue(TOPIC, "broker-a", 9))
    with pytest.raises(NotFoundError, match="broker 'broker-z'"):
        producer.send(TOPIC, b"x", queue=MessageQueue(TOPIC, "broker-z", 0))
    with PullConsumer(endpoints) as consumer:
        with pytest.raises(NotFoundError, match="'broker-z'"):
            consumer.assign([MessageQueue(TOPIC, "broker-z", 0)])
        with pytest.raises(NotFoundError, match="broker 'broker-a' has 4 read queues"):
            consumer.assign([MessageQueue(TOPIC, "broker-a", 7)])
    with pytest.raises(InvalidArgumentError, match=r"'127\.0\.0\.1'"):
        Producer(endpoints + ",127.0.0.1")
    with pytest.raises(InvalidArgumentError, match=r"subscription expression 'A \|'"):
        PullConsumer(endpoints, subscription="A |")


def test_write_protected_topic_is_permission_denied(admin, producer):
    admin.create_topic("ReadOnly", queues=1, broker="broker-a", perm=4)
    with pytest.raises(PermissionDeniedError, match="no writable queue"):
        producer.send("ReadOnly", b"x")


def test_two_brokers_with_one_name_are_refused(in_process_broker_factory):
    twins = [in_process_broker_factory(name="twin") for _ in range(2)]
    endpoints = [b.endpoint for b in twins]
    for twin in twins:
        with Admin(twin.endpoint) as single:
            single.create_topic("TwinTopic")
    for check in (lambda admin: admin.describe_topic("TwinTopic"), Admin.broker_info):
        with (
            Admin(endpoints) as admin,
            pytest.raises(InvalidArgumentError, match="both report broker name 'twin'"),
        ):
            check(admin)


def test_unreachable_endpoint_is_named(in_process_broker_factory):
    broker = in_process_broker_factory(name="broker-a")
    dead = "127.0.0.1:1"
    with Admin([broker.endpoint, dead], ClientConfig(retry=FAST_RETRY)) as admin:
        with pytest.raises(UnavailableError, match=r"list topics failed on 127\.0\.0\.1:1"):
            admin.list_topics()
        admin.create_topic("HalfTopic", broker="broker-a")
        route = admin.describe_topic("HalfTopic")  # the reachable broker is enough
        assert list(route.brokers) == ["broker-a"]


# --- brokers as processes -----------------------------------------------------------------


def test_two_broker_processes_round_trip(broker_factory):
    pair = [broker_factory(name) for name in ("broker-a", "broker-b")]
    endpoints = ",".join(b.endpoint for b in pair)
    with Admin(endpoints) as admin:
        admin.create_topic("ProcTopic", queues=2)
    with Producer(endpoints) as producer:
        sent = producer.send_batch("ProcTopic", [b"one", b"two"])
        sent += [producer.send("ProcTopic", b"m%d" % i) for i in range(4)]
    assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}
    with PullConsumer(endpoints, group="proc-group", config=consumer_config()) as consumer:
        queues = consumer.queues("ProcTopic")
        assert queues == [
            MessageQueue("ProcTopic", b, q) for b in ("broker-a", "broker-b") for q in (0, 1)
        ]
        table = read_all(consumer, queues, 6)
        consumer.commit()
    assert sorted(table.column("body").to_pylist()) == sorted(
        [b"one", b"two"] + [b"m%d" % i for i in range(4)]
    )
    with Admin(endpoints) as admin:
        progress = admin.consumer_progress("proc-group", "ProcTopic")
    assert [row.lag for row in progress] == [0, 0, 0, 0]
    assert sum(row.committed_offset for row in progress) == 6
