"""What option ``sqlFilter`` saves: reading the 1% of a topic a SQL92 selector picks,
against reading the whole topic, in the same Spark session and the same run.

Builds one store with a topic over 8 queues of 100-byte bodies, each message with six
properties (TAGS, KEYS, UNIQ_KEY, ``region``, ``amount``, ``customer``); ``region`` is ``eu``
on exactly 1% of them, evenly spread. It is served by a broker subprocess on loopback and
read in one Spark session (local[2]) with ``count(*)`` and ``sum(length(body))``:

* whole / sqlFilter, on each path: short-circuit reads (the default on the broker's host:
  the tasks read the files and apply the selector to each record's stored properties before
  decoding it), pulls (``shortCircuit=false``: the broker applies the selector), and
  ``storePath`` (the tasks read the store directory, no broker);
* Spark where: the whole topic read with short-circuit reads and
  ``.where("properties['region'] = 'eu'")`` in Spark, what a query does without the option
  (pyspark does not push map-key predicates to a Python source);
* Spark's floor: the same query of a Python source with as many partitions that yields
  nothing, what any filtered read costs at least (Spark plans it and runs its tasks).

The cases run in interleaved rounds (every case once per round, after an untimed warm-up),
so a busy moment of the machine hits all of them alike; each ratio is taken within a round
(the filtered read over the whole read of the same path), and the table gives the median
and the spread (lowest-highest) over rounds. The target: reading the matching 1% costs at
most 0.2x of reading the whole topic.

Then the broker's CPU per message scanned, without Spark: the client pulls every queue from
start to end over gRPC (8,192 messages a pull), once unfiltered and once with the selector
(the broker scans up to 16,000 entries a pull, reads their properties and returns the
matches), in interleaved rounds, with the broker process's CPU time (user + system, from
/proc) read around each pass.

Last, sends with the filter on (the default) beside a broker started with
``--no-property-filter``: single remoting sends (8 threads of one RemotingClient, one
100-byte message a call) to each in interleaved rounds; target: not slower (>= 0.97x).

Run: ``.venv/bin/python bench/spark_sql_filter.py [--quick] [--messages N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    SEND_THREADS,
    SendRounds,
    Timing,
    broker_process,
    compare_sends,
    process_cpu_seconds,
    remoting_broker,
    report_sends,
)

TOPIC = "orders"
QUEUES = 8
BODY = 100
SELECTOR = "region = 'eu'"
#: one message in this many matches
EVERY = 100
#: sends with the filter on, against --no-property-filter
SENDS_TARGET = 0.97
TARGET = 0.2
PATHS = ("short-circuit", "pull", "storePath")
REGIONS = (b"us", b"apac", b"latam", b"emea-north", b"africa")


@dataclass
class Case:
    """One timed case: its runs' seconds and the broker CPU-seconds each run took."""

    name: str
    path: str
    filtered: bool
    seconds: list[float] = field(default_factory=list)
    broker_cpu: list[float] = field(default_factory=list)


def properties(first: int, count: int) -> list[bytes]:
    """The stored properties of messages ``first`` .. ``first + count - 1`` of a queue:
    region ``eu`` on every ``EVERY``-th."""
    out = []
    for i in range(first, first + count):
        region = b"eu" if i % EVERY == 0 else REGIONS[i % len(REGIONS)]
        out.append(
            b"TAGS\x01TagA\x02KEYS\x01k%d\x02UNIQ_KEY\x01%032X\x02region\x01%s\x02"
            b"amount\x01%d\x02customer\x01c%d\x02" % (i, i, region, i % 977, i % 10_007)
        )
    return out


def build_store(store_dir: Path, messages: int) -> None:
    """``messages`` messages over the queues of TOPIC, in-process."""
    from rmq_spark.store import MessageStore, StoreConfig

    batch = 4096
    body = (bytes(range(256)) * (BODY // 256 + 1))[:BODY]
    with MessageStore.open(StoreConfig(store_dir)) as store:
        store.topics.create("warm", queues=2)
        store.append("warm", 0, [b"w"] * 100, properties(0, 100), tags=["TagA"] * 100)
        store.topics.create(TOPIC, queues=QUEUES)
        per_queue = messages // QUEUES
        for qid in range(QUEUES):
            for first in range(0, per_queue, batch):
                n = min(batch, per_queue - first)
                store.append(TOPIC, qid, [body] * n, properties(first, n), tags=["TagA"] * n)


def matching(messages: int) -> int:
    per_queue = messages // QUEUES
    return QUEUES * len(range(0, per_queue, EVERY))


class Reads:
    """The Spark reads, each checking the rows it got."""

    def __init__(self, spark, endpoint: str, store: Path) -> None:
        self.spark = spark
        self.endpoint = endpoint
        self.store = store

    def read(self, topic: str, path: str, filtered: bool, expected: tuple[int, int]) -> None:
        where = {
            "short-circuit": {"endpoints": self.endpoint},
            "pull": {"endpoints": self.endpoint, "shortCircuit": "false"},
            "storePath": {"storePath": str(self.store), "allowLiveStore": "true"},
        }[path]
        reader = self.spark.read.format("rocketlite")
        for key, value in where.items():
            reader = reader.option(key, value)
        if filtered:
            reader = reader.option("sqlFilter", SELECTOR)
        df = reader.option("topic", topic).option("startingOffsets", "earliest").load()
        got = tuple(df.selectExpr("count(*)", "coalesce(sum(length(body)), 0)").first())
        assert got == expected, (topic, path, filtered, got, expected)

    def floor(self) -> None:
        df = self.spark.read.format("bench_empty").load()
        got = tuple(df.selectExpr("count(*)", "coalesce(sum(length(body)), 0)").first())
        assert got == (0, 0), got

    def spark_where(self, topic: str, expected: tuple[int, int]) -> None:
        df = (
            self.spark.read.format("rocketlite")
            .option("endpoints", self.endpoint)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
            .where("properties['region'] = 'eu'")
        )
        got = tuple(df.selectExpr("count(*)", "coalesce(sum(length(body)), 0)").first())
        assert got == expected, (topic, got, expected)


def empty_source():
    """A Python data source of QUEUES partitions yielding no row (Spark's fixed cost)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rmq_spark.source.schema import SPARK_SCHEMA

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(QUEUES)]

        def read(self, partition):
            return iter(())

    class Empty(DataSource):
        @classmethod
        def name(cls):
            return "bench_empty"

        def schema(self):
            return SPARK_SCHEMA

        def reader(self, schema):
            return Reader()

    return Empty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="40,000 messages, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 40_000, 1
    args.messages = args.messages // (QUEUES * EVERY) * QUEUES * EVERY
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    work = Path(tempfile.mkdtemp(prefix="rmq-sql-filter-bench-"))
    started = time.perf_counter()
    build_store(work / "store", args.messages)
    print(
        f"stored {args.messages:,} messages of {BODY} B with six properties over {QUEUES} "
        f"queues in {time.perf_counter() - started:.1f} s; {SELECTOR!r} picks "
        f"{matching(args.messages):,} (1 in {EVERY})"
    )
    broker = broker_process(work / "store", work / "broker.log").start()
    try:
        cases = spark_cases(args, broker, work / "store")
        scans = broker_scans(args, broker)
    finally:
        broker.stop()
    try:
        sends = sends_with_filter(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(cases, scans, args)
    print(
        f"\nsends: single remoting sends, {SEND_THREADS} threads, 100 B, {args.rounds} "
        "interleaved rounds of 5 s"
    )
    labels = {"no-filter": "--no-property-filter (baseline)", "filter": "filter on (default)"}
    report_sends(sends, labels, SENDS_TARGET)


def sends_with_filter(work: Path, args) -> dict[str, SendRounds]:
    off = remoting_broker(work, "no-filter", "--no-property-filter")
    on = remoting_broker(work, "filter")
    try:
        timing = Timing(warmup_s=0.0 if args.quick else 2.0, round_s=5.0, rounds=args.rounds)
        return compare_sends([off, on], timing)
    finally:
        on.stop()
        off.stop()


def spark_cases(args, broker, store: Path) -> list[Case]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(empty_source())
    reads = Reads(spark, broker.endpoint, store)
    whole = (args.messages, args.messages * BODY)
    picked = (matching(args.messages), matching(args.messages) * BODY)
    warm_whole, warm_picked = (100, 100), (1, 1)
    for _ in range(1 if args.quick else 2):  # untimed: Python workers start and import
        for path in PATHS:
            reads.read("warm", path, False, warm_whole)
            reads.read("warm", path, True, warm_picked)
        reads.spark_where("warm", warm_picked)
        reads.floor()
    plan: list[tuple[Case, Callable[[], None]]] = []
    for path in PATHS:
        for filtered in (False, True):
            case = Case("sqlFilter" if filtered else "whole", path, filtered)

            def run(path: str = path, filtered: bool = filtered) -> None:
                reads.read(TOPIC, path, filtered, picked if filtered else whole)

            plan.append((case, run))
    plan.append(
        (Case("Spark where", "short-circuit", True), lambda: reads.spark_where(TOPIC, picked))
    )
    plan.append((Case("Spark's floor", "short-circuit", True), reads.floor))
    for round_no in range(args.rounds):
        turn = round_no * 2 % len(plan)  # no case always first
        for case, run in plan[turn:] + plan[:turn]:
            cpu = process_cpu_seconds(broker.pid)
            started = time.perf_counter()
            run()
            case.seconds.append(time.perf_counter() - started)
            case.broker_cpu.append(process_cpu_seconds(broker.pid) - cpu)
        print(f"Spark round {round_no + 1}/{args.rounds} done", flush=True)
    spark.stop()
    return [case for case, _ in plan]


@dataclass
class Scan:
    """Pulls of every queue from start to end: broker CPU-seconds and wall seconds a pass."""

    name: str
    cpu: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    returned: int = 0


def broker_scans(args, broker) -> list[Scan]:
    from rmq_spark.client.connection import ClientConfig, Connection
    from rmq_spark.structs import MessageQueue
    from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
    from rmq_spark.wire.v1 import mq_to_pb

    per_queue = args.messages // QUEUES
    queues = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
    scans = [Scan("unfiltered pull"), Scan("SQL92 pull")]
    conn = Connection(broker.endpoint, ClientConfig(request_timeout_ms=60_000))
    try:

        def one_pass(selector: str | None) -> int:
            returned = 0
            for mq in queues:
                offset = 0
                while offset < per_queue:
                    request = messaging_pb2.PullMessagesRequest(
                        queue=mq_to_pb(mq),
                        queue_offset=offset,
                        max_messages=8192,
                        max_bytes=16 << 20,
                        subscription_expression=selector or "*",
                        expression_type="SQL92" if selector else "TAG",
                    )
                    answer = conn.call(conn.messaging.PullMessages, request)
                    returned += len(answer.record_sizes_i32le) // 4
                    offset = answer.next_begin_offset
            return returned

        one_pass(None)  # untimed warm-up: the files in the page cache
        one_pass(SELECTOR)
        for _ in range(args.rounds):
            for scan, selector in zip(scans, (None, SELECTOR), strict=True):
                cpu = process_cpu_seconds(broker.pid)
                started = time.perf_counter()
                scan.returned = one_pass(selector)
                scan.seconds.append(time.perf_counter() - started)
                scan.cpu.append(process_cpu_seconds(broker.pid) - cpu)
    finally:
        conn.close()
    return scans


def report(cases: list[Case], scans: list[Scan], args) -> None:
    n = args.messages
    print(
        f"\n{args.rounds} interleaved rounds; median of rounds (spread lowest-highest); "
        "ratio = seconds over the whole read's of the same path in the same round"
    )
    header = (
        f"{'path':<14} {'case':<12} {'rows':>10} {'seconds':>8} {'vs whole':>9} "
        f"{'spread':>11} {'broker CPU-s':>12}  target"
    )
    print(header)
    print("-" * len(header))
    for case in cases:
        whole = next(c for c in cases if c.path == case.path and not c.filtered)
        rs = [f / w for f, w in zip(case.seconds, whole.seconds, strict=True)]
        ratio = statistics.median(rs)
        verdict = ""
        if case.filtered and case.name == "sqlFilter" and not args.quick:
            verdict = f"  <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'}"
        rows = 0 if case.name == "Spark's floor" else matching(n) if case.filtered else n
        print(
            f"{case.path:<14} {case.name:<12} {rows:>10,} {statistics.median(case.seconds):>8.2f} "
            f"{ratio:>8.2f}x {min(rs):>5.2f}-{max(rs):<5.2f}"
            f"{statistics.median(case.broker_cpu):>12.2f}{verdict}"
        )
    print(
        f"\nthe broker's CPU per message scanned ({n:,} messages a pass, {args.rounds} rounds; "
        "median, spread)"
    )
    for scan in scans:
        per_m = [c / n * 1e6 for c in scan.cpu]
        rate = [n / s / 1e6 for s in scan.seconds]
        print(
            f"  {scan.name:<16} {statistics.median(per_m):6.2f} CPU-s per M scanned "
            f"({min(per_m):.2f}-{max(per_m):.2f}), {statistics.median(rate):5.2f} M scanned/s, "
            f"{scan.returned:,} returned"
        )
    plain, selected = (statistics.median(s.cpu) for s in scans)
    print(f"  a selector costs the broker {selected / plain:.2f}x the CPU of an unfiltered pull")
    if args.quick:
        print("--quick: every case ran once on little data; these figures are not measurements")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
