"""A Spark Connect client of the Connect test, in its own process.

    python tests/support/connect_client.py sc://127.0.0.1:PORT ENDPOINTS TOPIC WORK_DIR

It reads the topic through the Connect server with a batch read and a Trigger.AvailableNow
stream into parquet, writes the batch read's bodies to ``TOPIC-copy`` with the
``rocketlite`` sink, and prints one JSON line. It never imports rmq_spark: the source runs
on the server, which has the package.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    url, endpoints, topic, work = argv
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()

    def read(reader):
        return (
            reader.format("rocketlite")
            .option("endpoints", endpoints)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
        )

    batch_rows = read(spark.read).load().count()
    (
        read(spark.read)
        .load()
        .select("body", "tags")
        .write.format("rocketlite")
        .option("endpoints", endpoints)
        .option("topic", f"{topic}-copy")
        .mode("append")
        .save()
    )
    query = (
        read(spark.readStream)
        .option("maxMessagesPerTrigger", "40")
        .load()
        .writeStream.format("parquet")
        .option("path", f"{work}/stream")
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    streamed = spark.read.parquet(f"{work}/stream")
    report = {
        "batch_rows": batch_rows,
        "stream_rows": streamed.count(),
        "stream_distinct": streamed.select("queueId", "queueOffset").distinct().count(),
        "client_imported_rmq_spark": "rmq_spark" in sys.modules,
    }
    print(json.dumps(report), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
