"""Spark read throughput of the ``rocketlite`` source against the ceiling of Python sources.

Builds a store of N messages (default 5,000,000; 100-byte bodies, TAGS/KEYS/UNIQ_KEY
properties) over 8 queues, serves it from a broker subprocess on loopback, and measures in
one Spark session (local[2]):

* batch: ``spark.read.format("rocketlite")`` earliest -> latest, ``count(*)`` and
  ``sum(length(body))``;
* streaming: ``spark.readStream.format("rocketlite")`` with Trigger.AvailableNow into the
  ``noop`` sink, from a fresh checkpoint;
* baseline: a trivial in-memory Python data source with the same schema and 8 partitions,
  yielding pre-built Arrow batches of the same rows (what any Python source costs here).

Every figure is the best of ``--repeats`` warm runs (the first query of a session pays for
starting Python workers). Run: ``.venv/bin/python bench/spark_read.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

QUEUES = 8
TOPIC = "bench"
BODY_BYTES = 100
TARGET_RATIO = 0.6


def build_store(store_dir: Path, total: int) -> int:
    """Append ``total`` messages over the queues in-process; returns total body bytes."""
    from rmq_spark.store import MessageStore, StoreConfig

    per_queue = total // QUEUES
    batch = 4096
    with MessageStore.open(StoreConfig(store_dir)) as store:
        store.topics.create(TOPIC, queues=QUEUES)
        body = bytes(range(BODY_BYTES))
        for qid in range(QUEUES):
            for first in range(0, per_queue, batch):
                n = min(batch, per_queue - first)
                props = [
                    b"TAGS\x01TagA\x02KEYS\x01k%d\x02UNIQ_KEY\x01%032X\x02" % (i, i)
                    for i in range(first, first + n)
                ]
                store.append(TOPIC, qid, [body] * n, props, tags=["TagA"] * n)
    return per_queue * QUEUES * BODY_BYTES


def start_broker(store_dir: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmq_spark.broker", "--store", str(store_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, line.split("listening on ")[1].split()[0]


def baseline_source(sample, total: int):
    """A Python data source yielding copies of ``sample`` (an Arrow batch of real rows)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rmq_spark.source.schema import SPARK_SCHEMA

    per_partition = total // QUEUES

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(QUEUES)]

        def read(self, partition):
            left = per_partition
            while left > 0:
                n = min(left, sample.num_rows)
                yield sample.slice(0, n)
                left -= n

    class InMemory(DataSource):
        @classmethod
        def name(cls):
            return "bench_in_memory"

        def schema(self):
            return SPARK_SCHEMA

        def reader(self, schema):
            return Reader()

    return InMemory


def sample_batch(endpoint: str, rows: int):
    """Real rows in the source's Arrow layout, read once through the client."""
    from rmq_spark.client import PullConsumer
    from rmq_spark.source.schema import to_rows

    with PullConsumer(endpoint) as consumer:
        mq = consumer.queues(TOPIC)[0]
        consumer.assign([mq])
        consumer.seek(mq, 0)
        result = consumer.pull(mq, max_messages=rows)
        return to_rows(result.batch, mq.broker_name)


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="500,000 messages, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.repeats = 500_000, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rmq-spark-bench-"))
    started = time.perf_counter()
    body_bytes = build_store(work / "store", args.messages)
    total = (args.messages // QUEUES) * QUEUES
    print(f"stored {total:,} messages in {time.perf_counter() - started:.1f} s ({QUEUES} queues)")
    broker, endpoint = start_broker(work / "store")
    try:
        run(args, endpoint, total, body_bytes, work)
    finally:
        broker.terminate()
        broker.wait()
        subprocess.run(["rm", "-rf", str(work)], check=False)


def run(args, endpoint: str, total: int, body_bytes: int, work: Path) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(baseline_source(sample_batch(endpoint, 8192), total))

    def batch_read():
        df = (
            spark.read.format("rocketlite")
            .option("endpoints", endpoint)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        count, size = df.selectExpr("count(*)", "sum(length(body))").first()
        assert count == total and size == body_bytes, (count, size)

    checkpoints = iter(range(1_000))

    def stream_read():
        df = (
            spark.readStream.format("rocketlite")
            .option("endpoints", endpoint)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(work / f"cp{next(checkpoints)}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        read = sum(p["numInputRows"] for p in query.recentProgress)
        assert read == total, read

    def baseline():
        df = spark.read.format("bench_in_memory").load()
        count, _ = df.selectExpr("count(*)", "sum(length(body))").first()
        assert count == total, count

    baseline()  # warm up the Python workers
    figures = {
        "in-memory Python source (ceiling)": timed(baseline, args.repeats),
        "rocketlite batch read": timed(batch_read, args.repeats),
        "rocketlite streaming AvailableNow": timed(stream_read, args.repeats),
    }
    spark.stop()
    ceiling = total / figures["in-memory Python source (ceiling)"]
    print(f"{'case':<36} {'seconds':>8} {'rows/s':>12} {'MB/s':>8} {'vs ceiling':>10}")
    for name, seconds in figures.items():
        rate = total / seconds
        ratio = rate / ceiling
        mark = ""
        if name.startswith("rocketlite"):
            verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
            mark = f"  target >= {TARGET_RATIO}: {verdict}"
        print(
            f"{name:<36} {seconds:>8.2f} {rate:>12,.0f} {body_bytes / seconds / 1e6:>8.1f} "
            f"{ratio:>9.2f}x{mark}"
        )
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; np {np.__version__}")


if __name__ == "__main__":
    main()
