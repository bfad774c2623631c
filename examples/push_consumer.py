"""A push consumer with retries and a dead-letter queue, against an embedded broker.

Run it with ``python examples/push_consumer.py`` (about 5 s). It starts a real gRPC broker
in this process over a temporary store, sends 20 orders to the topic ``orders`` and
consumes them with a :class:`~rmq_spark.client.push.PushConsumer` whose listener talks to a
"flaky payment service":

* most orders are paid at the first delivery;
* the payment service fails the *first two* attempts of some orders (they succeed at the
  third delivery, ``reconsume_times`` 2);
* one "poison" order can never be paid: it fails every time and ends in the group's
  dead-letter queue ``%DLQ%{group}``.

How failures work (RocketMQ's rules, which rocketlite follows):

1. The listener returns ``ConsumeStatus.RECONSUME_LATER`` (or raises). The consumer gives
   the message back to the broker, which stores a copy in the group's retry topic
   ``%RETRY%{group}`` with ``reconsume_times`` + 1. The original queue's offset moves on:
   one failing message does not block the others.
2. The copy is delayed: the n-th retry waits delay level ``3 + n - 1`` (with the default
   levels ``1s 5s 10s 30s 1m ...`` the first retry comes after 10 s, the next after 30 s,
   ...). This demo's broker uses tiny levels so that everything happens in seconds.
3. The consumer subscribes to its retry topic by itself, so the copy comes back to the
   same listener, with ``m.is_retry`` True and ``m.topic`` still ``orders``.
4. After ``max_reconsume_times`` failed redeliveries (16 by default, 3 here) the broker
   puts the message in ``%DLQ%{group}`` instead: it is no longer delivered, and an
   operator (or a repair job) can read it there with a PullConsumer.

``m.msg_id`` (the client message id) stays the same across all these redeliveries, and a
message may also be delivered twice after a crash: make the listener idempotent, keyed on
``msg_id`` (or on a business key such as the order id), as the ``paid`` set does below.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Producer, PullConsumer
from rmq_spark.client.push import (
    ConsumeContext,
    ConsumeStatus,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
)

TOPIC = "orders"
GROUP = "payments"
ORDERS = 20
FLAKY = {4, 11, 17}  # the payment service fails the first two attempts of these orders
POISON = 13  # this order always fails: it ends in the dead-letter queue
MAX_RECONSUME_TIMES = 3  # redeliveries before the DLQ (RocketMQ's default is 16)
#: delay levels 1..5; a retry uses level 3 + reconsume_times, so 300 ms, 400 ms, 500 ms
DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms"
DLQ = f"%DLQ%{GROUP}"
RETRY = f"%RETRY%{GROUP}"


class PaymentListener:
    """The listener: ``(messages, context) -> ConsumeStatus``, called from the consumer's
    thread pool (so several calls may run at once; shared state is behind a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paid: set[str] = set()  # msg_ids already handled: the idempotency check
        self.attempts: dict[int, int] = defaultdict(int)  # order id -> deliveries seen

    def __call__(self, messages: Sequence[ReceivedMessage], context: ConsumeContext):
        # consume_message_batch_max_size is 1 (the default): one message per call
        for m in messages:
            order = json.loads(m.body)["order"]
            with self.lock:
                self.attempts[order] += 1
                if m.msg_id in self.paid:  # a duplicate delivery: already done, skip it
                    continue
            source = f"from {m.message_queue.topic}" if m.is_retry else "from orders"
            ok = charge(order, m.reconsume_times)
            with self.lock:  # one line at a time from the listener threads
                print(
                    f"  order {order:>2}  reconsume_times {m.reconsume_times}  {source:<22} "
                    f"msg_id {m.msg_id}  -> {'paid' if ok else 'FAILED, retry later'}",
                    flush=True,
                )
            if not ok:
                # The broker keeps a delayed copy in %RETRY%payments (or, once
                # max_reconsume_times is reached, puts it in %DLQ%payments).
                return ConsumeStatus.RECONSUME_LATER
            with self.lock:
                self.paid.add(m.msg_id)
        return ConsumeStatus.CONSUME_SUCCESS


def charge(order: int, reconsume_times: int) -> bool:
    """The flaky payment service: True when the order was charged."""
    if order == POISON:
        return False
    if order in FLAKY:
        return reconsume_times >= 2
    return True


def read_dlq(endpoint: str) -> list[dict]:
    """What landed in the dead-letter queue, read like any topic with a PullConsumer."""
    rows: list[dict] = []
    with PullConsumer(endpoint) as consumer:
        queues = consumer.queues(DLQ)
        consumer.assign(queues)
        consumer.seek_to_beginning(queues)
        for result in consumer.poll(timeout_ms=1000):
            rows += result.batch.select(["body", "reconsumeTimes", "properties"]).to_pylist()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, help="store directory (default: a temp dir)")
    args = parser.parse_args()
    store_dir = args.store or Path(tempfile.mkdtemp(prefix="rocketlite-push-"))
    config = BrokerConfig(store_dir=store_dir, port=0, delay_levels=DELAY_LEVELS)
    server, port = create_server(config)
    endpoint = f"127.0.0.1:{port}"
    started = time.monotonic()
    with server, Admin(endpoint) as admin:
        print(f"1. broker listening on {endpoint}, delay levels {DELAY_LEVELS!r}")
        admin.create_topic(TOPIC, queues=4)
        with Producer(endpoint) as producer:
            for i in range(ORDERS):
                body = json.dumps({"order": i, "amount": 10 + i})
                producer.send(TOPIC, body, tags="created", keys=f"order-{i}")
        print(
            f"2. sent {ORDERS} orders to {TOPIC!r} (4 queues); orders {sorted(FLAKY)} fail "
            f"twice, order {POISON} always fails"
        )

        listener = PaymentListener()
        consumer = PushConsumer(
            GROUP,
            endpoint,
            config=PushConsumerConfig(
                consume_from="FIRST_OFFSET",  # a new group starts at the oldest message
                max_reconsume_times=MAX_RECONSUME_TIMES,
                long_poll_ms=1_000,
                persist_interval_ms=500,  # commit consumed offsets often (default 5 s)
            ),
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        print(f"3. push consumer of group {GROUP!r} started; deliveries as they happen:")
        consumer.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = consumer.stats()
            if len(listener.paid) == ORDERS - 1 and stats.get("dead_lettered", 0) >= 1:
                break
            time.sleep(0.05)
        stats = consumer.stats()
        owned = ", ".join(f"{mq.topic}#{mq.queue_id}" for mq in consumer.assignment())
        consumer.shutdown()  # commits every offset and leaves the group
        print(f"4. consumer queues were: {owned}")
        print(f"   stats(): {dict(sorted(stats.items()))}")

        poison_deliveries = listener.attempts[POISON]
        dead = read_dlq(endpoint)
        print(f"5. dead-letter queue {DLQ!r} holds {len(dead)} message(s):")
        for row in dead:
            props = dict(row["properties"] or ())
            order = json.loads(row["body"])["order"]
            print(
                f"  order {order} (msg_id {props.get('UNIQ_KEY')}, first topic "
                f"{props.get('RETRY_TOPIC')}) after {poison_deliveries} deliveries, "
                f"reconsume_times {row['reconsumeTimes']}"
            )
        print(f"6. committed offsets of group {GROUP!r}:")
        for topic in (TOPIC, RETRY):
            for row in admin.consumer_progress(GROUP, topic=topic):
                print(
                    f"  {topic}#{row.message_queue.queue_id}: committed {row.committed_offset}, "
                    f"max {row.broker_max_offset}, lag {row.lag}"
                )
        paid_ok = len(listener.paid) == ORDERS - 1
        in_dlq = [json.loads(r["body"])["order"] for r in dead] == [POISON]
        print(
            f"7. {len(listener.paid)} of {ORDERS} orders paid, order {POISON} in the DLQ: "
            f"{'OK' if paid_ok and in_dlq else 'NOT OK'} ({time.monotonic() - started:.1f} s)"
        )
    if args.store is None:
        shutil.rmtree(store_dir)
    return 0 if paid_ok and in_dlq else 1


if __name__ == "__main__":
    raise SystemExit(main())
