"""Batch replay of an exact queue range with ``spark.read.format("rocketlite")``.

Run it with ``python examples/batch_replay.py``. It starts an embedded broker, writes 100
messages to each of 2 queues, then reads back exactly offsets [10, 20) of queue 0 and
[95, 100) of queue 1 as a DataFrame: ``startingOffsets`` / ``endingOffsets`` take JSON
``{"topic": {"brokerName": {"queueId": offset}}}`` (the end is exclusive).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rmq_spark import MessageQueue
from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Message, Producer

TOPIC = "payments"


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rocketlite-replay-"))
    from pyspark.sql import SparkSession

    # Spark first: it forks the JVM, which must happen before gRPC threads exist here.
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketlite-batch-replay")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    server, port = create_server(BrokerConfig(store_dir=work / "store", port=0))
    endpoint = f"127.0.0.1:{port}"
    with server:
        with Admin(endpoint) as admin:
            admin.create_topic(TOPIC, queues=2)
        with Producer(endpoint) as producer:
            for qid in (0, 1):
                queue = MessageQueue(TOPIC, server.broker.name, qid)
                messages = [Message(f"payment {qid}-{i}".encode(), tags="p") for i in range(100)]
                producer.send_batch(TOPIC, messages, queue=queue)
        broker = server.broker.name
        start = {TOPIC: {broker: {"0": 10, "1": 95}}}
        end = {TOPIC: {broker: {"0": 20, "1": 100}}}
        try:
            df = (
                spark.read.format("rocketlite")
                .option("endpoints", endpoint)
                .option("topic", TOPIC)
                .option("startingOffsets", json.dumps(start))
                .option("endingOffsets", json.dumps(end))
                .load()
            )
            print(f"replaying {json.dumps(start)} -> {json.dumps(end)}")
            df.selectExpr("queueId", "queueOffset", "CAST(body AS STRING) AS body").orderBy(
                "queueId", "queueOffset"
            ).show(20, truncate=False)
            print(f"{df.count()} rows (10 from queue 0, 5 from queue 1)")
        finally:
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
