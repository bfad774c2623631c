"""Pop consumption through restarts, dead letters and a shared push group: what a RocketMQ 5
consumer group relies on, checked with the official client against a real broker process."""

from __future__ import annotations

import threading
import time
from collections import Counter

from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

from rmq_spark.client import Admin
from rmq_spark.client import Producer as RocketliteProducer
from tests.support.broker_harness import free_port, read_queue
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import Code, RawV2, config, running


def test_in_flight_state_survives_sigkill_and_clean_stop(broker_factory):
    port = free_port()
    broker = broker_factory("broker-pop", "--port", str(port))
    with Admin(broker.endpoint) as admin:
        admin.create_topic("pop-restart", queues=2)
    with RocketliteProducer(broker.endpoint) as producer:
        for i in range(6):
            producer.send("pop-restart", f"m{i}".encode())
    raw = RawV2(broker.endpoint)
    try:
        status, messages = raw.receive("g-restart", "pop-restart", invisible_s=10)
        assert status.code == Code.OK and len(messages) == 6
        acked = {m.body for m in messages[:3]}
        for message in messages[:3]:
            assert raw.ack("g-restart", "pop-restart", message.system_properties.receipt_handle)
        # two of the unacked come back soon, one stays invisible for its 10 s
        soon = messages[3:5]
        for message in soon:
            raw.change_invisible(
                "g-restart", "pop-restart", message.system_properties.receipt_handle, 1
            )
        late = messages[5]
        unacked = sorted(m.body for m in messages[3:])
    finally:
        raw.close()

    for stop in (broker.kill, broker.stop):
        stop()
        broker.start()
        assert broker.port == port
        raw = RawV2(broker.endpoint)
        try:
            # one receive answers as soon as one queue has something: collect for a while
            messages = []
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and not {m.body for m in soon} <= {
                m.body for m in messages
            }:
                messages += raw.receive("g-restart", "pop-restart", wait_s=1)[1]
            bodies = sorted(m.body for m in messages)
            assert acked.isdisjoint(bodies)  # an acked message never comes back
            assert set(bodies) <= {m.body for m in soon} | {late.body}
            assert {m.body for m in soon} <= set(bodies) or stop is broker.stop
            # hand them back quickly for the next round
            for message in messages:
                raw.change_invisible(
                    "g-restart", "pop-restart", message.system_properties.receipt_handle, 0.2
                )
        finally:
            raw.close()

    # finally everything unacked is delivered again, with attempts counted across restarts
    raw = RawV2(broker.endpoint)
    try:
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:
            _, messages = raw.receive("g-restart", "pop-restart", wait_s=2)
            for message in messages:
                seen[message.body] = message.system_properties.delivery_attempt
                raw.ack("g-restart", "pop-restart", message.system_properties.receipt_handle)
        assert sorted(seen) == unacked
        for message in soon:  # first delivery + one per restart round, counted across restarts
            assert seen[message.body] >= 3, seen
        with Admin(broker.endpoint) as admin:
            progress = admin.consumer_progress("g-restart", "pop-restart")
        assert sum(p.lag for p in progress) == 0, progress
    finally:
        raw.close()


def test_message_goes_to_the_dead_letter_queue_after_the_last_attempt(broker_factory):
    broker = broker_factory("broker-dlq", "--max-reconsume-times", "1")  # 2 attempts
    with Admin(broker.endpoint) as admin:
        admin.create_topic("pop-dlq", queues=1)
    with RocketliteProducer(broker.endpoint) as producer:
        poison = producer.send("pop-dlq", b"poison", tags="Bad", properties={"why": "test"})
        producer.send("pop-dlq", b"fine")
    raw = RawV2(broker.endpoint)
    try:
        attempts = []
        for _ in range(3):
            _, messages = raw.receive("g-dlq", "pop-dlq", wait_s=2)
            for message in messages:
                if message.body == b"fine":
                    raw.ack("g-dlq", "pop-dlq", message.system_properties.receipt_handle)
                    continue
                attempts.append(message.system_properties.delivery_attempt)
                raw.change_invisible(
                    "g-dlq", "pop-dlq", message.system_properties.receipt_handle, 0
                )
            time.sleep(0.1)
        assert attempts == [1, 2]  # then no third delivery: it went to %DLQ%g-dlq
        dead = read_queue(broker.endpoint, "%DLQ%g-dlq", 0, "broker-dlq")
        assert [row["body"] for row in dead] == [b"poison"]
        props = dict(dead[0]["properties"])
        assert props["UNIQ_KEY"] == poison.msg_id and props["why"] == "test"
        assert dead[0]["tags"] == "Bad"
        with Admin(broker.endpoint) as admin:
            progress = admin.consumer_progress("g-dlq", "pop-dlq")
        assert [p.lag for p in progress] == [0]  # dead-lettered counts as done
    finally:
        raw.close()


class Counting(MessageListener):
    def __init__(self, counter: Counter, lock: threading.Lock) -> None:
        self.counter, self.lock = counter, lock

    def consume(self, message):
        with self.lock:
            self.counter[message.body] += 1
        return ConsumeResult.SUCCESS


def test_three_official_push_consumers_share_a_group_under_load(broker_factory):
    broker = broker_factory("broker-share")
    with Admin(broker.endpoint) as admin:
        admin.create_topic("pop-share", queues=8)
    counter: Counter = Counter()
    lock = threading.Lock()
    consumers = [
        PushConsumer(
            config(broker.endpoint), "g-share", Counting(counter, lock),
            {"pop-share": FilterExpression()},
        )
        for _ in range(3)
    ]  # fmt: skip
    total = 3000
    with running(consumers[0]), running(consumers[1]), running(consumers[2]):
        with RocketliteProducer(broker.endpoint) as producer:
            for start in range(0, total, 100):
                producer.send_batch(
                    "pop-share", [f"{i}".encode() for i in range(start, start + 100)]
                )
        eventually(lambda: len(counter) >= total, what=f"{total} messages consumed", timeout=60)
    assert set(counter) == {f"{i}".encode() for i in range(total)}  # nothing lost
    duplicates = sum(n - 1 for n in counter.values())
    # a message is delivered twice only when its 60 s auto-renewed invisibility ran out or
    # its consumer left: neither happens here
    assert duplicates == 0, duplicates
    with Admin(broker.endpoint) as admin:
        eventually(
            lambda: sum(p.lag for p in admin.consumer_progress("g-share", "pop-share")) == 0,
            what="the group's committed offsets reach the end",
            timeout=10,
        )
