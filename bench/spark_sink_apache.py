"""Spark sink into Apache RocketMQ: ``df.write.format("rocketlite")`` through ``nameServer``
exactly once (transactional half messages, each committed with END_TRANSACTION) against
at least once (plain batch sends), in one run.

It needs an Apache RocketMQ 4.9 build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars) and
java on PATH; without them it says so and exits 0. One Apache name server and broker
(ASYNC_MASTER, ASYNC_FLUSH, 1 GiB heap) on 127.0.0.1; Spark ``local[2]``. The rows (100 B
``body`` plus a ``tags`` column) are built once in a cached DataFrame of 2 partitions. Cases,
each into a fresh topic of 8 queues:

* ``at-least-once``: ``exactlyOnce=false``: each task sends SEND_BATCH_MESSAGE of up to
  4,096 rows, visible at once (the baseline);
* ``exactly-once``: the default: each task sends one half message per row (many in flight),
  the driver commits them (END_TRANSACTION per row) when the job succeeds.

Cases run in interleaved rounds after an untimed warm-up; the table gives each case's
median rows/s over the rounds with the spread, and the ratio exactly-once / at-least-once
taken within each round (target >= 0.5).

Then, for scale, Apache RocketMQ's own Java benchmark producers run on the same broker
(unless ``--quick``): ``BatchProducer`` (batches of 1,024 messages of 100 B, 8 threads) and
``TransactionProducer`` (one half message and one END_TRANSACTION per message, 32 threads:
what a RocketMQ 4.9 broker takes of transactional messages, which cannot be batched). Their
ratio bounds what any exactly-once writer built on RocketMQ 4.9's transactions can reach
against batch sends on the machine.

Run: ``ROCKETMQ_HOME=/path/to/rocketmq-4.9 .venv/bin/python bench/spark_sink_apache.py
[--rows N] [--rounds R] [--quick] [--java-seconds S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _apache import (
    ApacheRocketMQ,
    Java,
    create_topic,
    describe_build,
    interruptible,
    java_version,
    rocketmq_home,
)

QUEUES = 8
SIZE = 100
TARGET = 0.5
CASES = ("at-least-once", "exactly-once")


def rows_frame(spark, count: int):
    df = spark.range(count, numPartitions=2).selectExpr(
        f"CAST(lpad(CAST(id AS STRING), {SIZE}, 'x') AS BINARY) AS body",
        "CONCAT('tag', CAST(id % 4 AS STRING)) AS tags",
    )
    return df.cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of 100 B per case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 1 round")
    parser.add_argument(
        "--java-seconds",
        type=int,
        default=60,
        help="how long each of Apache's own Java producers runs (0: not at all)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.rounds, args.java_seconds = 20_000, 1, 0
    home = rocketmq_home()
    if home is None:
        print(
            "spark_sink_apache: skipped: set ROCKETMQ_HOME to an Apache RocketMQ 4.9 build "
            "(a directory with lib/ of its jars) to write into Apache RocketMQ"
        )
        return 0
    if shutil.which("java") is None:
        print("spark_sink_apache: skipped: needs java (a JDK or JRE 11+) on PATH")
        return 0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="bench-sink-apache-"))
    with interruptible(), contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        apache = ApacheRocketMQ(Java(home, work))
        stack.callback(apache.stop)
        apache.start()
        print(
            f"df.write through nameServer into Apache RocketMQ ({describe_build(home)}; "
            f"{java_version()}), {args.rows:,} rows of {SIZE} B, 2 partitions, "
            f"{args.rounds} interleaved round(s)",
            flush=True,
        )
        rates = run(args, apache)
        java_rates = own_producers(apache, args.java_seconds) if args.java_seconds else {}
    report(rates, args.rounds)
    if java_rates:
        report_own(java_rates)
    return 0


#: Apache's benchmark producers: (class, arguments, the per-window rate its output prints)
OWN_PRODUCERS = {
    "BatchProducer": (["-s", str(SIZE), "-b", "1024", "-w", "8"], r"Send MPS: *(\d+)"),
    "TransactionProducer": (["-s", str(SIZE), "-w", "32"], r"Send TPS: *(\d+)"),
}


def own_producers(apache: ApacheRocketMQ, seconds: int) -> dict[str, float]:
    """The median messages/s of each of Apache's own benchmark producers over its windows
    after the first (JVM warm-up), run one after the other for ``seconds`` each."""
    rates = {}
    for name, (args, pattern) in OWN_PRODUCERS.items():
        argv = apache.java.argv(
            ["-Xmx512m"],
            f"org.apache.rocketmq.example.benchmark.{name}",
            "-n", apache.namesrv, "-t", f"Own{name}", *args,
        )  # fmt: skip
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            out, _ = process.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            out, _ = process.communicate(timeout=30)
        windows = [int(x) for x in re.findall(pattern, out)]
        if len(windows) < 2:
            raise SystemExit(f"{name} printed too few rates:\n{out[-2000:]}")
        rates[name] = statistics.median(windows[1:])
    return rates


def report_own(rates: dict[str, float]) -> None:
    batch, tx = rates["BatchProducer"], rates["TransactionProducer"]
    print(
        "\nApache RocketMQ's own Java producers on the same broker (median of 10 s windows "
        f"after the first):\n  BatchProducer, batches of 1,024: {batch:,.0f} msgs/s\n"
        f"  TransactionProducer, half + end per message: {tx:,.0f} msgs/s = {tx / batch:.3f}x "
        "of its batches"
    )


def run(args: argparse.Namespace, apache: ApacheRocketMQ) -> dict[str, list[float]]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = rows_frame(spark, args.rows)
    frame.count()
    topic_no = iter(range(10**6))
    broker = f"127.0.0.1:{apache.broker_port}"

    def write(exactly_once: bool) -> float:
        topic = f"SinkBenchApache{next(topic_no)}"
        create_topic(apache.namesrv, broker, topic, QUEUES)
        started = time.perf_counter()
        (
            frame.write.format("rocketlite")
            .option("nameServer", apache.namesrv)
            .option("topic", topic)
            .option("exactlyOnce", str(exactly_once).lower())
            .mode("append")
            .save()
        )
        return time.perf_counter() - started

    for name in CASES:  # untimed warm-up: Python workers start, modules load
        write(name == "exactly-once")
    rates: dict[str, list[float]] = {name: [] for name in CASES}
    for round_no in range(args.rounds):
        order = CASES[round_no % 2 :] + CASES[: round_no % 2]
        for name in order:
            rates[name].append(args.rows / write(name == "exactly-once"))
        print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    spark.stop()
    return rates


def report(rates: dict[str, list[float]], rounds: int) -> None:
    print(f"\n{rounds} interleaved rounds; median (spread lowest-highest)")
    print(f"{'case':<14} {'rows/s':>10} {'MB/s':>7} {'spread rows/s':>21}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"{name:<14} {median:>10,.0f} {median * SIZE / 1e6:>7.1f} "
            f"{min(values):>10,.0f}-{max(values):<10,.0f}"
        )
    per_round = [a / b for a, b in zip(rates["exactly-once"], rates["at-least-once"], strict=True)]
    median = statistics.median(per_round)
    verdict = "met" if median >= TARGET else "MISSED"
    print(
        f"\nexactly-once / at-least-once (per round): {median:.2f} "
        f"({min(per_round):.2f}-{max(per_round):.2f}), target >= {TARGET}: {verdict}"
    )


if __name__ == "__main__":
    sys.exit(main())
