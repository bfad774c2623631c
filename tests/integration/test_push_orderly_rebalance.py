"""Orderly consumption keeps each queue's order while queues move between members.

A member joins and another leaves while messages keep arriving and the listener keeps
failing some of them (SUSPEND_CURRENT_QUEUE_A_MOMENT). What a user of orderly consumption
relies on: in every queue, the messages that were consumed form exactly the sequence
0, 1, 2, ... in the order they were consumed, across members, with nothing consumed twice
and nothing skipped.
"""

from __future__ import annotations

import itertools
import threading
import time

from rmq_spark.client import Admin, Producer
from rmq_spark.client.push import (
    OrderlyStatus,
    PushConsumer,
    PushConsumerConfig,
)
from tests.support.eventually import eventually

TOPIC, GROUP, QUEUES = "OrderlyMoves", "OrderlyMovesGroup", 4
#: how long each stage may take (rebalances and lease hand-overs on a loaded machine)
WAIT_S = 60.0


class Journal:
    """Successful consumptions in the order they happened, across members."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = itertools.count()
        self.done: list[tuple[int, int, int, str]] = []  # (seq, queue, offset, member)
        self.suspended: set[tuple[int, int]] = set()

    def listener(self, member: str):
        def on_messages(messages, context):
            for m in messages:
                key = (m.message_queue.queue_id, m.queue_offset)
                with self.lock:
                    if m.queue_offset % 13 == 5 and key not in self.suspended:
                        self.suspended.add(key)  # fail once: the queue must wait for it
                        context.suspend_current_queue_time_ms = 50
                        return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            time.sleep(0.002)  # some work, so hand-overs find messages in flight
            with self.lock:
                for m in messages:
                    self.done.append(
                        (next(self.seq), m.message_queue.queue_id, m.queue_offset, member)
                    )
            return OrderlyStatus.SUCCESS

        return on_messages

    def per_queue(self) -> dict[int, list[int]]:
        with self.lock:
            rows = sorted(self.done)
        out: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
        for _, queue, offset, _ in rows:
            out[queue].append(offset)
        return out

    def members_of(self, queue: int) -> set[str]:
        with self.lock:
            return {member for _, q, _, member in self.done if q == queue}


def owned(consumer: PushConsumer) -> int:
    """How many of the topic's queues ``consumer`` consumes (its retry queue left out)."""
    return sum(mq.topic == TOPIC for mq in consumer.assignment())


def test_orderly_queues_keep_their_order_through_rebalance_and_failures(broker_factory):
    broker = broker_factory("broker-a")
    Admin(broker.endpoint).create_topic(TOPIC, queues=QUEUES)
    journal = Journal()
    sent = [0] * QUEUES
    stop = threading.Event()

    def produce() -> None:
        with Producer(broker.endpoint) as producer:
            for i in itertools.count():
                if stop.is_set():
                    return
                queue = i % QUEUES
                producer.send_batch(TOPIC, [f"{queue}-{sent[queue] + k}" for k in range(5)],
                                    queue=queue)  # fmt: skip
                sent[queue] += 5
                time.sleep(0.01)

    def member(name: str) -> PushConsumer:
        config = PushConsumerConfig(
            consume_from="FIRST_OFFSET",
            queue_lease_ms=3_000,
            long_poll_ms=500,
            persist_interval_ms=300,
            rebalance_interval_ms=2_000,
            consume_message_batch_max_size=2,
        )
        consumer = PushConsumer(GROUP, broker.endpoint, config=config)
        consumer.subscribe(TOPIC)
        consumer.register_listener(journal.listener(name), orderly=True)
        return consumer.start()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    a = member("a")
    b = None
    try:
        eventually(
            lambda: all(len(v) >= 20 for v in journal.per_queue().values()),
            what="a consuming",
            timeout=WAIT_S,
        )
        b = member("b")
        eventually(
            lambda: owned(a) == 2 and owned(b) == 2,
            what="the queues split between a and b",
            timeout=WAIT_S,
        )
        counts = {q: len(v) for q, v in journal.per_queue().items()}
        eventually(
            lambda: all(len(v) >= counts[q] + 20 for q, v in journal.per_queue().items()),
            what="both members consuming",
            timeout=WAIT_S,
        )
        a.shutdown()  # graceful: b takes every queue
        eventually(lambda: owned(b) == QUEUES, what="b owning every queue", timeout=WAIT_S)
        stop.set()
        producer.join(10)
        eventually(
            lambda: [len(v) for v in journal.per_queue().values()] == sent,
            what="every sent message consumed",
            timeout=WAIT_S,
        )
    finally:
        stop.set()
        a.shutdown()
        if b is not None:
            b.shutdown()

    per_queue = journal.per_queue()
    for queue, offsets in per_queue.items():
        # consumed in order, each once, none skipped: exactly 0, 1, 2, ...
        assert offsets == list(range(sent[queue])), f"queue {queue} out of order or gapped"
    moved = [q for q in range(QUEUES) if journal.members_of(q) == {"a", "b"}]
    assert moved, "no queue was handed over from a to b: the test exercised nothing"
    assert {q for q, _ in journal.suspended} == set(range(QUEUES))  # failures in every queue
    committed = Admin(broker.endpoint).consumer_offsets(GROUP, TOPIC)
    assert sorted(committed.values()) == sorted(sent)
