"""The streaming job of the sink's exactly-once test, run in its own process (and
SIGKILLed): it copies topic SRC to topic DST through the ``rocketlite`` sink.

    python -m tests.support.sink_copy_job ENDPOINTS SRC DST CHECKPOINT MARKER

It runs until it is killed (micro-batches every 200 ms); the test drains the rest with the
same query (:func:`copy_query`) in its own session. Each row's body is upper-cased and its
key kept as the sharding key. Once per MARKER file,
the first task attempt that gets a full Arrow batch (40 rows, the session's
maxRecordsPerBatch) passes it on and then fails (Spark retries the task: ``local[2,4]``
allows 4 attempts). The Python worker buffers its output until the failure, so the batch
reaches the sink's writer, and may be staged, just as the task fails: rows that must never
become visible.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: spark.sql.execution.arrow.maxRecordsPerBatch of the job's session
FULL_BATCH = 40


def fail_once(marker: str):
    def transform(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for batch in batches:
            body = pc.utf8_upper(batch.column("body").cast(pa.string()))
            out = pa.RecordBatch.from_arrays(
                [body, batch.column("keys")], names=["body", "shardingKey"]
            )
            if attempt == 0 and out.num_rows >= FULL_BATCH and not os.path.exists(marker):
                yield out
                Path(marker).write_text("failed once")
                raise RuntimeError(f"injected task failure after {out.num_rows} rows")
            yield out

    return transform


def copy_query(spark, endpoints: str, source: str, target: str, checkpoint: str, marker: str):
    """The copy, a DataStreamWriter to start with a trigger."""
    rows = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoints)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "400")
        .load()
        .select("body", "keys")
        .mapInArrow(fail_once(marker), "body string, shardingKey string")
    )
    return (
        rows.writeStream.format("rocketlite")
        .option("endpoints", endpoints)
        .option("topic", target)
        .option("sendBatchSize", "20")
        .option("checkpointLocation", checkpoint)
    )


def main(argv: list[str]) -> int:
    endpoints, source, target, checkpoint, marker = argv
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("sink-copy")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(FULL_BATCH))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = copy_query(spark, endpoints, source, target, checkpoint, marker)
    query.trigger(processingTime="200 milliseconds").start()
    print("query started", flush=True)
    spark.streams.awaitAnyTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
