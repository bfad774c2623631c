"""A RocketMQ 5 push consumer that dies hands its in-flight messages to the rest of its group
in seconds, not after the 60 s client timeout.

Push consumers of the official client receive with ``auto_renew``: what they received stays
invisible while the client is alive. The broker takes a client whose last Telemetry stream
closed for the reconnect grace (1 s) as gone, puts its messages back at once and wakes the
receives waiting for them. Here an official push consumer in a process of its own
(``tests/support/rocketmq5_member.py``, whose listener blocks, so everything it received
stays in flight) is SIGKILLed, and the time until a second consumer of the group has every
one of those messages is measured; for a FIFO group too, whose message groups the dead
consumer blocked. A graceful shutdown is not taken for a crash, and a client that reopens
its stream within the grace keeps its messages.
Run with ``pytest -s`` to see the figures.
"""

from __future__ import annotations

import collections
import select
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rmq_spark.client import Admin
from tests.support import scripts
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import Code, RawV2, config, running

#: from the kill to the survivor holding every message the dead consumer had in flight
FAILOVER_BOUND_S = 3.0
#: how long a started survivor is given to have its first long poll waiting at the broker
SETTLE_S = 2.0


class Member:
    """One ``rocketmq5_member`` process (``tests/support``) and the messages its listener
    was handed."""

    def __init__(self, tmp_path: Path, endpoint: str, group: str, topic: str, threads=20):
        self.out_path = tmp_path / f"member-{uuid.uuid4().hex[:6]}.out"
        self.err_path = self.out_path.with_suffix(".err")
        self.command = scripts.command(
            "rocketmq5_member", "--endpoint", endpoint, "--group", group,
            "--topic", topic, "--out", str(self.out_path), "--threads", str(threads),
        )  # fmt: skip
        self.process: subprocess.Popen | None = None

    def spawn(self) -> Member:
        with open(self.err_path, "ab") as err:
            self.process = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=err, env=scripts.env()
            )
        return self

    def wait_ready(self, timeout_s: float = 30) -> str:
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline().decode() if ready else ""
        assert line.startswith("ready "), f"member did not start:\n{self.err_tail()}"
        return line.split()[1]

    def handed(self) -> list[tuple[str, bytes]]:
        """(message group or "-", body) per listener call, in call order."""
        if not self.out_path.exists():
            return []
        lines = self.out_path.read_bytes().splitlines()
        return [(g.decode(), body) for g, body in (line.split(b" ", 1) for line in lines)]

    def err_tail(self, lines: int = 30) -> str:
        if not self.err_path.exists():
            return ""
        return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Recorder(MessageListener):
    """The survivor: consumes every message and notes when it got it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bytes, int, float]] = []  # group, body, attempt, when

    def consume(self, message):
        with self.lock:
            self.seen.append(
                (message.message_group or "-", message.body, message.delivery_attempt,
                 time.monotonic())
            )  # fmt: skip
        return ConsumeResult.SUCCESS

    def bodies(self) -> collections.Counter:
        with self.lock:
            return collections.Counter(body for _, body, _, _ in self.seen)


def message(topic: str, body: bytes, group: str | None = None) -> Message:
    out = Message()
    out.topic = topic
    out.body = body
    if group:
        out.message_group = group
    return out


@pytest.fixture
def setup(broker_factory, tmp_path):
    broker = broker_factory("broker-v2-failover")
    members: list[Member] = []

    def member(group: str, topic: str, threads: int = 20) -> Member:
        m = Member(tmp_path, broker.endpoint, group, topic, threads)
        members.append(m.spawn())
        return m

    yield broker, member
    for m in members:
        m.close()


def kill_and_time_failover(victim: Member, survivor: Recorder, wanted: set[bytes]) -> float:
    """SIGKILL the victim; seconds until the survivor has every body in ``wanted``."""
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.process.wait()

    def all_taken() -> float:
        with survivor.lock:
            times = {body: when for _, body, _, when in survivor.seen}
        missing = wanted - set(times)
        assert not missing, f"{len(missing)} messages not with the survivor yet"
        return max(times[body] for body in wanted)

    taken_at = eventually(
        all_taken, what="the survivor to get the dead consumer's messages", timeout=70,
        interval=0.01,
    )  # fmt: skip
    return taken_at - killed_at


def test_a_killed_push_consumers_messages_reach_the_survivor_within_3_s(setup):
    broker, member = setup
    topic, group = "v2-failover", "g-v2-failover"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, queues=4)
    bodies = {f"m{i}".encode() for i in range(20)}
    with running(Producer(config(broker.endpoint), (topic,))) as producer:
        for body in sorted(bodies):
            producer.send(message(topic, body))

        victim = member(group, topic, threads=32)
        victim.wait_ready()
        eventually(
            lambda: len(victim.handed()) == len(bodies), what="the victim holds all 20",
            timeout=30,
        )  # fmt: skip
        survivor = Recorder()
        consumer = PushConsumer(
            config(broker.endpoint), group, survivor, {topic: FilterExpression()}
        )
        with running(consumer):
            time.sleep(SETTLE_S)
            assert not survivor.bodies(), "the survivor got messages the victim holds"

            failover_s = kill_and_time_failover(victim, survivor, bodies)

            # the group goes on: new messages reach the survivor
            later = {f"after{i}".encode() for i in range(5)}
            for body in sorted(later):
                producer.send(message(topic, body))
            eventually(lambda: later <= set(survivor.bodies()), what="later messages", timeout=30)
            time.sleep(1)  # room for a duplicate to show

    print(f"\n[v2 push failover] kill -> survivor has all 20 in flight: {failover_s:.3f} s")
    handed = {body for _, body in victim.handed()}
    assert handed == bodies  # the victim had them all in flight when it died
    counts = survivor.bodies()
    assert set(counts) == bodies | later  # nothing lost
    # every message once at the survivor: the only second deliveries are of what the victim
    # had in flight (and never acked)
    assert all(n == 1 for n in counts.values()), counts
    assert failover_s < FAILOVER_BOUND_S, (
        f"the survivor had the killed consumer's messages {failover_s:.2f} s after the kill; "
        f"the bound is {FAILOVER_BOUND_S} s\n{broker.log_tail(20)}"
    )
    assert "is gone (its Telemetry stream closed" in broker.log_text()


def test_a_killed_fifo_consumers_message_groups_reach_the_survivor_in_order_within_3_s(setup):
    broker, member = setup
    topic, group = "v2-failover-fifo", "g-v2-failover-fifo"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, queues=2, message_type="FIFO")
    sent = [(f"user-{i % 3}", f"{i}".encode()) for i in range(30)]
    with running(Producer(config(broker.endpoint), (topic,))) as producer:
        for g, body in sent:
            producer.send(message(topic, body, group=g))
        victim = member(group, topic)
        victim.wait_ready()
        # the official client consumes each message group of a batch in order, one listener
        # call at a time: one call per message group, the rest of each group waits behind it
        eventually(
            lambda: len(victim.handed()) == 3, what="the victim blocks each message group",
            timeout=30,
        )  # fmt: skip
        survivor = Recorder()
        consumer = PushConsumer(
            config(broker.endpoint), group, survivor, {topic: FilterExpression()}
        )
        with running(consumer):
            time.sleep(SETTLE_S)
            assert not survivor.bodies(), "the survivor got messages of a blocked queue"
            failover_s = kill_and_time_failover(victim, survivor, {body for _, body in sent})

    print(f"\n[v2 FIFO failover] kill -> survivor has all {len(sent)}: {failover_s:.3f} s")
    with survivor.lock:
        seen = list(survivor.seen)
    assert sorted(body for _, body, _, _ in seen) == sorted(body for _, body in sent)
    for message_group in ("user-0", "user-1", "user-2"):
        numbers = [int(body) for g, body, _, _ in seen if g == message_group]
        assert numbers == sorted(numbers) and len(numbers) == 10, (message_group, numbers)
    # what the victim was consuming comes again, marked as a second delivery
    first = {body for _, body in victim.handed()}
    assert all(attempt == 2 for _, body, attempt, _ in seen if body in first)
    assert failover_s < FAILOVER_BOUND_S, (
        f"the survivor had the blocked groups {failover_s:.2f} s after the kill; the bound "
        f"is {FAILOVER_BOUND_S} s\n{broker.log_tail(20)}"
    )


def test_a_graceful_shutdown_is_not_taken_for_a_crash(setup):
    broker, member = setup
    topic, group = "v2-graceful", "g-v2-graceful"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, queues=2)
    bodies = {f"g{i}".encode() for i in range(6)}
    with running(Producer(config(broker.endpoint), (topic,))) as producer:
        for body in sorted(bodies):
            producer.send(message(topic, body))
        leaver = member(group, topic, threads=2)  # two in the listener, four waiting
        client_id = leaver.wait_ready()
        eventually(lambda: len(leaver.handed()) == 2, what="the leaver is busy", timeout=30)
        survivor = Recorder()
        consumer = PushConsumer(
            config(broker.endpoint), group, survivor, {topic: FilterExpression()}
        )
        with running(consumer):
            assert leaver.process is not None
            leaver.process.send_signal(signal.SIGTERM)
            assert leaver.process.wait(30) == 0, leaver.err_tail()
            time.sleep(2)  # past the reconnect grace of its closed stream
            later = {b"after"}
            producer.send(message(topic, b"after"))
            eventually(lambda: later <= set(survivor.bodies()), what="later message", timeout=30)
            time.sleep(1)

    # the leaver consumed (and acked) all it had received before it said goodbye
    assert {body for _, body in leaver.handed()} == bodies
    assert set(survivor.bodies()) == later
    # the broker heard it leave: its closed stream is not taken for a crash
    assert f"client {client_id} is gone" not in broker.log_text()


class Telemetry:
    """A raw Telemetry stream of ``client_id``: opened with push-consumer settings."""

    def __init__(self, stub, client_id: str, group: str, topic: str) -> None:
        settings = pb.Settings(
            client_type=pb.PUSH_CONSUMER,
            subscription=pb.Subscription(
                group=pb.Resource(name=group),
                subscriptions=[
                    pb.SubscriptionEntry(
                        topic=pb.Resource(name=topic),
                        expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    )
                ],
            ),
        )
        self._done = threading.Event()

        def commands():
            yield spb.TelemetryCommand(settings=settings)
            self._done.wait()

        self.call = stub.Telemetry(commands(), metadata=(("x-mq-client-id", client_id),))
        answer = next(self.call)
        assert answer.status.code == Code.OK, answer

    def close(self) -> None:
        self.call.cancel()
        self._done.set()


def receive_auto_renewed(stub, client_id: str, group: str, topic: str):
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
        auto_renew=True,
    )
    request.long_polling_timeout.FromMilliseconds(1000)
    frames = list(
        stub.ReceiveMessage(request, metadata=(("x-mq-client-id", client_id),), timeout=10)
    )
    return [f.message for f in frames if f.HasField("message")]


@pytest.fixture
def raw_clients(setup):
    """A topic of one queue, a raw client (RawV2) and a bare stub of the v2 service."""
    broker, _ = setup
    with Admin(broker.endpoint) as admin:
        admin.create_topic("v2-raw", queues=1)
    raw = RawV2(broker.endpoint)
    channel = grpc.insecure_channel(broker.endpoint)
    yield "v2-raw", raw, service_pb2_grpc.MessagingServiceStub(channel)
    channel.close()
    raw.close()


def test_a_client_that_reopens_its_stream_within_the_grace_keeps_its_messages(raw_clients):
    topic, raw, stub = raw_clients
    group = "g-v2-reconnect"
    client_id = f"reconnecting@{uuid.uuid4().hex[:8]}"
    for i in range(3):
        raw.send(topic, f"r{i}".encode())
    stream = Telemetry(stub, client_id, group, topic)
    held = receive_auto_renewed(stub, client_id, group, topic)
    assert len(held) == 3
    stream.close()
    time.sleep(0.3)  # a reconnect, well within the 1 s grace
    stream = Telemetry(stub, client_id, group, topic)
    time.sleep(2)  # the grace of the first stream is long over
    status, messages = raw.receive(group, topic, wait_s=1)
    assert status.code == Code.MESSAGE_NOT_FOUND and not messages
    for m in held[:2]:  # its receipt handles still work
        assert raw.ack(group, topic, m.system_properties.receipt_handle).status.code == Code.OK

    # it closes its stream and stays away: the one it still holds comes back to a
    # receive already waiting, about a grace later
    stream.close()
    started = time.monotonic()
    status, messages = raw.receive(group, topic, wait_s=5)
    waited = time.monotonic() - started
    assert [m.body for m in messages] == [held[2].body]
    assert 0.9 < waited < 2.5, waited


def test_messages_a_leaving_client_gives_back_reach_a_receive_already_waiting(setup, raw_clients):
    broker, _ = setup
    topic, raw, stub = raw_clients
    group = "g-v2-goodbye"
    client_id = f"leaving@{uuid.uuid4().hex[:8]}"
    raw.send(topic, b"given back")
    stream = Telemetry(stub, client_id, group, topic)
    assert len(receive_auto_renewed(stub, client_id, group, topic)) == 1
    results: list[tuple[list, float]] = []

    def wait_long() -> None:  # a receive that would wait 10 s for a message
        started = time.monotonic()
        _, messages = raw.receive(group, topic, wait_s=10)
        results.append((messages, time.monotonic() - started))

    receiver = threading.Thread(target=wait_long)
    receiver.start()
    with Admin(broker.endpoint) as admin:  # the broker holds the receive: it waits
        eventually(
            lambda: admin.broker_info()["broker-v2-failover"].server_stats["held_pulls"] >= 1,
            what="the receive held by the broker",
        )
    answer = stub.NotifyClientTermination(
        spb.NotifyClientTerminationRequest(group=pb.Resource(name=group)),
        metadata=(("x-mq-client-id", client_id),),
        timeout=5,
    )
    assert answer.status.code == Code.OK
    stream.close()
    receiver.join(15)
    ((messages, waited),) = results
    # visible a second after the goodbye (acks sent on the way out may still arrive),
    # and handed to the receive waiting then, not at the end of its 10 s long poll
    assert [m.body for m in messages] == [b"given back"]
    assert waited < 3, waited
