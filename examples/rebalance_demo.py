"""Push consumers joining and leaving a group while a producer sends: no message lost,
none delivered twice.

Run it with ``python examples/rebalance_demo.py`` (about 15 s). It starts a real gRPC broker
in this process over a temporary store, creates the topic ``events`` with 8 queues and
keeps a producer thread sending to it. Members of the consumer group ``analytics`` come
and go, all in this process:

1. ``member-1`` alone: it owns the 8 queues;
2. ``member-2`` and ``member-3`` join: the queues are shared out 3/3/2 (strategy ``avg``);
3. ``member-2`` leaves gracefully (``shutdown()``): its queues go to the other two;
4. the producer stops and the two members finish the backlog.

How a queue changes hands without losing or repeating messages: each member reads a queue
only while it holds that queue's *lease* on the broker. A member that loses a queue in a
rebalance stops pulling it, lets the messages it already pulled finish, commits the
queue's offset and only then releases the lease; the new owner cannot take the lease
before that, and starts from the committed offset. (A member that crashes cannot release:
its queues wait for the lease to expire, ``queue_lease_ms``, and what it consumed after its
last offset commit, ``persist_interval_ms``, is delivered again. Keep listeners idempotent.)

Every member records the ``msg_id`` of each message it receives; at the end the demo
compares them with what the producer sent: ``lost`` must be 0 (the exit code is 1
otherwise) and ``duplicates`` is 0 for graceful hand-overs.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Producer
from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig

TOPIC = "events"
GROUP = "analytics"
QUEUES = 8
SEND_INTERVAL_S = 0.004  # about 250 messages a second
STEP_S = 3.0  # how long each membership lasts

#: short timings so that hand-overs take well under a second (defaults are in brackets)
CONFIG = PushConsumerConfig(
    consume_from="FIRST_OFFSET",  # a new group starts at the oldest message [LAST_OFFSET]
    queue_lease_ms=3_000,  # lease on each owned queue, renewed every second [30 s]
    long_poll_ms=500,  # how long the broker holds a pull when nothing is new [15 s]
    persist_interval_ms=500,  # commit consumed offsets this often [5 s]
    rebalance_interval_ms=2_000,  # full rebalance at least this often [20 s]
    drain_timeout_ms=5_000,  # wait this long for in-flight messages of a lost queue [30 s]
)


class Member:
    """One group member: a PushConsumer and the msg_ids it was given."""

    def __init__(self, name: str, endpoint: str) -> None:
        self.name = name
        self.received: list[str] = []  # list.append is atomic: safe from listener threads
        config = PushConsumerConfig(**{**vars(CONFIG), "client_id": name})
        self.consumer = PushConsumer(GROUP, endpoint, strategy="avg", config=config)
        self.consumer.subscribe(TOPIC, "*")
        self.consumer.register_listener(self.on_messages)
        self.running = False

    def on_messages(self, messages, context) -> ConsumeStatus:
        for m in messages:
            self.received.append(m.msg_id)
        time.sleep(0.001)  # a little work per message
        return ConsumeStatus.CONSUME_SUCCESS

    def start(self) -> None:
        self.consumer.start()
        self.running = True

    def stop(self) -> None:
        self.consumer.shutdown()
        self.running = False

    def queues(self) -> list[int]:
        return [mq.queue_id for mq in self.consumer.assignment() if mq.topic == TOPIC]


class Sender(threading.Thread):
    """Sends numbered events until stopped; remembers every msg_id the broker stored."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(name="sender", daemon=True)
        self.endpoint = endpoint
        self.sent: list[str] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with Producer(self.endpoint) as producer:
            n = 0
            while not self.stop_event.is_set():
                result = producer.send(TOPIC, f"event {n}".encode(), tags="click")
                self.sent.append(result.msg_id)
                n += 1
                time.sleep(SEND_INTERVAL_S)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def settle(members: list[Member], timeout_s: float = 10.0) -> str:
    """Wait until the running members share the 8 queues out evenly (as ``avg`` does:
    counts differ by at most one), each queue owned once; returns the assignment as text,
    e.g. ``member-1 [0, 1, 2, 3] | member-3 [4, 5, 6, 7]``."""
    running = [m for m in members if m.running]
    deadline = time.monotonic() + timeout_s
    while True:
        owned = {m.name: m.queues() for m in running}
        flat = sorted(q for qs in owned.values() for q in qs)
        sizes = [len(qs) for qs in owned.values()]
        settled = flat == list(range(QUEUES)) and max(sizes) - min(sizes) <= 1
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    text = " | ".join(f"{name} {qs}" for name, qs in owned.items())
    return text if settled else text + "  (NOT SETTLED)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, help="store directory (default: a temp dir)")
    parser.add_argument("--verbose", action="store_true", help="show the consumers' INFO logs")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="    [%(name)s] %(message)s",
    )
    store_dir = args.store or Path(tempfile.mkdtemp(prefix="rocketlite-rebalance-"))
    server, port = create_server(BrokerConfig(store_dir=store_dir, port=0))
    endpoint = f"127.0.0.1:{port}"
    started = time.monotonic()
    steps: list[tuple[str, float, str]] = []

    def step(what: str, members: list[Member], since: float) -> None:
        """Record a membership change made at ``since`` once the queues have settled."""
        owned = settle(members)
        steps.append((what, time.monotonic() - since, owned))
        print(f"  {time.monotonic() - started:5.1f} s  {what}: {owned}", flush=True)

    with server, Admin(endpoint) as admin:
        admin.create_topic(TOPIC, queues=QUEUES)
        print(f"broker on {endpoint}; topic {TOPIC!r} with {QUEUES} queues; group {GROUP!r}")
        members = [Member(f"member-{i}", endpoint) for i in (1, 2, 3)]
        one, two, three = members
        sender = Sender(endpoint)
        sender.start()
        try:
            t = time.monotonic()
            one.start()
            step("member-1 joins", members, t)
            time.sleep(STEP_S)
            t = time.monotonic()
            two.start()
            three.start()
            step("member-2 and member-3 join", members, t)
            time.sleep(STEP_S)
            t = time.monotonic()
            two.stop()
            step("member-2 leaves (graceful shutdown)", members, t)
            time.sleep(STEP_S)
            sender.stop()
            print(f"  {time.monotonic() - started:5.1f} s  producer stopped", flush=True)
            deadline = time.monotonic() + 15
            sent = set(sender.sent)
            while time.monotonic() < deadline:
                if sent <= {i for m in members for i in m.received}:
                    break
                time.sleep(0.05)
        finally:
            sender.stop_event.set()
            for m in members:
                if m.running:
                    m.stop()

        print("\nrebalance steps (time for the queues to settle, then who owns which):")
        for what, took, owned in steps:
            print(f"  {what:<38} {took:4.1f} s  {owned}")

        delivered = Counter(i for m in members for i in m.received)
        sent = set(sender.sent)
        lost = len(sent - delivered.keys())
        duplicates = sum(delivered.values()) - len(delivered)
        unexpected = len(delivered.keys() - sent)
        print("\ndeliveries per member:")
        for m in members:
            print(f"  {m.name}  {len(m.received):>6,}")
        print(f"\ntotal sent          {len(sent):>6,}")
        print(f"delivered unique    {len(delivered):>6,}")
        print(f"lost                {lost:>6,}")
        print(f"duplicates          {duplicates:>6,}")
        if unexpected:
            print(f"unexpected          {unexpected:>6,}  (delivered but never sent)")
        lag = sum(row.lag for row in admin.consumer_progress(GROUP, topic=TOPIC))
        print(f"committed lag       {lag:>6,}  (group {GROUP!r} after shutdown)")
    verdict = "OK" if lost == 0 and duplicates == 0 else "NOT OK"
    print(f"\n{verdict}: lost {lost}, duplicates {duplicates} ({time.monotonic() - started:.1f} s)")
    if args.store is None:
        shutil.rmtree(store_dir)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
