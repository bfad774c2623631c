"""Push consumer throughput through gRPC to one broker process, against the raw pull consumer.

The broker runs as a subprocess (``python -m rmq_spark.broker``, flush ASYNC, default
settings) so that the client and the broker do not share a GIL; both run on this machine
and talk over loopback. Its store is filled before it starts: N messages (500,000;
``--quick`` 50,000) of 100 bytes, tag ``TagA``, spread over the 8 queues of one topic.

Each case reads all N messages from the beginning with a fresh consumer group:

* ``PushConsumer``, a listener that returns CONSUME_SUCCESS and does nothing else, with
  ``consume_message_batch_max_size`` 1 (the default) and 32; ``consume_from=FIRST_OFFSET``.
  Timed from ``start()`` (group join, rebalance, queue leases included) until the listener
  has been handed the N-th message; the shutdown after it is not timed.
* ``PullConsumer``: the 8 queues assigned, ``seek_to_beginning``, then ``poll()`` until N
  messages came back as Arrow record batches (no per-message Python objects). This is what
  the push consumer is built on, so ``vs pull`` is the cost of the push machinery
  (per-message objects, process queues, the listener pool, offset bookkeeping).

Both pull ``--pull-batch`` messages (256, the push consumer's default; RocketMQ's is 32)
per queue and call. A round is one pass over the N messages; the cases run in interleaved
rounds (alternating order) after one untimed warm-up pass each over a tenth of them (fresh
group too), since neighbours on a shared machine make figures drift.

Columns: ``msgs/s`` is the median over rounds (``best`` the best round), ``spread`` is
(best - worst) / best; ``vs pull`` is the median over rounds of the case's rate against the
pull pass of the same round, with the lowest and highest of those ratios in brackets.
``setup`` is the median time from the start of a pass to the first message (for the push
consumer: joining the group, the rebalance, taking the queue leases, finding the start
offsets; for the pull consumer: the route and the seek), and ``vs pull, no setup`` the same
ratio over the time after it. ``client CPU`` and ``broker CPU`` are the CPU time of this
process and of the broker process over the pass, per message (median over rounds): less
moved by neighbours than wall-clock rates.

Run: ``.venv/bin/python bench/push_throughput.py [--quick] [--count N] [--pull-batch B]``;
about 15 seconds with ``--quick``, 2-3 minutes without (2 CPUs).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from _common import (
    RateResult,
    RoundFn,
    Table,
    Timing,
    add_timing_args,
    append_spread,
    broker_process,
    fmt_int,
    fmt_ratio,
    measure_rates,
    paired_ratio,
    timing_from_args,
)

from rmq_spark.client import ConsumerConfig, PullConsumer
from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore

#: a round is one pass over the N messages, whatever its length; one warm-up pass per case
DEFAULT_TIMING = Timing(warmup_s=0.0, round_s=1e-9, rounds=5)
QUICK_TIMING = Timing(warmup_s=0.0, round_s=1e-9, rounds=3, quick=True)

TOPIC = "BenchPush"
QUEUES = 8
BODY_BYTES = 100
TAG = "TagA"
DEFAULT_COUNT = 500_000
QUICK_COUNT = 50_000
PUSH_BATCHES = (1, 32)
DEFAULT_PULL_BATCH = 256
POOL_MESSAGES = 4096
FILL_BATCH = 1024
#: a pass that has not finished after this long is reported as stuck
PASS_TIMEOUT_S = 600
#: the untimed warm-up pass of each case reads this fraction (1/n) of the messages
WARMUP_DIVISOR = 10

_groups = itertools.count(1)


def fresh_group(kind: str) -> str:
    return f"bench-{kind}-{os.getpid()}-{next(_groups)}"


# -- the broker ----------------------------------------------------------------------------


def fill_store(directory: Path, count: int, seed: int) -> None:
    """A closed store holding ``count`` messages in the topic's queues, as the broker
    writes messages sent with a tag (TAGS and UNIQ_KEY properties); queue i gets batches
    i, i + QUEUES, ..."""
    rng = random.Random(seed)
    bodies = [rng.randbytes(BODY_BYTES) for _ in range(POOL_MESSAGES)]
    with MessageStore.open(StoreConfig(directory)) as store:
        store.topics.create(TOPIC, queues=QUEUES)
        append_spread(store, TOPIC, QUEUES, count, bodies, TAG, FILL_BATCH)


# -- contenders: one pass over the N messages each -----------------------------------------


@dataclass
class Passes:
    """What the passes of one case measured besides their rate: seconds to the first
    message, and CPU seconds of this process and of the broker (one entry per pass)."""

    setup_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    broker_cpu_s: list[float] = field(default_factory=list)

    def add(self, setup_s: float, client_cpu_s: float, broker_cpu_s: float) -> None:
        self.setup_s.append(setup_s)
        self.client_cpu_s.append(client_cpu_s)
        self.broker_cpu_s.append(broker_cpu_s)

    def timed(self) -> Passes:
        """The timed passes (the first one is the warm-up)."""
        return Passes(self.setup_s[1:], self.client_cpu_s[1:], self.broker_cpu_s[1:])


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm_up_first(count: int) -> Callable[[], int]:
    """How many messages the next pass reads: a tenth of them the first time (the warm-up
    pass, not timed), all of them after."""
    calls = itertools.count()
    return lambda: count if next(calls) else max(QUEUES, count // WARMUP_DIVISOR)


def push_pass(
    endpoint: str, count: int, batch: int, pull_batch: int, broker_pid: int, passes: Passes
) -> RoundFn:
    """A fresh PushConsumer group reading the N messages with a no-op listener."""
    target = warm_up_first(count)

    def run(_seconds: float) -> tuple[int, int, float]:
        want = target()
        lock = threading.Lock()
        done = threading.Event()
        seen = 0
        first_at = finished_at = finished_cpu = 0.0

        def listener(messages, _context) -> ConsumeStatus:
            nonlocal seen, first_at, finished_at, finished_cpu
            with lock:
                if not seen:
                    first_at = time.perf_counter()
                seen += len(messages)
                if seen >= want and not done.is_set():
                    finished_at = time.perf_counter()
                    finished_cpu = time.process_time()
                    done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        config = PushConsumerConfig(
            consume_from="FIRST_OFFSET",
            consume_message_batch_max_size=batch,
            pull_batch_size=pull_batch,
        )
        consumer = PushConsumer(fresh_group(f"push{batch}"), endpoint, config=config)
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        broker_cpu = process_cpu_s(broker_pid)
        cpu = time.process_time()
        begin = time.perf_counter()
        consumer.start()
        try:
            if not done.wait(PASS_TIMEOUT_S):
                raise SystemExit(
                    f"push pass (batch {batch}) stuck at {seen:,} of {want:,} messages; "
                    f"stats {consumer.stats()}"
                )
            broker_cpu = process_cpu_s(broker_pid) - broker_cpu
        finally:
            consumer.shutdown()
        if want == count and seen != count:
            raise SystemExit(f"push pass (batch {batch}) delivered {seen:,}, expected {count:,}")
        passes.add(first_at - begin, finished_cpu - cpu, broker_cpu)
        return 1, want, finished_at - begin

    return run


def pull_pass(
    endpoint: str, count: int, pull_batch: int, broker_pid: int, passes: Passes
) -> RoundFn:
    """A fresh PullConsumer reading the N messages with poll()."""
    config = ConsumerConfig(pull_batch_size=pull_batch)
    target = warm_up_first(count)

    def run(_seconds: float) -> tuple[int, int, float]:
        want = target()
        broker_cpu = process_cpu_s(broker_pid)
        cpu = time.process_time()
        begin = time.perf_counter()
        first_at = 0.0
        with PullConsumer(endpoint, group=fresh_group("pull"), config=config) as consumer:
            queues = consumer.queues(TOPIC)
            consumer.assign(queues)
            consumer.seek_to_beginning(queues)
            rows = 0
            deadline = time.monotonic() + PASS_TIMEOUT_S
            while rows < want and time.monotonic() < deadline:
                rows += sum(r.batch.num_rows for r in consumer.poll(timeout_ms=1000))
                if rows and not first_at:
                    first_at = time.perf_counter()
            elapsed = time.perf_counter() - begin
            cpu = time.process_time() - cpu
            broker_cpu = process_cpu_s(broker_pid) - broker_cpu
        if want == count and rows != count:
            raise SystemExit(f"pull pass read {rows:,} messages, expected {count:,}")
        passes.add(first_at - begin, cpu, broker_cpu)
        return 1, rows, elapsed

    return run


# -- driver --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_timing_args(parser, default=DEFAULT_TIMING, quick=QUICK_TIMING)
    parser.add_argument("--count", type=int, help="messages to read (500,000; quick 50,000)")
    parser.add_argument(
        "--pull-batch",
        type=int,
        default=DEFAULT_PULL_BATCH,
        help="messages per pull of one queue, every case (%(default)s)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to create the temporary store (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated bodies")
    args = parser.parse_args(argv)
    timing = timing_from_args(args, default=DEFAULT_TIMING, quick=QUICK_TIMING)
    count = args.count or (QUICK_COUNT if timing.quick else DEFAULT_COUNT)
    if count < QUEUES or args.pull_batch < 1:
        raise SystemExit(f"--count must be >= {QUEUES} and --pull-batch >= 1")

    started = time.perf_counter()
    load = os.getloadavg()[0]
    busy = " - the machine is busy, figures will be low and noisy" if load > 0.5 else ""
    print(
        f"push consumer throughput: Python {platform.python_version()}, grpcio "
        f"{grpc.__version__}, {os.cpu_count()} CPUs, load average {load:.2f}{busy}\n"
        f"broker: subprocess, flush ASYNC, loopback; {fmt_int(count)} messages of "
        f"{BODY_BYTES} bytes in {QUEUES} queues; pull batch {args.pull_batch} per queue\n"
        f"timing: {timing.rounds} passes over the {fmt_int(count)} messages per case after a "
        f"warm-up pass over 1/{WARMUP_DIVISOR} of them, cases interleaved; a fresh consumer "
        "group each pass",
        flush=True,
    )
    names = [f"PushConsumer, listener batch {b}" for b in PUSH_BATCHES]
    names.append("PullConsumer.poll (Arrow batches)")
    passes = [Passes() for _ in names]
    with tempfile.TemporaryDirectory(prefix="rmq-push-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        begin = time.perf_counter()
        fill_store(work / "broker", count, args.seed)
        broker = broker_process(work / "broker", work / "broker.log").start()
        print(f"setup: store filled and broker up in {time.perf_counter() - begin:.1f} s\n")
        try:
            contenders = [
                push_pass(broker.endpoint, count, b, args.pull_batch, broker.pid, p)
                for b, p in zip(PUSH_BATCHES, passes, strict=False)
            ]
            contenders.append(
                pull_pass(broker.endpoint, count, args.pull_batch, broker.pid, passes[-1])
            )
            results = measure_rates(contenders, timing)
        finally:
            broker.stop()
    print_table(names, results, [p.timed() for p in passes], count)
    print_summary(results)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


def ratios(a: list[float], b: list[float]) -> str:
    """Median of the paired ratios a/b, with the lowest and highest."""
    paired = [x / y for x, y in zip(a, b, strict=True)]
    low, high = min(paired), max(paired)
    return f"{fmt_ratio(statistics.median(paired))} [{low:.2f}-{high:.2f}]"


def print_table(
    names: list[str], results: list[RateResult], passes: list[Passes], count: int
) -> None:
    pull, pull_passes = results[-1], passes[-1]
    table = Table(
        [
            ("case", "<"),
            ("msgs/s", ">"),
            ("best", ">"),
            ("spread", ">"),
            ("setup s", ">"),
            ("vs pull [range]", ">"),
            ("vs pull, no setup", ">"),
            ("client CPU us/msg", ">"),
            ("broker CPU us/msg", ">"),
        ]
    )
    pull_steady = steady_rates(pull, pull_passes, count)
    for name, rate, measured in zip(names, results, passes, strict=True):
        steady = steady_rates(rate, measured, count)
        table.add(
            name,
            fmt_int(rate.median),
            fmt_int(rate.best),
            f"{rate.spread:.0%}",
            f"{statistics.median(measured.setup_s):.3f}",
            ratios(rate.rates, pull.rates),
            ratios(steady, pull_steady),
            f"{statistics.median(measured.client_cpu_s) / count * 1e6:.1f}",
            f"{statistics.median(measured.broker_cpu_s) / count * 1e6:.1f}",
        )
    table.print()


def steady_rates(rate: RateResult, passes: Passes, count: int) -> list[float]:
    """Each pass's rate over the time after its first message."""
    return [
        count / (count / r - setup) for r, setup in zip(rate.rates, passes.setup_s, strict=True)
    ]


def print_summary(results: list[RateResult]) -> None:
    """The two listener batch sizes against each other."""
    first, last = results[0], results[len(PUSH_BATCHES) - 1]
    print(
        f"\nlistener batch {PUSH_BATCHES[-1]} vs {PUSH_BATCHES[0]}: "
        f"{fmt_ratio(paired_ratio(last, first))} (median of per-round ratios)",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
