"""Auto batching (``ProducerConfig(auto_batch=True)``) against a real broker process.

What a user sees: single sends that arrive together are stored together (runs of
consecutive offsets in one queue, where plain round robin puts each message in the next
queue), every message is stored exactly once with its own SendResult, a lone send is not
held back, ``close()`` sends what is held, errors reach each message's future, and sends
with a queue, a sharding key or a delay keep their usual behaviour.
"""

from __future__ import annotations

import threading
import time

import pytest

from rmq_spark.client import (
    Admin,
    ClientConfig,
    ConsumerConfig,
    Producer,
    ProducerConfig,
    PullConsumer,
    RetryPolicy,
)
from rmq_spark.errors import NotFoundError

FAST_RETRY = RetryPolicy(attempts=2, backoff_ms=20, max_backoff_ms=50)
TOPIC = "AutoBatch"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess

    base = tmp_path_factory.mktemp("auto-batch")
    broker = BrokerProcess("broker-a", base / "store", base / "broker.log", TEST_STORE_FLAGS)
    broker.start()
    with Admin(broker.endpoint, ClientConfig(retry=FAST_RETRY)) as admin:
        for topic in (TOPIC, "Lone", "Closing", "Threads", "Ordered", "Full", "Left", "Right"):
            admin.create_topic(topic, queues=4)
    yield broker.endpoint
    broker.clean_up()


def producer(endpoint: str, **settings) -> Producer:
    config = ProducerConfig(
        retry=FAST_RETRY, request_timeout_ms=10_000, auto_batch=True, **settings
    )
    return Producer(endpoint, config=config)


def stored_bodies(endpoint: str, topic: str, expect: int) -> list[bytes]:
    """Every body stored in ``topic``, in (queue, offset) order; waits for ``expect``."""
    config = ConsumerConfig(retry=FAST_RETRY, consume_from="FIRST_OFFSET")
    with PullConsumer(endpoint, config=config) as consumer:
        queues = consumer.queues(topic)
        consumer.assign(queues)
        consumer.seek_to_beginning(queues)
        rows = []
        deadline = time.monotonic() + 10
        while len(rows) < expect and time.monotonic() < deadline:
            for result in consumer.poll(timeout_ms=500):
                table = result.batch.to_pydict()
                rows += zip(table["queueId"], table["queueOffset"], table["body"], strict=True)
    return [body for _, _, body in sorted(rows)]


def runs(results) -> int:
    """How many runs of consecutive offsets in one queue the results form, in send order."""
    count, previous = 0, None
    for r in results:
        if previous is None or (r.message_queue, r.queue_offset) != (
            previous.message_queue,
            previous.queue_offset + 1,
        ):
            count += 1
        previous = r
    return count


def test_single_sends_that_arrive_together_are_stored_together(endpoint) -> None:
    bodies = [b"m%04d" % i for i in range(400)]
    with producer(endpoint) as p:
        futures = [p.send_async(TOPIC, body, tags="TagA") for body in bodies]
        results = [f.result(timeout=30) for f in futures]
    # Each message has its own place: no two share a queue offset.
    assert len({(r.message_queue, r.queue_offset) for r in results}) == len(bodies)
    assert len({r.msg_id for r in results}) == len(bodies)
    # Round robin without batching would give 400 runs of one message each.
    assert runs(results) <= 200, f"{runs(results)} runs for 400 messages: nothing was batched"
    assert sorted(stored_bodies(endpoint, TOPIC, len(bodies))) == bodies


def test_a_lone_send_is_not_held_for_the_batch_delay(endpoint) -> None:
    with producer(endpoint, batch_max_delay_ms=20_000) as p:
        p.send("Lone", b"warm-up")
        started = time.monotonic()
        result = p.send("Lone", b"alone", keys="k1")
        took = time.monotonic() - started
    assert took < 5, f"a lone send took {took:.1f} s; it waited for the batch delay"
    assert result.queue_offset is not None
    assert sorted(stored_bodies(endpoint, "Lone", 2)) == [b"alone", b"warm-up"]


def test_close_sends_what_is_held(endpoint) -> None:
    bodies = [b"c%04d" % i for i in range(300)]
    p = producer(endpoint, batch_max_delay_ms=30_000)
    futures = [p.send_async("Closing", body) for body in bodies]
    p.close()  # long before any batch delay: the held messages go out now
    assert all(f.done() for f in futures)
    results = [f.result() for f in futures]
    assert runs(results) < len(bodies)  # some were held, and sent by close()
    assert sorted(stored_bodies(endpoint, "Closing", len(bodies))) == bodies


def test_many_threads_sending_one_message_at_a_time(endpoint) -> None:
    results, errors = [], []
    lock = threading.Lock()

    def sender(k: int) -> None:
        try:
            for i in range(25):
                result = p.send("Threads", b"t%d-%02d" % (k, i))
                with lock:
                    results.append(result)
        except Exception as exc:  # reported below, with the others' results
            errors.append(exc)

    with producer(endpoint) as p:
        threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 200
    expected = sorted(b"t%d-%02d" % (k, i) for k in range(8) for i in range(25))
    assert sorted(stored_bodies(endpoint, "Threads", 200)) == expected


def test_two_topics_at_once_keep_their_messages_apart(endpoint) -> None:
    futures: dict[str, list] = {"Left": [], "Right": []}

    def sender(topic: str) -> None:
        futures[topic] = [p.send_async(topic, b"%s-%03d" % (topic.encode(), i)) for i in range(150)]

    with producer(endpoint) as p:
        threads = [threading.Thread(target=sender, args=(topic,)) for topic in futures]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for topic, sent in futures.items():
            assert {f.result(timeout=30).message_queue.topic for f in sent} == {topic}
    for topic in futures:
        expected = sorted(b"%s-%03d" % (topic.encode(), i) for i in range(150))
        assert sorted(stored_bodies(endpoint, topic, 150)) == expected


def test_a_failed_batch_fails_each_of_its_messages_and_the_producer_goes_on(endpoint) -> None:
    with producer(endpoint) as p:
        futures = [p.send_async("NoSuchTopic", b"x%d" % i) for i in range(5)]
        for future in futures:
            with pytest.raises(NotFoundError, match="NoSuchTopic"):
                future.result(timeout=30)
        assert p.send(TOPIC, b"after the failure").queue_offset is not None


def test_sharding_key_sends_stay_in_order_in_one_queue(endpoint) -> None:
    with producer(endpoint) as p:
        results = [p.send("Ordered", b"o%02d" % i, sharding_key="order-7") for i in range(50)]
    assert len({r.message_queue for r in results}) == 1
    offsets = [r.queue_offset for r in results]
    assert offsets == sorted(offsets) == list(range(offsets[0], offsets[0] + 50))


def test_a_full_accumulator_sends_on_its_own(endpoint) -> None:
    # Room for about one message: the others are sent one by one, and all are stored.
    with producer(endpoint, batch_max_bytes=200, total_batch_max_bytes=200) as p:
        futures = [p.send_async("Full", b"f%02d" % i) for i in range(30)]
        results = [f.result(timeout=30) for f in futures]
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 30
    assert sorted(stored_bodies(endpoint, "Full", 30)) == sorted(b"f%02d" % i for i in range(30))


def test_bad_settings_are_refused_with_the_setting_named() -> None:
    from rmq_spark.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="batch_max_delay_ms=0"):
        ProducerConfig(auto_batch=True, batch_max_delay_ms=0)
    with pytest.raises(InvalidArgumentError, match="batch_max_bytes=4194304"):
        ProducerConfig(batch_max_bytes=4 << 20)
    with pytest.raises(InvalidArgumentError, match="total_batch_max_bytes=10"):
        ProducerConfig(batch_max_bytes=100, total_batch_max_bytes=10)
