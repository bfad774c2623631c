"""Copy a topic to another with Spark, exactly once: read ``orders``, keep the paid ones,
enrich them, write them to ``paid-orders`` with the ``rocketlite`` sink.

Run it with ``python examples/copy_topic.py``. It starts an embedded broker on a free
loopback port, produces order events, and runs a Structured Streaming query from
``orders`` to ``paid-orders`` twice from one checkpoint (Trigger.AvailableNow), with more
orders arriving in between. Each micro-batch becomes visible in ``paid-orders`` when Spark
commits it, and only then; the second run writes only the new orders. The demo reads
``paid-orders`` back and checks that every paid order is there exactly once, in order per
customer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Message, Producer, PullConsumer

SOURCE, TARGET = "orders", "paid-orders"
STATES = ("created", "paid", "shipped")


def produce(endpoint: str, count: int, first: int = 0) -> int:
    """Orders ``first .. first + count - 1``, each customer's in one queue (its key) in
    order; returns how many are paid."""
    by_customer: dict[str, list[Message]] = {}
    for i in range(first, first + count):
        order = {"order": i, "customer": f"c{i % 17}", "amount": (i * 37) % 500 + 5}
        message = Message(json.dumps(order).encode(), tags=STATES[i % 3], keys=f"o{i}")
        by_customer.setdefault(order["customer"], []).append(message)
    with Producer(endpoint) as producer:
        for customer, messages in by_customer.items():
            producer.send_batch(SOURCE, messages, sharding_key=customer)
    return sum(1 for i in range(first, first + count) if i % 3 == 1)


def copy_paid_orders(spark, endpoint: str, checkpoint: Path) -> int:
    """One AvailableNow run of the copy; returns the orders it read."""
    from pyspark.sql import functions as F

    order = F.from_json(F.col("body").cast("string"), "order LONG, customer STRING, amount LONG")
    paid = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoint)
        .option("topic", SOURCE)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 1000)
        .load()
        .where("tags = 'paid'")
        .select(order.alias("o"), "queueOffset")
        .select(
            F.to_json(
                F.struct(
                    "o.order", "o.customer", "o.amount", (F.col("o.amount") > 250).alias("big")
                )
            ).alias("body"),
            F.lit("paid").alias("tags"),
            F.col("o.customer").alias("shardingKey"),  # one customer, one queue, in order
            F.create_map(F.lit("sourceOffset"), F.col("queueOffset").cast("string")).alias(
                "properties"
            ),
        )
    )
    query = (
        paid.writeStream.format("rocketlite")
        .option("endpoints", endpoint)
        .option("topic", TARGET)
        .option("checkpointLocation", str(checkpoint))  # also names the sink on the broker
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(p["numInputRows"] for p in query.recentProgress)


def read_target(endpoint: str) -> list[dict]:
    with Admin(endpoint) as admin:
        queues = admin.describe_topic(TARGET).readable
    orders = []
    with PullConsumer(endpoint) as consumer:
        consumer.assign(list(queues))
        for mq in queues:
            consumer.seek(mq, 0)
            while (result := consumer.pull(mq, max_messages=512)).message_count:
                orders += [json.loads(b) for b in result.batch.column("body").to_pylist()]
    return orders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rocketlite-copy-"))
    from pyspark.sql import SparkSession

    # Start Spark (it forks the JVM) before any gRPC thread exists in this process.
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketlite-copy-topic")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    server, port = create_server(BrokerConfig(store_dir=work / "store", port=0))
    endpoint = f"127.0.0.1:{port}"
    try:
        with server:
            print(f"1. embedded broker on {endpoint}")
            with Admin(endpoint) as admin:
                admin.create_topic(SOURCE, queues=4)
                admin.create_topic(TARGET, queues=4)
            paid = produce(endpoint, args.orders)
            print(f"2. produced {args.orders} orders to {SOURCE!r}, {paid} of them paid")
            read = copy_paid_orders(spark, endpoint, work / "checkpoint")
            copied = len(read_target(endpoint))
            print(f"3. the query read {read} orders and wrote the {copied} paid ones to {TARGET!r}")
            paid += produce(endpoint, 600, first=args.orders)
            read = copy_paid_orders(spark, endpoint, work / "checkpoint")
            orders = read_target(endpoint)
            print(
                f"4. 600 more orders; restarted from its checkpoint, the query read {read} and "
                f"wrote {len(orders) - copied} more"
            )
            counts = Counter(o["order"] for o in orders)
            doubled = sum(1 for n in counts.values() if n > 1)
            ordered = all(
                [o["order"] for o in orders if o["customer"] == c]
                == sorted(o["order"] for o in orders if o["customer"] == c)
                for c in {o["customer"] for o in orders}
            )
            print(
                f"5. {TARGET!r} holds {len(orders)} orders for {paid} paid: "
                f"{len(counts)} distinct, {doubled} doubled, "
                f"order per customer kept: {ordered}"
            )
            big = sum(1 for o in orders if o["big"])
            print(f"   {big} of them are big (amount > 250)")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
