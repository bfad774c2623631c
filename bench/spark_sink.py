"""Spark sink throughput: ``df.write.format("rocketlite")`` exactly once and at least once,
against ``Producer.send_batch`` of the same rows, in one run.

One broker subprocess on loopback (default flags: ASYNC flush). For each body size (100 B,
1 KiB), the rows (``body`` plus a ``tags`` column) are built once in a cached Spark
DataFrame of 2 partitions (``local[2]``), and collected once for the baseline. Cases, each
into a topic of its own with 8 queues:

* ``send_batch``: the baseline, ``Producer.send_batch`` from 2 threads (one per Spark core),
  4,096 rows per call, round robin over the queues;
* ``at-least-once``: ``df.write`` with ``exactlyOnce=false`` (tasks send, visible at once);
* ``exactly-once``: ``df.write`` (tasks stage, the driver's commit makes the rows visible).

Cases run in interleaved rounds after an untimed warm-up; the table gives each case's median
rows/s and MB/s (bodies) over rounds with the spread, and the two ratios the targets are on,
taken within each round: exactly-once / at-least-once (target >= 0.7) and
at-least-once / send_batch (target >= 0.7); then the broker's CPU time per row of each case
(user + system, from /proc).

Run: ``.venv/bin/python bench/spark_sink.py [--rows N] [--rounds R] [--quick]``.
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

from _common import broker_process, process_cpu_seconds

QUEUES = 8
SIZES = (100, 1024)
TARGETS = {"exactly-once / at-least-once": 0.7, "at-least-once / send_batch": 0.7}


def rows_frame(spark, count: int, size: int):
    df = spark.range(count, numPartitions=2).selectExpr(
        f"CAST(lpad(CAST(id AS STRING), {size}, 'x') AS BINARY) AS body",
        "CONCAT('tag', CAST(id % 4 AS STRING)) AS tags",
    )
    return df.cache()


def send_batch(endpoint: str, topic: str, bodies: list[bytes], tags: list[str]) -> None:
    from rmq_spark.client import Message, Producer

    with Producer(endpoint) as producer:
        halves = [(0, len(bodies) // 2), (len(bodies) // 2, len(bodies))]

        def send(lo: int, hi: int) -> None:
            for start in range(lo, hi, 4096):
                end = min(hi, start + 4096)
                producer.send_batch(topic, [Message(bodies[i], tags[i]) for i in range(start, end)])

        threads = [threading.Thread(target=send, args=half) for half in halves]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="100 B rows (1 KiB: a quarter)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 rows of 100 B, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 20_000, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rmq-sink-bench-"))
    broker = broker_process(work / "store", work / "broker.log").start()
    try:
        results, cpu = run(args, broker.endpoint, broker.pid)
    finally:
        broker.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    report(results, args.rounds)
    report_cpu(cpu, args.rows)


def run(args, endpoint: str, broker_pid: int):
    from pyspark.sql import SparkSession

    from rmq_spark.client import Admin

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sizes = SIZES[:1] if args.quick else SIZES
    counts = {100: args.rows, 1024: args.rows // 4}
    frames, collected = {}, {}
    for size in sizes:
        frames[size] = rows_frame(spark, counts[size], size)
        rows = frames[size].collect()
        collected[size] = ([bytes(r.body) for r in rows], [r.tags for r in rows])
    topic_no = iter(range(10**6))
    admin = Admin(endpoint)

    def fresh_topic() -> str:
        name = f"sink-bench-{next(topic_no)}"
        admin.create_topic(name, queues=QUEUES)
        return name

    def write(size: int, exactly_once: bool) -> None:
        (
            frames[size]
            .write.format("rocketlite")
            .option("endpoints", endpoint)
            .option("topic", fresh_topic())
            .option("exactlyOnce", str(exactly_once).lower())
            .mode("append")
            .save()
        )

    cases = {
        "send_batch": lambda size: send_batch(endpoint, fresh_topic(), *collected[size]),
        "at-least-once": lambda size: write(size, False),
        "exactly-once": lambda size: write(size, True),
    }
    for size in sizes:  # untimed warm-up: Python workers start, modules load
        for fn in cases.values():
            fn(size)
    seconds: dict[tuple[int, str], list[float]] = {}
    cpu: dict[tuple[int, str], list[float]] = {}
    names = list(cases)
    for round_no in range(args.rounds):
        order = names[round_no % 3 :] + names[: round_no % 3]
        for size in sizes:
            for name in order:
                used = process_cpu_seconds(broker_pid)
                started = time.perf_counter()
                cases[name](size)
                seconds.setdefault((size, name), []).append(time.perf_counter() - started)
                cpu.setdefault((size, name), []).append(process_cpu_seconds(broker_pid) - used)
        print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    admin.close()
    spark.stop()
    rates = {key: [counts[key[0]] / s for s in values] for key, values in seconds.items()}
    per_row = {key: [c / counts[key[0]] * 1e6 for c in values] for key, values in cpu.items()}
    return rates, per_row


def report(rates: dict[tuple[int, str], list[float]], rounds: int) -> None:
    print(f"\n{rounds} interleaved rounds; median (spread lowest-highest)")
    print(f"{'body':>6}  {'case':<14} {'rows/s':>10} {'MB/s':>7} {'spread rows/s':>21}")
    for (size, name), values in rates.items():
        median = statistics.median(values)
        print(
            f"{size:>5}B  {name:<14} {median:>10,.0f} {median * size / 1e6:>7.1f} "
            f"{min(values):>10,.0f}-{max(values):<10,.0f}"
        )
    print(f"\n{'body':>6}  {'ratio (per round)':<30} {'median':>6} {'spread':>11}  target")
    for size in sorted({size for size, _ in rates}):
        for label, (top, bottom) in (
            ("exactly-once / at-least-once", ("exactly-once", "at-least-once")),
            ("at-least-once / send_batch", ("at-least-once", "send_batch")),
        ):
            per_round = [a / b for a, b in zip(rates[size, top], rates[size, bottom], strict=True)]
            median = statistics.median(per_round)
            verdict = "met" if median >= TARGETS[label] else "MISSED"
            print(
                f"{size:>5}B  {label:<30} {median:>6.2f} {min(per_round):>5.2f}-"
                f"{max(per_round):<5.2f}  >= {TARGETS[label]} {verdict}"
            )


def report_cpu(cpu: dict[tuple[int, str], list[float]], rows: int) -> None:
    print(f"\n{'body':>6}  {'case':<14} {'broker CPU µs/row':>18}")
    for (size, name), values in cpu.items():
        print(f"{size:>5}B  {name:<14} {statistics.median(values):>18.2f}")


if __name__ == "__main__":
    main()
