"""Spark read throughput of the ``rocketlite`` source against the ceiling of Python sources.

Builds one store with two topics over 8 queues each, 100-byte and 1 KiB bodies (TAGS, KEYS
and UNIQ_KEY properties), serves it from a broker subprocess on loopback, and measures in one
Spark session (local[2]), for each body size:

* ceiling: a trivial in-memory Python data source with the same schema and 8 partitions,
  yielding pre-built Arrow batches of the same rows (what any Python source costs here);
* batch: ``spark.read.format("rocketlite")`` earliest -> latest, ``count(*)`` and
  ``sum(length(body))``, pulling over gRPC (``shortCircuit=false``: the floor to hold);
* stream: ``spark.readStream.format("rocketlite")`` with Trigger.AvailableNow into the
  ``noop`` sink, from a fresh checkpoint, pulling over gRPC;
* local batch, local stream: the same with short-circuit reads (the default on the
  broker's host: tasks read the files the broker passes them);
* offline: the batch read of the store directory itself (option ``storePath``, with
  ``allowLiveStore`` since the broker holds it), no broker at all;
* projection: the default batch read (short-circuit) of 3 columns only
  (``.schema("topic string, queueOffset long, body binary")``), against its own ceiling:
  the in-memory source yielding the same 3 columns of its sample ("ceiling 3 col").

The cases run in interleaved rounds (every case once per round, after an untimed warm-up of
Spark's Python workers), so a busy moment of the machine hits all of them alike; each ratio
is taken within a round against that round's ceiling, and the table gives the median and the
spread (lowest-highest) over rounds. The broker's CPU time (user + system, from /proc) is
read around every rocketlite case: CPU-seconds it spends per million messages served.

``--chart PATH`` draws MB/s against the ceiling for both sizes (PNG, matplotlib).
Run: ``.venv/bin/python bench/spark_read.py [--quick] [--chart docs/images/spark_read.png]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import broker_process, process_cpu_seconds

QUEUES = 8
#: (body bytes, topic); the 1 KiB topic holds a quarter as many messages
SIZES = ((100, "bench100"), (1024, "bench1k"))
TARGETS = {"offline": 0.8, "local batch": 0.8, "projection": 0.9}
#: the columns of the projection case, and the ceiling each case is measured against
PROJECTION = "topic string, queueOffset long, body binary"
CEILING_OF = {"projection": "ceiling 3 col"}
#: AvailableNow's target applies without the query's fixed start-up cost
STREAM_TARGETS = {"local stream": 0.7}


@dataclass
class Case:
    """One timed case: its runs' seconds and the broker CPU-seconds each run took."""

    name: str
    size: int
    messages: int
    body_bytes: int
    seconds: list[float] = field(default_factory=list)
    broker_cpu: list[float] = field(default_factory=list)

    def mb_per_s(self, i: int) -> float:
        return self.body_bytes / self.seconds[i] / 1e6


def build_store(store_dir: Path, counts: dict[int, int]) -> None:
    """Append ``counts[size]`` messages of each body size over the queues, in-process."""
    from rmq_spark.store import MessageStore, StoreConfig

    batch = 4096
    with MessageStore.open(StoreConfig(store_dir)) as store:
        store.topics.create("warm", queues=2)
        store.append("warm", 0, [b"w"] * 100, tags=["TagA"] * 100)
        for size, topic in SIZES:
            store.topics.create(topic, queues=QUEUES)
            body = (bytes(range(256)) * (size // 256 + 1))[:size]
            per_queue = counts[size] // QUEUES
            for qid in range(QUEUES):
                for first in range(0, per_queue, batch):
                    n = min(batch, per_queue - first)
                    props = [
                        b"TAGS\x01TagA\x02KEYS\x01k%d\x02UNIQ_KEY\x01%032X\x02" % (i, i)
                        for i in range(first, first + n)
                    ]
                    store.append(topic, qid, [body] * n, props, tags=["TagA"] * n)


def baseline_source(samples: dict[str, object], counts: dict[str, int]):
    """A Python data source yielding copies of a sample (an Arrow batch of real rows) of the
    topic named by option ``topic``."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rmq_spark.source.schema import SPARK_SCHEMA

    class Reader(DataSourceReader):
        def __init__(self, topic: str, columns: list[str]) -> None:
            self.sample = samples[topic].select(columns)
            self.per_partition = counts[topic] // QUEUES

        def partitions(self):
            return [InputPartition(i) for i in range(QUEUES)]

        def read(self, partition):
            left = self.per_partition
            while left > 0:
                n = min(left, self.sample.num_rows)
                yield self.sample.slice(0, n)
                left -= n

    class InMemory(DataSource):
        @classmethod
        def name(cls):
            return "bench_in_memory"

        def schema(self):
            return SPARK_SCHEMA

        def reader(self, schema):  # the given schema's columns of the sample
            return Reader(self.options["topic"], schema.fieldNames())

    return InMemory


def sample_batch(endpoint: str, topic: str, rows: int):
    """Real rows in the source's Arrow layout, read once through the client."""
    from rmq_spark.client import PullConsumer
    from rmq_spark.source.schema import to_rows

    with PullConsumer(endpoint) as consumer:
        mq = consumer.queues(topic)[0]
        consumer.assign([mq])
        consumer.seek(mq, 0)
        result = consumer.pull(mq, max_messages=rows)
        return to_rows(result.batch, mq.broker_name)


class Runs:
    """The three ways of reading a topic, each checking it read every message once."""

    def __init__(self, spark, endpoint: str, work: Path) -> None:
        self.spark = spark
        self.endpoint = endpoint
        self.work = work
        self.checkpoints = 0

    def batch(
        self, topic: str, expected: tuple[int, int], schema: str | None = None, **where: str
    ) -> None:
        reader = self.spark.read.format("rocketlite")
        if schema is not None:
            reader = reader.schema(schema)
        where = where or {"endpoints": self.endpoint, "shortCircuit": "false"}
        for key, value in where.items():
            reader = reader.option(key, value)
        df = (
            reader.option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        got = tuple(df.selectExpr("count(*)", "sum(length(body))").first())
        assert got == expected, (topic, got, expected)

    def local_batch(self, topic: str, expected: tuple[int, int]) -> None:
        self.batch(topic, expected, endpoints=self.endpoint)

    def projection(self, topic: str, expected: tuple[int, int]) -> None:
        self.batch(topic, expected, PROJECTION, endpoints=self.endpoint)

    def local_stream(self, topic: str, expected: tuple[int, int]) -> None:
        self.stream(topic, expected, short_circuit=True)

    def offline(self, topic: str, expected: tuple[int, int]) -> None:
        store = str(self.work / "store")
        self.batch(topic, expected, storePath=store, allowLiveStore="true")

    def stream(self, topic: str, expected: tuple[int, int], short_circuit: bool = False) -> None:
        self.checkpoints += 1
        df = (
            self.spark.readStream.format("rocketlite")
            .option("endpoints", self.endpoint)
            .option("shortCircuit", str(short_circuit).lower())
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(self.work / f"cp{self.checkpoints}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        read = sum(p["numInputRows"] for p in query.recentProgress)
        assert read == expected[0], (topic, read, expected)

    def ceiling(self, topic: str, expected: tuple[int, int], schema: str | None = None) -> None:
        reader = self.spark.read.format("bench_in_memory")
        if schema is not None:
            reader = reader.schema(schema)
        df = reader.option("topic", topic).load()
        got = tuple(df.selectExpr("count(*)", "sum(length(body))").first())
        assert got == expected, (topic, got, expected)

    def ceiling_projection(self, topic: str, expected: tuple[int, int]) -> None:
        self.ceiling(topic, expected, PROJECTION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000, help="100 B messages")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="20,000 messages of 100 B only, 1 round"
    )
    parser.add_argument("--chart", type=Path, help="draw MB/s vs the ceiling into this PNG")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 20_000, 1
        if args.chart:
            parser.error("--chart needs the full run (both body sizes); drop --quick")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    counts = {100: args.messages, 1024: args.messages // 4}
    counts = {size: n // QUEUES * QUEUES for size, n in counts.items()}
    work = Path(tempfile.mkdtemp(prefix="rmq-spark-bench-"))
    started = time.perf_counter()
    build_store(work / "store", counts)
    print(
        f"stored {counts[100]:,} x 100 B and {counts[1024]:,} x 1 KiB messages "
        f"({QUEUES} queues each) in {time.perf_counter() - started:.1f} s"
    )
    broker = broker_process(work / "store", work / "broker.log").start()
    try:
        cases = run(args, broker, counts, work)
    finally:
        broker.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    report(cases, args.rounds, args.quick)
    if args.chart:
        draw_chart(cases, args.chart)
        print(f"chart: {args.chart}")


def run(args, broker, counts: dict[int, int], work: Path) -> list[Case]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sizes = SIZES[:1] if args.quick else SIZES  # --quick checks the cases run: 100 B will do
    topics = {size: topic for size, topic in SIZES}
    samples = {topic: sample_batch(broker.endpoint, topic, 8192) for _, topic in sizes}
    spark.dataSource.register(
        baseline_source(samples, {topic: counts[size] for size, topic in sizes})
    )
    runs = Runs(spark, broker.endpoint, work)
    # Untimed warm-up: Python workers start and import the client once.
    if args.quick:  # checks that every case runs; its figures are not quoted
        runs.batch("warm", (100, 100))
    else:
        for _ in range(2):
            runs.batch("warm", (100, 100))
            runs.offline("warm", (100, 100))
            runs.local_batch("warm", (100, 100))
            runs.local_stream("warm", (100, 100))
            runs.stream("warm", (100, 100))
            runs.projection("warm", (100, 100))
            runs.ceiling(topics[1024], (counts[1024], counts[1024] * 1024))
            runs.ceiling_projection(topics[1024], (counts[1024], counts[1024] * 1024))
    plan: list[tuple[Case, Callable[[str, tuple[int, int]], None], bool]] = []
    fixed = Case("stream", 0, 100, 100)  # AvailableNow of 100 messages: per-query cost
    plan.append((fixed, runs.stream, False))
    for size, _topic in sizes:
        n = counts[size]
        for name, fn, on_broker in (
            ("ceiling", runs.ceiling, False),
            ("batch", runs.batch, True),
            ("stream", runs.stream, True),
            ("local batch", runs.local_batch, True),
            ("local stream", runs.local_stream, True),
            ("offline", runs.offline, False),
            ("ceiling 3 col", runs.ceiling_projection, False),
            ("projection", runs.projection, True),
        ):
            plan.append((Case(name, size, n, n * size), fn, on_broker))
    for round_no in range(args.rounds):
        # rotate the order so no case always runs first (or right after the store build)
        turn = round_no * 3 % len(plan)
        for case, fn, on_broker in plan[turn:] + plan[:turn]:
            cpu = process_cpu_seconds(broker.pid)
            started = time.perf_counter()
            fn(topics.get(case.size, "warm"), (case.messages, case.body_bytes))
            case.seconds.append(time.perf_counter() - started)
            if on_broker:
                case.broker_cpu.append(process_cpu_seconds(broker.pid) - cpu)
        print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    spark.stop()
    return [case for case, _, _ in plan]


def fixed_cost(cases: list[Case]) -> float:
    """Median seconds of an AvailableNow query over 100 messages: starting the query (Spark
    starts a Python process for the stream reader), its checkpoint writes, its end."""
    return statistics.median(next(c for c in cases if c.size == 0).seconds)


def ratios(case: Case, ceiling: Case, less_s: float = 0.0) -> list[float]:
    """Per round: this case's rows/s over the ceiling's rows/s of the same round (with
    ``less_s`` taken off this case's seconds)."""
    return [
        ceiling.seconds[i] / (case.seconds[i] - less_s)
        for i in range(min(len(case.seconds), len(ceiling.seconds)))
    ]


def report(cases: list[Case], rounds: int, quick: bool = False) -> None:
    print(
        f"\n{rounds} interleaved rounds; median of rounds (spread lowest-highest); "
        "ratio = rows/s over the same round's ceiling"
    )
    header = (
        f"{'body':>6}  {'case':<13} {'seconds':>8} {'rows/s':>11} {'MB/s':>7} "
        f"{'vs ceiling':>10} {'spread':>11} {'broker CPU-s/M':>14}  target"
    )
    print(header)
    print("-" * len(header))
    fixed = fixed_cost(cases)
    for case in cases:
        if case.size == 0:
            continue
        ceiling = ceiling_of(case, cases)
        seconds = statistics.median(case.seconds)
        rs = ratios(case, ceiling)
        ratio = statistics.median(rs)
        cpu = (
            f"{statistics.median(case.broker_cpu) / case.messages * 1e6:>14.2f}"
            if case.broker_cpu
            else f"{'':>14}"
        )
        target = None if quick else TARGETS.get(case.name)
        verdict = (
            "" if target is None else f"  >= {target}: {'met' if ratio >= target else 'MISSED'}"
        )
        print(
            f"{case.size:>5}B  {case.name:<13} {seconds:>8.2f} {case.messages / seconds:>11,.0f} "
            f"{case.body_bytes / seconds / 1e6:>7.1f} {ratio:>9.2f}x "
            f"{min(rs):>5.2f}-{max(rs):<5.2f}{cpu}{verdict}"
        )
    print(f"a streaming query's fixed cost (AvailableNow of 100 messages): {fixed:.2f} s")
    print(f"projection and ceiling 3 col: .schema({PROJECTION!r}); ratio against ceiling 3 col")
    for c in cases:
        if c.name not in ("stream", "local stream") or not c.size:
            continue
        body = "1 KiB" if c.size == 1024 else f"{c.size} B"
        if min(c.seconds) <= fixed:
            print(f"  {body} {c.name} without it: n/a (the query took less than the fixed cost)")
            continue
        rs = ratios(c, ceiling_of(c, cases), fixed)
        ratio = statistics.median(rs)
        target = None if quick else STREAM_TARGETS.get(c.name)
        verdict = (
            "" if target is None else f"  >= {target}: {'met' if ratio >= target else 'MISSED'}"
        )
        print(f"  {body} {c.name} without it: {ratio:.2f}x ({min(rs):.2f}-{max(rs):.2f}){verdict}")
    if quick:
        print("--quick: every case ran once on little data; these figures are not measurements")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


def ceiling_of(case: Case, cases: list[Case]) -> Case:
    """The ceiling ``case`` is measured against: the in-memory source of the same body size,
    yielding the same columns."""
    name = CEILING_OF.get(case.name, "ceiling")
    return next(c for c in cases if c.name == name and c.size == case.size)


def draw_chart(cases: list[Case], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {
        "ceiling": "ceiling (in-memory source)",
        "batch": "batch read",
        "stream": "AvailableNow",
        "offline": "storePath batch",
        "ceiling 3 col": "ceiling, 3 columns",
        "projection": "3-column batch",
    }
    names["local batch"] = "short-circuit batch"
    names["local stream"] = "short-circuit AvailableNow"
    colours = {
        "ceiling": "#9e9e9e",
        "batch": "#1f77b4",
        "stream": "#ff7f0e",
        "local batch": "#17becf",
        "local stream": "#bcbd22",
        "offline": "#2ca02c",
        "ceiling 3 col": "#cfcfcf",
        "projection": "#9467bd",
    }
    every = cases
    cases = [c for c in cases if c.size]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, (size, _) in zip(axes, SIZES, strict=True):
        group = [c for c in cases if c.size == size]
        mbs = [statistics.median(c.mb_per_s(i) for i in range(len(c.seconds))) for c in group]
        bars = ax.bar([names[c.name] for c in group], mbs, color=[colours[c.name] for c in group])
        for bar, case in zip(bars, group, strict=True):
            ratio = statistics.median(ratios(case, ceiling_of(case, every)))
            ax.annotate(
                f"{ratio:.2f}x",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        ax.set_title(f"{'1 KiB' if size == 1024 else f'{size} B'} bodies")
        ax.set_ylabel("MB/s of bodies (median of rounds)")
        ax.tick_params(axis="x", labelsize=7, labelrotation=25)
        ax.margins(y=0.15)
    fig.suptitle("Spark read throughput vs the ceiling of a Python source (local[2], 2 cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
