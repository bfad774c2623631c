"""The streaming job of the driver-kill test, run in its own process (and SIGKILLed).

    python -m tests.support.driver_kill_job ENDPOINTS TOPIC CHECKPOINT OUTPUT

It reads micro-batches of at most 40 messages every 200 ms into a parquet sink until it is
killed.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    endpoints, topic, checkpoint, output = argv
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("driver-kill")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("group", "driver-kill")
        .option("maxMessagesPerTrigger", "40")
        .load()
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
