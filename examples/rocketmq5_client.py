"""RocketMQ 5 clients against rocketlite: the official ``rocketmq-python-client``, unmodified.

Run it with ``python examples/rocketmq5_client.py`` (about 10 s). It starts a broker in this
process over a temporary store; the broker serves RocketMQ 5's gRPC protocol
(``apache.rocketmq.v2``) on the same port as rocketlite's own, so an existing RocketMQ 5
service only changes its endpoint. Then:

1. the official ``Producer`` sends orders (tag, keys, a user property) and FIFO messages
   (a ``message_group`` per customer keeps each customer's events in order);
2. an official ``SimpleConsumer`` receives the orders, acks most and asks for one again
   later (``change_invisible_duration``): it comes back with ``delivery_attempt`` 2;
3. an official ``PushConsumer`` consumes the FIFO topic, one customer's events in order;
4. rocketlite's own ``PullConsumer`` (the same reader the Spark source uses) reads the
   same orders with the client's message id as ``UNIQ_KEY``, and ``rocketlite offsets``
   shows the groups' progress, which moves only over acked messages.

Against a broker of your own, point ``ClientConfiguration`` at its address
(``rocketlite broker --port 10911`` listens on 127.0.0.1:10911).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, PullConsumer

ORDERS, EVENTS = "orders", "customer-events"


def order(i: int) -> Message:
    message = Message()
    message.topic = ORDERS
    message.body = f'{{"order": {i}, "amount": {10 + i}}}'.encode()
    message.tag = "Paid" if i % 3 else "Refunded"
    message.keys = f"order-{i}"
    message.add_property("shop", "north" if i % 2 else "south")
    return message


def event(customer: str, step: int) -> Message:
    message = Message()
    message.topic = EVENTS
    message.body = f"{customer}:{step}".encode()
    message.message_group = customer  # one customer's events stay in order
    return message


class InOrder(MessageListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps: dict[str, list[int]] = {}

    def consume(self, message):
        customer, step = message.body.decode().split(":")
        with self.lock:
            self.steps.setdefault(customer, []).append(int(step))
        return ConsumeResult.SUCCESS


def main() -> None:
    store_dir = tempfile.mkdtemp(prefix="rocketlite-v5-")
    server, port = create_server(BrokerConfig(store_dir=store_dir, port=0))
    endpoint = f"127.0.0.1:{port}"
    try:
        with server, Admin(endpoint) as admin:
            admin.create_topic(ORDERS, queues=4)
            admin.create_topic(EVENTS, queues=2, message_type="FIFO")
            print(f"1. broker on {endpoint} serves rocketlite.v1 and apache.rocketmq.v2")
            conf = ClientConfiguration(endpoint, Credentials())

            producer = Producer(conf, (ORDERS, EVENTS))
            producer.startup()
            try:
                ids = [producer.send(order(i)).message_id for i in range(6)]
                for step in range(5):
                    for customer in ("ann", "bob"):
                        producer.send(event(customer, step))
            finally:
                producer.shutdown()
            print(f"   official producer sent 6 orders (first id {ids[0]}) and 10 FIFO events")

            consumer = SimpleConsumer(
                conf, "billing", {ORDERS: FilterExpression("Paid")}, await_duration=2
            )
            consumer.startup()
            try:
                later, acked, deadline = None, 0, time.monotonic() + 20
                while acked < 4 and time.monotonic() < deadline:
                    for message in consumer.receive(16, 15):
                        if later is None and message.delivery_attempt == 1:
                            later = message.keys  # "not now": ask for it again in 1 s
                            consumer.change_invisible_duration(message, 1)
                            print(f"2. {sorted(later)[0]}: asked to see it again in 1 s")
                            continue
                        print(
                            f"   received {sorted(message.keys)[0]} tag {message.tag} "
                            f"attempt {message.delivery_attempt} shop "
                            f"{message.properties['shop']}"
                        )
                        consumer.ack(message)
                        acked += 1
            finally:
                consumer.shutdown()

            listener = InOrder()
            pusher = PushConsumer(conf, "shipping", listener, {EVENTS: FilterExpression()})
            pusher.startup()
            try:
                deadline = time.monotonic() + 20
                while sum(map(len, listener.steps.values())) < 10:
                    if time.monotonic() > deadline:
                        raise SystemExit("the push consumer did not get all 10 events")
                    time.sleep(0.1)
            finally:
                pusher.shutdown()
            for customer, steps in sorted(listener.steps.items()):
                print(f"3. push consumer, customer {customer}: steps {steps}")

            with PullConsumer(endpoint) as reader:
                queues = reader.queues(ORDERS)
                reader.assign(queues)
                reader.seek_to_beginning()
                rows = [
                    row
                    for _ in range(3)
                    for result in reader.poll(timeout_ms=500)
                    for row in result.batch.to_pylist()
                ]
            by_id = {dict(row["properties"])["UNIQ_KEY"]: row for row in rows}
            print(f"4. rocketlite's PullConsumer read {len(rows)} orders; the first id maps to")
            print(f"   keys={by_id[ids[0]]['keys']} tags={by_id[ids[0]]['tags']}")
            for group, topic in (("billing", ORDERS), ("shipping", EVENTS)):
                lag = sum(p.lag for p in admin.consumer_progress(group, topic))
                print(f"   group {group} on {topic}: lag {lag}")
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
