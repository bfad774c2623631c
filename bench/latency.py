"""End-to-end latency at a trickle: a send until its row is visible in ``foreachBatch``.

A producer sends one 100-byte message every ``--interval-ms`` (default 50 ms: 20 msgs/s) to a
4-queue topic on a broker subprocess on loopback. Two readers take the same messages in the
same run:

* Spark: ``spark.readStream.format("rocketlite")`` with the default trigger (a new micro-batch
  as soon as the last one ended) into ``foreachBatch``, which collects each batch's rows and
  notes, for every row, the time it saw it minus the message's ``bornTimestamp`` (the
  producer's clock, the same machine);
* baseline: a ``PullConsumer`` long-polling the same queues (what the broker and the client
  cost without Spark).

Messages sent during a warm-up (``--warmup-seconds``, default 10 s) are not counted: the
first batches with data start Spark's Python workers, a cost a long-running query pays once.

Spark runs two cases, one after the other in one session, each with its own warm-up and its
own long-polling baseline:

* ``defaults``: the source's and Spark's defaults (one task per queue with data);
* ``low latency``: the settings docs/performance.md recommends for latency:
  ``minMessagesPerPartition`` (a small batch is read by one task; Spark spends 0.1-0.3 s on
  every task of a micro-batch) and Spark's ``FileSystemBasedCheckpointFileManager`` (the
  default one makes Hadoop start ``chmod``/``readlink`` processes for every checkpoint log
  file on a local disk).

It prints p50, p90, p99 and max of each, in milliseconds. The target is p99 < 1 s for Spark.
Run: ``.venv/bin/python bench/latency.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import broker_process, percentile

TOPIC = "latency"
QUEUES = 4
TARGET_P99_MS = 1000.0


def send_trickle(endpoint: str, seconds: float, interval_s: float, stop: threading.Event) -> int:
    """Send one message every ``interval_s`` for ``seconds``; returns how many were sent."""
    from rmq_spark.client import Producer

    body = bytes(100)
    sent = 0
    with Producer(endpoint) as producer:
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < deadline and not stop.is_set():
            producer.send(TOPIC, body, tags="T")
            sent += 1
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))
    return sent


def pull_latencies(endpoint: str, expected: int, stop: threading.Event) -> list[float]:
    """Latency of every message seen by a long-polling PullConsumer from the queues' ends."""
    from rmq_spark.client import PullConsumer

    out: list[float] = []
    with PullConsumer(endpoint) as consumer:
        queues = consumer.queues(TOPIC)
        consumer.assign(queues)
        consumer.seek_to_end(queues)
        while len(out) < expected and not stop.is_set():
            for result in consumer.poll(timeout_ms=200):
                seen_ms = time.time() * 1000
                born = result.batch.column("bornTimestamp").to_pylist()
                out.extend(seen_ms - b for b in born)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to send, per case")
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--warmup-seconds", type=float, default=10.0, help="sends not counted")
    parser.add_argument(
        "--quick", action="store_true", help="the low-latency case only, 3 s of sends after 1 s"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the Spark source for both cases, e.g. pullBatchSize=64 (repeatable)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup_seconds = 3.0, 1.0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rmq-latency-bench-"))
    broker = broker_process(work / "store", work / "broker.log").start()
    try:
        results = run(args, broker.endpoint, work)
    finally:
        broker.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\none message every {args.interval_ms:g} ms for {args.seconds:g} s per case; "
        "latency = time seen - bornTimestamp, ms"
    )
    print(
        f"{'case':<12} {'reader':<40} {'n':>5} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}  target"
    )
    for case, (spark_ms, pull_ms, sent, _) in results.items():
        for name, values, target in (
            ("Spark readStream, default trigger", spark_ms, TARGET_P99_MS),
            ("baseline: PullConsumer long poll", pull_ms, None),
        ):
            label = f"{case:<12} {name:<40}"
            if not values:
                print(f"{label} no message seen (of {sent})")
                continue
            p99 = percentile(values, 0.99)
            verdict = (
                ""
                if target is None
                else f"  p99 < {target:g}: {'met' if p99 < target else 'MISSED'}"
            )
            print(
                f"{label} {len(values):>5} {percentile(values, 0.5):>7.0f} "
                f"{percentile(values, 0.9):>7.0f} {p99:>7.0f} {max(values):>7.0f}{verdict}"
            )
        if spark_ms and pull_ms:
            ratio = statistics.median(spark_ms) / statistics.median(pull_ms)
            print(f"{case:<12} Spark p50 / baseline p50: {ratio:.1f}x")
    print("\nmedian ms of each part of a micro-batch with messages (the query's durationMs)")
    print(f"{'case':<12} " + " ".join(f"{part:>16}" for part in CYCLE_PARTS))
    for case, (*_, cycle) in results.items():
        print(f"{case:<12} " + " ".join(f"{cycle.get(part, 0):>16.0f}" for part in CYCLE_PARTS))


#: case -> (source options, Spark SQL settings); see the module doc
CASES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "defaults": ({}, {}),
    "low latency": (
        {"minMessagesPerPartition": "10000"},
        {
            "spark.sql.streaming.checkpointFileManagerClass": (
                "org.apache.spark.sql.execution.streaming.checkpointing."
                "FileSystemBasedCheckpointFileManager"
            )
        },
    ),
}


def run(args, endpoint: str, work: Path) -> dict[str, tuple]:
    from pyspark.sql import SparkSession

    from rmq_spark.client import Admin

    with Admin(endpoint) as admin:
        admin.create_topic(TOPIC, queues=QUEUES)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    extra = dict(kv.split("=", 1) for kv in args.option)
    try:
        return {
            case: run_case(
                spark, args, endpoint, work / f"checkpoint-{i}", {**options, **extra}, conf
            )
            for i, (case, (options, conf)) in enumerate(CASES.items())
            if case == "low latency" or not args.quick
        }
    finally:
        spark.stop()


def run_case(
    spark, args, endpoint: str, checkpoint: Path, options: dict[str, str], conf: dict[str, str]
) -> tuple[list[float], list[float], int, dict[str, float]]:
    """One query from the topic's end: warm-up, then the measured trickle. Returns the
    latencies seen by Spark and by the baseline, how many were sent, and the median parts
    of the micro-batches that read messages."""
    from pyspark.sql import functions as F

    for key, value in conf.items():
        spark.conf.set(key, value)
    spark_ms: list[float] = []

    def on_batch(df, batch_id: int) -> None:
        born = df.select(F.unix_millis("bornTimestamp").alias("b")).collect()
        seen_ms = time.time() * 1000
        spark_ms.extend(seen_ms - row.b for row in born)

    query = (
        spark.readStream.format("rocketlite")
        .option("endpoints", endpoint)
        .option("topic", TOPIC)
        .option("startingOffsets", "latest")
        .options(**options)
        .load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        # Wait until the query runs micro-batches (its first one fixes the start offsets),
        # then warm it up: the first batches with data start Spark's Python workers
        # (seconds each), which a long-running query pays once. Those are not counted.
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        stop = threading.Event()
        warm = send_trickle(endpoint, args.warmup_seconds, args.interval_ms / 1000, stop)
        deadline = time.monotonic() + 60
        while len(spark_ms) < warm and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        spark_ms.clear()
        expected = int(args.seconds * 1000 / args.interval_ms) + 1
        pull_ms: list[float] = []
        puller = threading.Thread(
            target=lambda: pull_ms.extend(pull_latencies(endpoint, expected, stop)), daemon=True
        )
        puller.start()
        time.sleep(0.5)  # the puller has found the queues' ends
        sent = send_trickle(endpoint, args.seconds, args.interval_ms / 1000, stop)
        deadline = time.monotonic() + 30
        while len(spark_ms) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        puller.join(10)
        cycle = cycle_parts(query.recentProgress)
    finally:
        query.stop()
        for key in conf:
            spark.conf.unset(key)
    return spark_ms, pull_ms, sent, cycle


#: the parts of a micro-batch's progress (``durationMs``) worth printing
CYCLE_PARTS = ("triggerExecution", "addBatch", "walCommit", "commitOffsets", "latestOffset")


def cycle_parts(progress: list[dict]) -> dict[str, float]:
    """Median ``durationMs`` of each part over the batches that read messages."""
    batches = [p for p in progress if p.get("numInputRows")]
    if not batches:
        return {}
    return {
        part: statistics.median(p["durationMs"].get(part, 0) for p in batches)
        for part in CYCLE_PARTS
    }


if __name__ == "__main__":
    main()
