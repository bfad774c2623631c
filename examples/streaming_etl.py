"""Streaming ETL: RocketMQ-style orders -> per-tag, per-minute revenue, with Spark.

Run it with ``./dev demo`` (or ``python examples/streaming_etl.py``). It starts an embedded
broker on a free loopback port, produces order events with tags ``created``, ``paid`` and
``shipped``, and runs a Structured Streaming query over them with
``spark.readStream.format("rocketlite")``. The query runs twice with Trigger.AvailableNow
from one checkpoint: the second run reads only what arrived in between. The source commits
the consumed offsets to the broker for the consumer group, and the demo prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Message, Producer

TOPIC = "orders"
GROUP = "etl"
TAGS = ("created", "paid", "shipped")


def produce(endpoint: str, count: int, first: int = 0) -> None:
    rng = random.Random(first)
    now_ms = int(time.time() * 1000)
    with Producer(endpoint) as producer:
        batch = []
        for i in range(first, first + count):
            order = {"order": i, "amount": round(rng.uniform(5, 500), 2), "ts": now_ms}
            batch.append(Message(json.dumps(order).encode(), tags=TAGS[i % 3], keys=f"o{i}"))
        for start in range(0, len(batch), 500):
            producer.send_batch(TOPIC, batch[start : start + 500])


def run_query(spark, endpoint: str, checkpoint: Path) -> None:
    """One AvailableNow run of the ETL; the memory sink holds the running aggregate."""
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoint)
        .option("topic", TOPIC)
        .option("group", GROUP)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema = "order LONG, amount DOUBLE, ts LONG"
    revenue = (
        orders.select(
            "tags", "storeTimestamp", F.from_json(F.col("body").cast("string"), schema).alias("o")
        )
        .groupBy(F.window("storeTimestamp", "1 minute"), "tags")
        .agg(F.count("*").alias("orders"), F.round(F.sum("o.amount"), 2).alias("revenue"))
    )
    query = (
        revenue.writeStream.outputMode("complete")
        .format("memory")
        .queryName("revenue_by_tag")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = query.lastProgress["numInputRows"] if query.lastProgress else 0
    print(f"   last batch read {rows} message(s)")


def show(spark) -> None:
    spark.sql(
        "SELECT date_format(window.start, 'HH:mm') AS minute, tags, orders, revenue "
        "FROM revenue_by_tag ORDER BY minute, tags"
    ).show(truncate=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=3000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rocketlite-etl-"))
    from pyspark.sql import SparkSession

    # Start Spark (it forks the JVM) before any gRPC thread exists in this process:
    # forking a process that runs gRPC threads can break the child.
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketlite-streaming-etl")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    server, port = create_server(BrokerConfig(store_dir=work / "store", port=0))
    endpoint = f"127.0.0.1:{port}"
    with server:
        print(f"1. embedded broker on {endpoint}")
        with Admin(endpoint) as admin:
            admin.create_topic(TOPIC, queues=4)
        produce(endpoint, args.orders)
        print(f"2. produced {args.orders} orders to {TOPIC!r} (4 queues)")
        try:
            print("3. streaming query (Trigger.AvailableNow) from the beginning:")
            run_query(spark, endpoint, work / "checkpoint")
            show(spark)
            produce(endpoint, 600, first=args.orders)
            print("4. 600 more orders arrived; the same query restarts from its checkpoint:")
            run_query(spark, endpoint, work / "checkpoint")
            show(spark)
        finally:
            spark.stop()
        print(f"5. offsets committed by the source for group {GROUP!r}:")
        with Admin(endpoint) as admin:
            for row in admin.consumer_progress(GROUP, topic=TOPIC):
                print(
                    f"   {row.message_queue.broker_name} queue {row.message_queue.queue_id}: "
                    f"committed {row.committed_offset}, max {row.broker_max_offset}, lag {row.lag}"
                )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
