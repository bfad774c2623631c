"""Workloads that run against a broker while it is hurt, and what they saw.

* :class:`ProducerLoad`: a thread sending small batches; every acknowledged message is kept
  (body -> where it was stored), every batch whose answer was lost is kept as "unknown"
  (stored or not: the producer cannot tell).
* :class:`PushLoad`: a push consumer group member; every delivered body is counted.
* :class:`OffsetWatch`: polls a group's committed offsets and records any queue whose
  committed offset went back.

Each retries through outages by itself, the way a user's service would, and stops when
told. The checks at the end are the test's.
"""

from __future__ import annotations

import collections
import threading
import time

import grpc

from rmq_spark.client import Producer
from rmq_spark.client.connection import RetryPolicy
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig
from rmq_spark.errors import RocketliteError
from rmq_spark.wire.proto_gen.rocketlite.v1 import offsets_pb2, offsets_pb2_grpc

#: a client that rides through a restart of a few seconds by itself
PATIENT = RetryPolicy(attempts=8, backoff_ms=200, max_backoff_ms=2_000)


class ProducerLoad(threading.Thread):
    def __init__(self, endpoint: str, topic: str, name: str, batch: int = 20) -> None:
        super().__init__(name=f"chaos-producer-{name}", daemon=True)
        self.endpoint, self.topic, self.prefix, self.batch = endpoint, topic, name, batch
        self.acked: dict[bytes, tuple[int, int]] = {}  # body -> (queue id, queue offset)
        self.unknown: set[bytes] = set()
        self.errors: collections.Counter[str] = collections.Counter()
        self._stopping = threading.Event()

    def run(self) -> None:
        sequence = 0
        with Producer(self.endpoint, config=ProducerConfig(retry=PATIENT)) as producer:
            while not self._stopping.is_set():
                bodies = [f"{self.prefix}-{sequence + i}".encode() for i in range(self.batch)]
                sequence += self.batch
                try:
                    results = producer.send_batch(self.topic, bodies)
                except RocketliteError as exc:
                    self.unknown.update(bodies)
                    self.errors[type(exc).__name__] += 1
                    time.sleep(0.2)
                    continue
                for body, result in zip(bodies, results, strict=True):
                    assert result.queue_offset is not None
                    self.acked[body] = (result.message_queue.queue_id, result.queue_offset)
                time.sleep(0.01)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)


class PushLoad:
    def __init__(self, endpoint: str, topic: str, group: str) -> None:
        self.seen: collections.Counter[bytes] = collections.Counter()
        self._lock = threading.Lock()
        self.consumer = PushConsumer(
            group,
            endpoint,
            config=PushConsumerConfig(
                consume_from="FIRST_OFFSET", persist_interval_ms=300, retry=PATIENT
            ),
        )
        self.consumer.subscribe(topic, "*")
        self.consumer.register_listener(self._on_messages)

    def _on_messages(self, messages, context):
        with self._lock:
            self.seen.update(bytes(m.body) for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    def start(self) -> None:
        self.consumer.start()

    def stop(self) -> None:
        self.consumer.shutdown()


class OffsetWatch(threading.Thread):
    """Committed offsets of ``groups`` on ``topic``, polled; ``went_back`` lists every
    (group, queue id, before, after) where an answer was lower than an earlier one (after
    is -1 when the commit was gone altogether)."""

    def __init__(self, endpoint: str, topic: str, groups: list[str]) -> None:
        super().__init__(name="chaos-offset-watch", daemon=True)
        self.endpoint, self.topic, self.groups = endpoint, topic, groups
        self.highest: dict[tuple[str, int], int] = {}
        self.went_back: list[tuple[str, int, int, int]] = []
        self.observations = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(0.2):
            self.look()

    def look(self) -> None:
        """Read every group's committed offsets once and compare them with the highest seen.

        The test also calls this right before a kill and right after the restart, before
        consumers had time to commit again: that is when a commit lost by the kill shows.
        Each look connects afresh (a channel of its own, waiting for the broker), so it is
        not held back by the reconnect backoff the clients share.
        """
        channel = grpc.insecure_channel(
            self.endpoint, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        stub = offsets_pb2_grpc.OffsetServiceStub(channel)
        try:
            for group in self.groups:
                request = offsets_pb2.QueryConsumerOffsetsRequest(consumer_group=group)
                try:
                    answer = stub.QueryConsumerOffsets(request, timeout=5, wait_for_ready=True)
                except grpc.RpcError:
                    continue  # the broker is down: nothing to compare
                self._compare(group, answer)
        finally:
            channel.close()

    def _compare(self, group: str, answer) -> None:
        now = {
            item.queue.queue_id: item.offset
            for item in answer.offsets
            if item.queue.topic == self.topic and item.HasField("offset")
        }
        with self._lock:
            self.observations += 1
            known = {q for g, q in self.highest if g == group}
            for queue_id in known | now.keys():
                before = self.highest.get((group, queue_id), -1)
                after = now.get(queue_id, -1)  # -1: the commit is gone altogether
                if after < before:
                    self.went_back.append((group, queue_id, before, after))
                self.highest[(group, queue_id)] = max(before, after)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)
