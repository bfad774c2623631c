"""An embedded broker, a producer and a tailing consumer, all in one process.

Run it with ``./dev demo`` (or ``python examples/broker_demo.py``). It starts a real gRPC
broker on a free loopback port over a temporary store, creates a topic, tails it with a
long-polling consumer in a background thread while a producer sends, then shows the
consumer group's committed offsets and lag, and looks a message up by its id.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Message, Producer, PullConsumer

TOPIC = "orders"
GROUP = "billing"


def tail(endpoint: str, stop: threading.Event, seen: list[str]) -> None:
    """Print 'paid' orders as they arrive; commit the group's positions as we go."""
    with PullConsumer(endpoint, group=GROUP, subscription="paid") as consumer:
        queues = consumer.queues(TOPIC)
        consumer.assign(queues)
        consumer.seek_to_beginning(queues)
        while not stop.is_set():
            for result in consumer.poll(timeout_ms=500):  # long polling: no busy loop
                rows = result.batch.select(["queueId", "queueOffset", "tags", "body"])
                for row in rows.to_pylist():
                    text = row["body"].decode()
                    seen.append(text)
                    print(
                        f"  tail  queue {row['queueId']} @ {row['queueOffset']:<3} "
                        f"[{row['tags']}] {text}"
                    )
            consumer.commit()


def produce(endpoint: str) -> list:
    with Producer(endpoint) as producer:
        results = []
        for i in range(12):
            tag = ("created", "paid", "shipped")[i % 3]
            body = f'{{"order": {i}, "status": "{tag}"}}'
            results.append(producer.send(TOPIC, body.encode(), tags=tag, keys=f"order-{i}"))
            time.sleep(0.05)
        started = time.perf_counter()
        batch = [Message(f"bulk-{i}".encode(), tags="bulk") for i in range(20_000)]
        for first in range(0, len(batch), 1000):
            producer.send_batch(TOPIC, batch[first : first + 1000])
        took = time.perf_counter() - started
        print(
            f"  sent 20,000 more in batches of 1,000 in {took:.2f} s "
            f"({20_000 / took:,.0f} msgs/s through gRPC)"
        )
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, help="store directory (default: a temp dir)")
    args = parser.parse_args()
    store_dir = args.store or Path(tempfile.mkdtemp(prefix="rocketlite-broker-"))
    server, port = create_server(BrokerConfig(store_dir=store_dir, port=0, name="broker-a"))
    endpoint = f"127.0.0.1:{port}"
    with server:
        print(f"1. broker-a listening on {endpoint}, store {store_dir}")
        with Admin(endpoint) as admin:
            admin.create_topic(TOPIC, queues=4)
            print(f"2. created topic {TOPIC!r} with 4 queues")
            print("3. tailing 'paid' orders while a producer sends:")
            stop, seen = threading.Event(), []
            tailer = threading.Thread(target=tail, args=(endpoint, stop, seen), daemon=True)
            tailer.start()
            sent = produce(endpoint)
            deadline = time.monotonic() + 5
            while len(seen) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.6)  # one more poll round so the last positions are committed
            stop.set()
            tailer.join()
            print(f"4. group {GROUP!r} committed offsets and lag:")
            for row in admin.consumer_progress(GROUP, topic=TOPIC):
                print(
                    f"  queue {row.message_queue.queue_id}: committed {row.committed_offset}, "
                    f"max {row.broker_max_offset}, lag {row.lag}"
                )
            last = sent[-1]
            batch, broker = admin.view_message(last.offset_msg_id)
            print(
                f"5. message {last.offset_msg_id} on {broker}: "
                f"{batch.column('body')[0].as_py().decode()} "
                f"keys={batch.column('keys')[0].as_py()}"
            )
    print("6. broker stopped cleanly (store flushed, offsets persisted)")
    if args.store is None:
        shutil.rmtree(store_dir)


if __name__ == "__main__":
    main()
