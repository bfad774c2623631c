"""The streaming job of the exactly-once tests through ``nameServer``, run in its own process
(and SIGKILLed): it copies topic SRC of a rocketlite broker (gRPC) into topic DST through
the name server NAMESRV (Apache RocketMQ's, or a rocketlite broker's remoting port).

    python -m tests.support.sink_name_server_job ENDPOINTS SRC NAMESRV DST CHECKPOINT

Each row's body is upper-cased and its key kept as the sharding key; micro-batches of at
most 400 rows every 200 ms until it is killed. The test drains the rest with the same query
(:func:`copy_query`) in its own session.
"""

from __future__ import annotations

import sys


def copy_query(spark, endpoints: str, source: str, name_server: str, target: str, checkpoint: str):
    """The copy, a DataStreamWriter to start with a trigger."""
    rows = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoints)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "400")
        .load()
        .selectExpr("upper(CAST(body AS STRING)) AS body", "keys AS shardingKey")
    )
    return (
        rows.writeStream.format("rocketlite")
        .option("nameServer", name_server)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
    )


def main(argv: list[str]) -> int:
    endpoints, source, name_server, target, checkpoint = argv
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sink-name-server")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = copy_query(spark, endpoints, source, name_server, target, checkpoint)
    query.trigger(processingTime="200 milliseconds").start()
    print("query started", flush=True)
    spark.streams.awaitAnyTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
