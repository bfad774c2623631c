"""The job of the standalone-cluster test, run as its own driver process.

    python -m tests.support.cluster_job MASTER_URL ENDPOINTS TOPIC WORK_DIR

It reads the topic twice on the cluster's executors: a batch read written to
``WORK_DIR/batch`` (parquet), and a Trigger.AvailableNow stream written to
``WORK_DIR/stream`` with its checkpoint in ``WORK_DIR/checkpoint``, then prints one JSON
line with what each run counted.
"""

from __future__ import annotations

import json
import os
import sys

from tests.support.scripts import SPARK_JVM_OPTIONS


def main(argv: list[str]) -> int:
    master, endpoints, topic, work = argv
    from pyspark.sql import SparkSession

    # The executors' Python must have the package: here the same environment as the driver,
    # whose PYTHONPATH the test sets (docs/spark.md lists the other ways: a wheel in
    # spark.submit.pyFiles, spark.archives).
    spark = (
        SparkSession.builder.master(master)
        .appName("rocketlite-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "768m")
        .config("spark.cores.max", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.executor.extraJavaOptions", SPARK_JVM_OPTIONS)
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def read(reader):
        return (
            reader.format("rocketlite")
            .option("endpoints", endpoints)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
        )

    read(spark.read).load().write.parquet(f"{work}/batch")
    query = (
        read(spark.readStream)
        # the 2000 messages in 3 batches: enough to see several, each costing seconds
        .option("maxMessagesPerTrigger", "800")
        .load()
        .writeStream.format("parquet")
        .option("path", f"{work}/stream")
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print(json.dumps({"executors": executors, "stream_batches": batches}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main(sys.argv[1:]))
