"""Spark batch read of a topic on Apache RocketMQ (option ``nameServer``) against the same
rows through a rocketlite broker's remoting port, in one run.

It needs an Apache RocketMQ 4.9 build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars) and
java on PATH; without them it says so and exits 0. One Apache name server and broker
(ASYNC_MASTER, ASYNC_FLUSH, 1 GiB heap) and one rocketlite broker (``--remoting-port``),
each on 127.0.0.1, hold the same topic of 8 queues: the same 100 B bodies (TAGS and KEYS
properties), sent to both with the remoting client's batch sends, queue by queue. Spark
``local[2]`` reads each with ``spark.read.format("rocketlite").option("nameServer", ...)``
earliest -> latest and computes ``count(*)`` and ``sum(length(body))``, checked against what
was sent. Cases:

* ``rocketlite``: the read through rocketlite's remoting port (the baseline);
* ``apache``: the same read of Apache RocketMQ's broker.

Cases run in interleaved rounds (the order alternating) after an untimed warm-up; the table
gives each case's median rows/s over the rounds with the spread (lowest-highest), and the
ratio apache / rocketlite taken within each round (target >= 0.9). Apache's broker answers a
pull with at most ``maxTransferCountOnMessageInMemory`` messages (32 by default);
``--apache-conf KEY=VALUE`` sets broker settings such as that one.

Run: ``ROCKETMQ_HOME=/path/to/rocketmq-4.9 .venv/bin/python bench/spark_read_apache.py
[--messages N] [--rounds R] [--quick] [--apache-conf KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
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
from _common import ServerProcess, process_cpu_seconds

QUEUES = 8
SIZE = 100
TARGET = 0.9
TOPIC = "ReadBench"
CASES = ("rocketlite", "apache")
#: messages per send request (a batch send of about 25 KiB)
SEND_BATCH = 128


def rocketlite_broker(work: Path) -> ServerProcess:
    """A rocketlite broker on free loopback ports with its remoting port on."""
    argv = [
        sys.executable, "-m", "rmq_spark.broker", "--store", str(work / "rocketlite-store"),
        "--port", "0", "--remoting-port", "0", "--log-level", "WARNING",
    ]  # fmt: skip
    return ServerProcess("rocketlite broker", argv, work / "rocketlite.log")


def remoting_address(broker: ServerProcess) -> str:
    for word in broker.ready_line.split():
        if word.startswith("remoting="):
            return word.removeprefix("remoting=")
    raise SystemExit(f"the rocketlite broker did not say its remoting port: {broker.ready_line}")


def fill(name_server: str, per_queue: int) -> int:
    """Send ``per_queue`` messages of ``SIZE`` bytes to every queue of the topic through
    ``name_server``; the bytes of bodies sent."""
    from rmq_spark.client.remoting import RemotingClient

    body = (bytes(range(256)) * (SIZE // 256 + 1))[:SIZE]
    with RemotingClient(name_server) as client:
        queues = client.route(TOPIC).writable
        assert len(queues) == QUEUES, queues
        for mq in queues:
            for first in range(0, per_queue, SEND_BATCH):
                n = min(SEND_BATCH, per_queue - first)
                props = [{"TAGS": "TagA", "KEYS": f"k{first + i}"} for i in range(n)]
                client.send(mq, [body] * n, props)
    return per_queue * QUEUES * SIZE


def read(spark, name_server: str, expected: tuple[int, int]) -> None:
    df = (
        spark.read.format("rocketlite")
        .option("nameServer", name_server)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    got = tuple(df.selectExpr("count(*)", "sum(length(body))").first())
    assert got == expected, (name_server, got, expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400_000, help="messages of 100 B")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="16,000 messages, 1 round")
    parser.add_argument(
        "--apache-conf", action="append", default=[], metavar="KEY=VALUE",
        help="a broker.conf setting of Apache's broker (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = 16_000, 1
    home = rocketmq_home()
    if home is None:
        print(
            "spark_read_apache: skipped: set ROCKETMQ_HOME to an Apache RocketMQ 4.9 build "
            "(a directory with lib/ of its jars) to read from Apache RocketMQ"
        )
        return 0
    if shutil.which("java") is None:
        print("spark_read_apache: skipped: needs java (a JDK or JRE 11+) on PATH")
        return 0
    conf = dict(item.split("=", 1) for item in args.apache_conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    per_queue = args.messages // QUEUES
    expected = (per_queue * QUEUES, per_queue * QUEUES * SIZE)
    work = Path(tempfile.mkdtemp(prefix="bench-read-apache-"))
    with interruptible(), contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        apache = ApacheRocketMQ(Java(home, work), conf=conf)
        stack.callback(apache.stop)
        apache.start()
        broker = rocketlite_broker(work).start()
        stack.callback(broker.stop)
        rocketlite_ns = remoting_address(broker)
        from rmq_spark.client import Admin

        with Admin(broker.endpoint) as admin:
            admin.create_topic(TOPIC, queues=QUEUES)
        create_topic(apache.namesrv, f"127.0.0.1:{apache.broker_port}", TOPIC, QUEUES)
        started = time.perf_counter()
        for name_server in (rocketlite_ns, apache.namesrv):
            fill(name_server, per_queue)
        print(
            f"Spark batch read through nameServer: Apache RocketMQ ({describe_build(home)}; "
            f"{java_version()}{'; ' + ', '.join(args.apache_conf) if conf else ''}) against "
            f"rocketlite's remoting port; {expected[0]:,} messages of {SIZE} B in "
            f"{QUEUES} queues on each (sent in {time.perf_counter() - started:.1f} s); "
            f"local[2], {args.rounds} interleaved round(s)",
            flush=True,
        )
        name_servers = {"rocketlite": rocketlite_ns, "apache": apache.namesrv}
        pids = {"rocketlite": broker.pid, "apache": apache.broker_pid}
        seconds, broker_cpu = run(args, name_servers, pids, expected)
    report(seconds, broker_cpu, expected[0], args.rounds, args.quick)
    return 0


def run(
    args: argparse.Namespace,
    name_servers: dict[str, str],
    pids: dict[str, int],
    expected: tuple[int, int],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds of each case's reads, and the CPU seconds its broker process used in them."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for case in CASES:  # untimed: Python workers start and import the client
            read(spark, name_servers[case], expected)
        seconds: dict[str, list[float]] = {case: [] for case in CASES}
        broker_cpu: dict[str, list[float]] = {case: [] for case in CASES}
        for round_no in range(args.rounds):
            order = CASES if round_no % 2 == 0 else CASES[::-1]
            for case in order:
                cpu_before = process_cpu_seconds(pids[case])
                started = time.perf_counter()
                read(spark, name_servers[case], expected)
                seconds[case].append(time.perf_counter() - started)
                broker_cpu[case].append(process_cpu_seconds(pids[case]) - cpu_before)
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)
        return seconds, broker_cpu
    finally:
        spark.stop()


def report(
    seconds: dict[str, list[float]],
    broker_cpu: dict[str, list[float]],
    messages: int,
    rounds: int,
    quick: bool,
) -> None:
    print(
        f"\n{rounds} interleaved round(s); median of rounds (spread lowest-highest); "
        "ratio = apache rows/s over rocketlite rows/s of the same round"
    )
    header = (
        f"{'case':<11} {'seconds':>8} {'rows/s':>11} {'spread rows/s':>19} {'broker CPU s':>13}"
    )
    print(header)
    print("-" * len(header))
    for case in CASES:
        rates = [messages / s for s in seconds[case]]
        median_s = statistics.median(seconds[case])
        print(
            f"{case:<11} {median_s:>8.2f} {messages / median_s:>11,.0f} "
            f"{min(rates):>9,.0f}-{max(rates):<9,.0f} {statistics.median(broker_cpu[case]):>13.2f}"
        )
    ratios = [r / a for a, r in zip(seconds["apache"], seconds["rocketlite"], strict=True)]
    ratio = statistics.median(ratios)
    verdict = "" if quick else f"  >= {TARGET}: {'met' if ratio >= TARGET else 'MISSED'}"
    print(f"apache / rocketlite: {ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}){verdict}")
    # What the Apache broker's own work leaves: its CPU seconds for one read, spread over
    # every core, against the whole rocketlite read (Spark, the tasks and the broker).
    apache_cpu = statistics.median(broker_cpu["apache"])
    floor_s = apache_cpu / (os.cpu_count() or 1)
    print(
        f"Apache's broker used {apache_cpu:.2f} CPU s per read ({apache_cpu / messages * 1e6:.1f} "
        f"us a message); on {os.cpu_count()} cores that alone is {floor_s:.2f} s, "
        f"{floor_s / statistics.median(seconds['rocketlite']):.2f}x of the whole rocketlite read"
    )
    if quick:
        print("--quick: every case ran once on little data; these figures are not measurements")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    sys.exit(main())
