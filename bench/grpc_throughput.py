"""Produce and pull throughput through gRPC to one broker process, against the store alone.

The broker runs as a subprocess (``python -m rmq_spark.broker``, flush ASYNC, default
settings) so that the client and the broker do not share a GIL; both run on this machine
and talk over loopback.

Produce: 100-byte bodies, tag ``TagA``, batches of 1, 256 and 1024 messages, sent with
``Producer.send_batch`` (round robin over 8 queues), by

* 1 producer (the bench's own thread);
* 8 producers as 8 threads of one process (one ``Producer`` each);
* 8 producers as 8 processes (one ``Producer`` each, ``multiprocessing`` spawn).

Pull: N messages (1,000,000; ``--quick`` 40,000) of 100 bytes stored in 8 queues, read
to Arrow record batches over loopback by

* ``PullConsumer.pull`` of one queue after the other, ``--pull-batch`` messages a call;
* ``PullConsumer.poll``: the 8 queues pulled in parallel, same batch size.

For each gRPC pull case it also prints the CPU seconds per million messages pulled of the
server process (the broker, or the echo server of the gRPC floor: utime + stime from
/proc, around each timed pass) and of this process (the client): CPU time moves less with
neighbours than msgs/s does.

Baselines, timed in rounds interleaved with the gRPC cases (alternating order), since
neighbours on a shared machine make figures drift:

* ``store``: the store in this process without gRPC. Produce: ``MessageStore.append`` of
  the same batches (bodies, TAGS + UNIQ_KEY properties as the broker writes them), one
  thread. Pull: ``get_messages`` + ``decode_records`` of an identical store (filled the
  same way; the broker's store is filled before it starts). ``vs store`` is the median of
  per-round ratios of the case to this figure.
* ``gRPC floor``: a Python gRPC server in another process (same thread pool size and
  message limits as the broker) that answers each call with a reply of the size the broker
  sends, doing no work: the same request bytes and reply sizes as the real calls. It bounds
  what any servicer written in Python gRPC can reach here, one call at a time.

Figures are the best round; ``spread`` is (best - worst) / best over the rounds. Produce
rounds are ``--round-seconds`` long; a pull round is one pass over the N messages. For
each ``send_batch`` case the broker's CPU time (utime + stime from ``/proc/<pid>/stat``,
read around each of its rounds, warm-up included) per million messages it accepted is
printed too: how much work a message costs the broker, which the shared CPUs move less
than the rates.

``--profile`` then samples, with py-spy ``--gil`` (only the thread holding the GIL, so
samples / (rate x time) is the share of time the process held its GIL, which includes time
it waited for a CPU), the client and the broker during the batched produce path (1
producer, then 8 processes) and the pull path, and prints each one's hot spots: self time
by function, library code charged to the nearest ``rmq_spark`` caller.

Run: ``.venv/bin/python bench/grpc_throughput.py [--quick] [--profile] [--count N]
[--pull-batch B]``; about 20 s with ``--quick``, under 2 minutes without.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import multiprocessing
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from _common import (
    CpuMeter,
    RateResult,
    RoundFn,
    ServerProcess,
    Table,
    Timing,
    add_timing_args,
    append_spread,
    broker_process,
    fmt_int,
    fmt_mb,
    fmt_ratio,
    looped,
    measure_rates,
    paired_ratio,
    process_cpu_seconds,
    stored_properties,
    timing_from_args,
)

from rmq_spark.client import ClientConfig, Connection, ConsumerConfig, Producer, PullConsumer
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

DEFAULT_TIMING = Timing(warmup_s=0.5, round_s=1.0, rounds=3)
QUICK_TIMING = Timing(warmup_s=0.1, round_s=0.25, rounds=2, quick=True)

PRODUCE_TOPIC = "BenchProduce"
PULL_TOPIC = "BenchPull"
QUEUES = 8
BODY_BYTES = 100
TAG = "TagA"
BATCHES = (1, 256, 1024)
PRODUCERS = 8
#: distinct messages per batch size; batches are consecutive slices, reused in turn
POOL_MESSAGES = 4096
DEFAULT_COUNT = 1_000_000
QUICK_COUNT = 40_000
DEFAULT_PULL_BATCH = 16_384
#: bytes a pull may return: high enough that --pull-batch messages always fit
PULL_MAX_BYTES = 32 << 20
FILL_BATCH = 1024

TARGET_PRODUCE = 300_000  # batched produce, msgs/s
TARGET_PULL = 2_000_000  # pull to Arrow, msgs/s

ECHO_METHOD = "/bench.Echo/Call"


# -- workload ----------------------------------------------------------------------------


def make_bodies(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(BODY_BYTES) for _ in range(count)]


def batches_of(bodies: list[bytes], size: int) -> list[list[bytes]]:
    usable = max(size, len(bodies) - len(bodies) % size)
    return [bodies[i : i + size] for i in range(0, usable, size)]


def fill_pull_store(directory: Path, count: int, seed: int) -> None:
    """A closed store with both topics; ``count`` messages spread over the pull topic's
    queues (queue i gets batches i, i + QUEUES, ...)."""
    bodies = make_bodies(POOL_MESSAGES, seed)
    with MessageStore.open(StoreConfig(directory)) as store:
        store.topics.create(PULL_TOPIC, queues=QUEUES)
        store.topics.create(PRODUCE_TOPIC, queues=QUEUES)
        append_spread(store, PULL_TOPIC, QUEUES, count, bodies, TAG, FILL_BATCH)


# -- processes: broker, gRPC floor server --------------------------------------------------


def echo_server(log_path: Path) -> ServerProcess:
    return ServerProcess("gRPC floor server", [sys.executable, __file__, "--serve-echo"], log_path)


def serve_echo() -> int:
    """The gRPC floor: a request is 8 bytes of reply size then any payload; the reply is
    that many zero bytes. Thread pool and limits as the broker's defaults."""

    def call(request: bytes, _context) -> bytes:
        return bytes(int.from_bytes(request[:8], "big"))

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(64),
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    # The handler only notes the signal (setting an Event there could wait on a lock the
    # main thread holds); the main thread sleeps in slices so it runs the handler even when
    # the kernel hands the signal to another thread.
    signals: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: signals.append(signum))
    print(f"echo listening on 127.0.0.1:{port}", flush=True)
    while not signals:
        time.sleep(0.1)
    server.stop(0.5).wait()
    return 0


class EchoClient:
    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint, options=ClientConfig().channel_options())
        self.call = self.channel.unary_unary(ECHO_METHOD)

    def payload(self, reply_bytes: int, request: bytes) -> bytes:
        return reply_bytes.to_bytes(8, "big") + request

    def close(self) -> None:
        self.channel.close()


# -- produce contenders --------------------------------------------------------------------


def send_items(batch: list[bytes]) -> list[tuple[bytes, str]]:
    """What an application hands ``send_batch``: (body, tag) pairs."""
    return [(body, TAG) for body in batch]


def store_appender(store: MessageStore, batches: list[list[bytes]]) -> RoundFn:
    props = [stored_properties(TAG, len(b), i * len(b)) for i, b in enumerate(batches)]
    work = itertools.cycle(list(zip(batches, props, strict=True)))
    queue = itertools.cycle(range(QUEUES))
    tags = [TAG] * len(batches[0])

    def step() -> int:
        bodies, properties = next(work)
        store.append(PRODUCE_TOPIC, next(queue), bodies, properties, tags=tags)
        return len(bodies)

    return looped(step)


def producer_sender(producer: Producer, batches: list[list[bytes]]) -> RoundFn:
    work = itertools.cycle([send_items(b) for b in batches])

    def step() -> int:
        return len(producer.send_batch(PRODUCE_TOPIC, next(work)))

    return looped(step)


@contextlib.contextmanager
def captured_calls():
    """Record (request, response) of every client RPC while inside: ``Connection.call`` is
    the client's single call path, so this sees exactly what the producer or consumer sent,
    whatever form (Message protos or columns) it chose."""
    calls: list[tuple[Any, Any]] = []
    original = Connection.call

    def call(self, method, request, **kwargs):
        response = original(self, method, request, **kwargs)
        calls.append((request, response))
        return response

    Connection.call = call  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        Connection.call = original  # type: ignore[method-assign]


def of_type(calls: list[tuple[Any, Any]], kind: type) -> list[tuple[Any, Any]]:
    return [(request, answer) for request, answer in calls if isinstance(request, kind)]


def produce_floor(echo: EchoClient, producer: Producer, batch: list[bytes]) -> RoundFn:
    """Echo calls carrying the request ``send_batch`` makes of this batch, answered with a
    reply of the size of the broker's answer to it."""
    with captured_calls() as calls:
        producer.send_batch(PRODUCE_TOPIC, send_items(batch))
    ((request, response),) = of_type(calls, messaging_pb2.SendMessagesRequest)
    payload = echo.payload(response.ByteSize(), request.SerializeToString())
    call = echo.call

    def step() -> int:
        call(payload, timeout=10)
        return len(batch)

    return looped(step)


class BrokerCpu:
    """The broker's CPU time over the rounds of one contender, and the messages they sent."""

    def __init__(self, pid: int, run: RoundFn) -> None:
        self.pid = pid
        self._run = run
        self.seconds = 0.0
        self.units = 0

    def run(self, seconds: float) -> tuple[int, int, float]:
        before = process_cpu_seconds(self.pid)
        calls, units, elapsed = self._run(seconds)
        self.seconds += process_cpu_seconds(self.pid) - before
        self.units += units
        return calls, units, elapsed

    def per_million(self) -> str:
        return f"{self.seconds / self.units * 1e6:.2f}" if self.units else "-"


class ThreadedProducers:
    """``count`` Producers, one thread each, sending for the round's time."""

    def __init__(self, endpoint: str, batches: list[list[bytes]], count: int) -> None:
        self.producers = [Producer(endpoint) for _ in range(count)]
        self.work = [send_items(b) for b in batches]

    def run(self, seconds: float) -> tuple[int, int, float]:
        stop = threading.Event()
        calls = [0] * len(self.producers)
        units = [0] * len(self.producers)
        errors: list[BaseException] = []

        def worker(lane: int, producer: Producer) -> None:
            work = itertools.cycle(self.work[lane:] + self.work[:lane])
            try:
                while not stop.is_set():
                    units[lane] += len(producer.send_batch(PRODUCE_TOPIC, next(work)))
                    calls[lane] += 1
            except BaseException as exc:
                errors.append(exc)

        pool = [threading.Thread(target=worker, args=(i, p)) for i, p in enumerate(self.producers)]
        begin = time.perf_counter()
        for t in pool:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - begin
        if errors:
            raise errors[0]
        return sum(calls), sum(units), elapsed

    def close(self) -> None:
        for p in self.producers:
            p.close()


def _producer_process(seed: int, conn) -> None:
    """A producer process: gets the endpoint, answers "ready", then runs rounds:
    ``(batch size, seconds)`` -> ``(calls, units, elapsed)``; None ends it."""
    bodies = make_bodies(POOL_MESSAGES, seed)
    work = {size: [send_items(b) for b in batches_of(bodies, size)] for size in BATCHES}
    endpoint = conn.recv()
    with Producer(endpoint) as producer:
        for size in BATCHES:  # connect and warm the route before the first round
            producer.send_batch(PRODUCE_TOPIC, work[size][0])
        conn.send("ready")
        while (command := conn.recv()) is not None:
            size, seconds = command
            cycle = itertools.cycle(work[size])
            calls = units = 0
            begin = time.perf_counter()
            while (elapsed := time.perf_counter() - begin) < seconds:
                units += len(producer.send_batch(PRODUCE_TOPIC, next(cycle)))
                calls += 1
            conn.send((calls, units, elapsed))


class ProcessProducers:
    """``count`` producer processes, each with its own Producer (and GIL). They start (and
    import) at once; :meth:`connect` hands them the broker's endpoint."""

    def __init__(self, count: int, seed: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with gRPC threads
        self.conns = []
        self.processes = []
        for i in range(count):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_producer_process, args=(seed + i, child), daemon=True)
            process.start()
            self.conns.append(parent)
            self.processes.append(process)

    def connect(self, endpoint: str) -> None:
        for conn in self.conns:
            conn.send(endpoint)
        for conn in self.conns:
            if not conn.poll(60) or conn.recv() != "ready":
                raise SystemExit("a producer process did not start")

    def runner(self, batch: int) -> RoundFn:
        def run(seconds: float) -> tuple[int, int, float]:
            for conn in self.conns:
                conn.send((batch, seconds))
            answers = [conn.recv() for conn in self.conns]
            return (
                sum(a[0] for a in answers),
                sum(a[1] for a in answers),
                max(a[2] for a in answers),
            )

        return run

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()


# -- pull contenders -----------------------------------------------------------------------


def store_puller(store: MessageStore, count: int, batch: int) -> Callable[[], int]:
    """One pass over the pull topic: get_messages + decode_records, queue after queue."""

    def one_pass() -> int:
        rows = 0
        for queue in range(QUEUES):
            offset, end = 0, store.max_offset(PULL_TOPIC, queue)
            while offset < end:
                got = store.get_messages(PULL_TOPIC, queue, offset, batch, PULL_MAX_BYTES)
                rows += decode_records(got.data, sizes=got.sizes).num_rows
                offset = got.next_begin_offset
        return check_rows(rows, count)

    return one_pass


def consumer_puller(consumer: PullConsumer, count: int) -> Callable[[], int]:
    queues = consumer.assignment()

    def one_pass() -> int:
        rows = 0
        for mq in queues:
            consumer.seek(mq, 0)
            while True:
                result = consumer.pull(mq)
                rows += result.batch.num_rows
                if result.next_begin_offset >= result.max_offset:
                    break
        return check_rows(rows, count)

    return one_pass


def consumer_poller(consumer: PullConsumer, count: int) -> Callable[[], int]:
    queues = consumer.assignment()

    def one_pass() -> int:
        for mq in queues:
            consumer.seek(mq, 0)
        rows = empty = 0
        while rows < count and empty < 100:
            got = sum(r.batch.num_rows for r in consumer.poll())
            rows += got
            empty = 0 if got else empty + 1
        return check_rows(rows, count)

    return one_pass


def pull_floor(echo: EchoClient, consumer: PullConsumer, count: int) -> Callable[[], int]:
    """Echo calls as many and as big as one pass of ``consumer_puller``: its requests, and
    replies of the size of the broker's answers."""
    queues = consumer.assignment()
    with captured_calls() as calls:
        consumer_puller(consumer, count)()
    for mq in queues:
        consumer.seek(mq, 0)
    pulls = of_type(calls, messaging_pb2.PullMessagesRequest)
    payloads = [echo.payload(answer.ByteSize(), req.SerializeToString()) for req, answer in pulls]
    call = echo.call

    def one_pass() -> int:
        for payload in payloads:
            call(payload, timeout=30)
        return count

    return one_pass


def check_rows(rows: int, count: int) -> int:
    if rows != count:
        raise SystemExit(f"a pull pass read {rows:,} messages, expected {count:,}")
    return rows


# -- profiling -----------------------------------------------------------------------------


def spy(pid: int, seconds: float, out: Path) -> subprocess.Popen:
    """py-spy of a process: only samples of the thread holding the GIL, by function."""
    spy_bin = Path(sys.executable).with_name("py-spy")
    argv = [str(spy_bin), "record", "--pid", str(pid), "--duration", f"{max(1, round(seconds))}"]
    argv += ["--rate", "250", "--gil", "--nolineno", "--nonblocking", "--format", "raw"]
    return subprocess.Popen(
        [*argv, "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def spy_hotspots(path: Path, seconds: float, top: int) -> tuple[float, list[tuple[float, str]]]:
    """(share of wall time the process held the GIL, [(share of samples, function)])."""
    own: collections.Counter[str] = collections.Counter()
    total = 0
    if not path.exists():
        return 0.0, []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        leaf = frames[-1]
        # attribute time in library code to the first rmq_spark frame above it
        caller = next((f for f in reversed(frames) if "rmq_spark" in f), "")
        label = short(leaf) + (f"  <- {short(caller)}" if caller and caller != leaf else "")
        own[label] += int(count)
        total += int(count)
    held = total / (250 * max(1, round(seconds)))
    spots = [(n / total, label) for label, n in own.most_common(top)]
    return held, spots


def short(frame: str) -> str:
    """``func (path/to/module.py)`` -> ``func (module.py)``."""
    match = re.fullmatch(r"(.*) \((.*)\)", frame)
    if not match:
        return frame
    return f"{match[1]} ({Path(match[2]).name})"


def print_hotspots(title: str, spots: list[tuple[float, str]]) -> None:
    print(title, flush=True)
    table = Table([("share", ">"), ("function (self time; <- the rmq_spark caller)", "<")])
    for share, where in spots:
        table.add(f"{share:.1%}", where)
    table.print()
    print()


def profile_run(
    label: str,
    run: Callable[[float], object],
    pids: dict[str, int],
    seconds: float,
    workdir: Path,
    top: int = 12,
) -> None:
    """Run ``run`` for about ``seconds`` while py-spy samples each of ``pids``."""
    outs = {name: workdir / re.sub(r"\W+", "-", f"spy {label} {name}.txt") for name in pids}
    spies = [spy(pid, seconds, outs[name]) for name, pid in pids.items()]
    time.sleep(0.3)  # py-spy attaches
    run(seconds + 0.5)  # keeps the load on for the whole sampling window
    for process in spies:
        process.wait()
    for name in pids:
        held, spots = spy_hotspots(outs[name], seconds, top)
        print_hotspots(
            f"{label}: {name}, GIL held {held:.0%} of the time (py-spy --gil samples)",
            spots,
        )


# -- driver --------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of a results table: ``rate`` and its ratio to ``store``."""

    case: str
    who: str
    batch: int
    rate: RateResult
    store: RateResult
    extra: str  # calls/s (produce) or MB/s (pull)
    target: int | None = None

    def cells(self) -> list[str]:
        target = ""
        if self.target is not None:
            verdict = "met" if self.rate.best >= self.target else "MISSED"
            target = f">= {fmt_int(self.target)}: {verdict} ({self.rate.best / self.target:.0%})"
        if self.rate is self.store:
            ratio = "1.00x"
        else:
            ratio = fmt_ratio(paired_ratio(self.rate, self.store))
        return [
            self.case,
            self.who,
            str(self.batch),
            fmt_int(self.rate.best),
            self.extra,
            ratio,
            f"{self.rate.spread:.0%}",
            target,
        ]


def print_rows(rows: list[Row], who: str, extra: str, rule_every: int = 0) -> None:
    table = Table(
        [
            ("case", "<"),
            (who, "<"),
            ("batch", ">"),
            ("msgs/s", ">"),
            (extra, ">"),
            ("vs store", ">"),
            ("spread", ">"),
            ("target", "<"),
        ]
    )
    for i, row in enumerate(rows):
        if rule_every and i and i % rule_every == 0:
            table.rule()
        table.add(*row.cells())
    table.print()


def calls_per_s(rate: RateResult) -> str:
    return fmt_int(rate.best * rate.calls / rate.units) if rate.units else "-"


def measure_produce(
    local: MessageStore,
    broker: ServerProcess,
    echo: EchoClient,
    producer: Producer,
    processes: ProcessProducers,
    bodies: list[bytes],
    timing: Timing,
    closers: list[Callable[[], object]],
) -> list[Row]:
    rows: list[Row] = []
    cpu_rows: list[tuple[str, int, BrokerCpu]] = []
    many = f"{PRODUCERS} threads", f"{PRODUCERS} processes"
    for size in BATCHES:
        batches = batches_of(bodies, size)
        threaded = ThreadedProducers(broker.endpoint, batches, PRODUCERS)
        closers.append(threaded.close)
        senders = [
            BrokerCpu(broker.pid, run)
            for run in (producer_sender(producer, batches), threaded.run, processes.runner(size))
        ]
        contenders = [
            store_appender(local, batches),
            produce_floor(echo, producer, batches[0]),
            *(sender.run for sender in senders),
        ]
        store, floor, one, threads, procs = measure_rates(contenders, timing)
        target = TARGET_PRODUCE if size > 1 else None
        rows += [
            Row("store.append", "1 thread", size, store, store, calls_per_s(store)),
            Row("gRPC floor (echo)", "1 thread", size, floor, store, calls_per_s(floor)),
            Row("send_batch", "1", size, one, store, calls_per_s(one), target),
            Row("send_batch", many[0], size, threads, store, calls_per_s(threads), target),
            Row("send_batch", many[1], size, procs, store, calls_per_s(procs), target),
        ]
        cpu_rows += [(who, size, cpu) for who, cpu in zip(("1", *many), senders, strict=True)]
    print_rows(rows, "producers", "calls/s", rule_every=5)
    table = Table([("send_batch", "<"), ("batch", ">"), ("broker CPU-s / M msgs", ">")])
    for who, size, cpu in cpu_rows:
        table.add(who, size, cpu.per_million())
    print("\nbroker CPU-seconds (utime + stime) per million messages accepted", flush=True)
    table.print()
    return rows


def measure_pull(
    local: MessageStore,
    broker_pid: int,
    endpoint: str,
    echo: EchoClient,
    echo_pid: int,
    count: int,
    batch: int,
    rounds: int,
) -> tuple[list[Row], list[PullConsumer]]:
    config = ConsumerConfig(pull_batch_size=batch, pull_max_bytes=PULL_MAX_BYTES)
    consumers = [PullConsumer(endpoint, config=config) for _ in range(2)]
    for consumer in consumers:
        consumer.assign(consumer.queues(PULL_TOPIC))
    with captured_calls() as calls:
        consumer_puller(consumers[0], count)()
    pulls = of_type(calls, messaging_pb2.PullMessagesRequest)
    record_bytes = sum(len(answer.records) for _, answer in pulls) / count
    timing = Timing(warmup_s=0.0, round_s=1e-9, rounds=rounds)  # a round is one pass
    meters = [CpuMeter(echo_pid), CpuMeter(broker_pid), CpuMeter(broker_pid)]
    contenders = [
        looped(store_puller(local, count, batch)),
        meters[0].wrap(looped(pull_floor(echo, consumers[0], count))),
        meters[1].wrap(looped(consumer_puller(consumers[0], count))),
        meters[2].wrap(looped(consumer_poller(consumers[1], count))),
    ]

    def after_warmup() -> None:
        for meter in meters:
            meter.reset()

    store, floor, pulled, polled = measure_rates(contenders, timing, after_warmup=after_warmup)

    def mb_s(rate: RateResult) -> str:
        return fmt_mb(rate.best * record_bytes)

    rows = [
        Row("get_messages + decode", "1 thread", batch, store, store, mb_s(store)),
        Row("gRPC floor (echo)", "1 thread", batch, floor, store, mb_s(floor)),
        Row("PullConsumer.pull", "1", batch, pulled, store, mb_s(pulled), TARGET_PULL),
        Row("PullConsumer.poll", "1, 8 queues", batch, polled, store, mb_s(polled), TARGET_PULL),
    ]
    print(
        f"\npull of {fmt_int(count)} messages ({record_bytes:.0f}-byte records) to Arrow, "
        f"{fmt_int(batch)} a call; msgs/s of the best of {rounds} passes after a warm-up pass; "
        "MB/s of records",
        flush=True,
    )
    print_rows(rows, "consumer", "MB/s")
    print_pull_cpu(
        [("gRPC floor (echo)", "echo server"), ("PullConsumer.pull", "broker"),
         ("PullConsumer.poll", "broker")],
        meters,
    )  # fmt: skip
    return rows, consumers


def print_pull_cpu(cases: list[tuple[str, str]], meters: list[CpuMeter]) -> None:
    """CPU seconds per million messages pulled in the timed passes, from /proc (utime +
    stime of the server process; process_time of this one, which only runs the client)."""
    print("\nCPU seconds per million messages pulled (timed passes; /proc utime + stime)")
    table = Table(
        [("case", "<"), ("server", "<"), ("server CPU s/M", ">"), ("client CPU s/M", ">")]
    )
    for (case, server), meter in zip(cases, meters, strict=True):
        server_s, client_s = meter.per_million()
        table.add(case, server, f"{server_s:.3f}", f"{client_s:.3f}")
    table.print()


def print_summary(produce: list[Row], pull: list[Row]) -> None:
    best_produce = max(r.rate.best for r in produce if r.target)
    best_pull = max(r.rate.best for r in pull if r.target)
    by = {r.who: r.rate.best for r in produce if r.target}  # the batched rows
    one = by["1"]

    def verdict(best: float, target: int) -> str:
        met = "met" if best >= target else "MISSED"
        return f"{met} (best {fmt_int(best)}, {best / target:.0%})"

    print(
        f"\ntargets: batched produce >= {fmt_int(TARGET_PRODUCE)} msgs/s: "
        f"{verdict(best_produce, TARGET_PRODUCE)}; pull >= {fmt_int(TARGET_PULL)} msgs/s: "
        f"{verdict(best_pull, TARGET_PULL)}\n"
        f"{PRODUCERS} producers, batch {BATCHES[-1]}: as threads "
        f"{fmt_ratio(by[f'{PRODUCERS} threads'] / one)} of 1 producer, as processes "
        f"{fmt_ratio(by[f'{PRODUCERS} processes'] / one)} (threads share one GIL, processes "
        f"do not; all share {os.cpu_count()} CPUs with the broker)",
        flush=True,
    )


def run_profiles(
    broker: ServerProcess,
    producer: Producer,
    processes: ProcessProducers,
    consumer: PullConsumer,
    bodies: list[bytes],
    count: int,
    seconds: float,
    work: Path,
) -> None:
    print(f"\nprofiles: py-spy --gil, {seconds:g} s each\n", flush=True)
    size = BATCHES[-1]
    here = {"client": os.getpid(), "broker": broker.pid}
    profile_run(
        f"produce, 1 producer, batch {size}",
        producer_sender(producer, batches_of(bodies, size)),
        here,
        seconds,
        work,
    )
    profile_run(
        f"produce, {PRODUCERS} processes, batch {size}",
        processes.runner(size),
        {f"producer process 1 of {PRODUCERS}": processes.processes[0].pid, "broker": broker.pid},
        seconds,
        work,
    )
    profile_run(
        f"pull, PullConsumer.pull, {consumer.config.pull_batch_size} a call",
        looped(consumer_puller(consumer, count)),
        here,
        seconds,
        work,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_timing_args(parser, default=DEFAULT_TIMING, quick=QUICK_TIMING)
    parser.add_argument("--count", type=int, help="messages to pull (1,000,000; quick 40,000)")
    parser.add_argument(
        "--pull-batch", type=int, default=DEFAULT_PULL_BATCH, help="messages per pull (%(default)s)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy client and broker too")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to create the temporary stores (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated bodies")
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo:
        return serve_echo()
    timing = timing_from_args(args, default=DEFAULT_TIMING, quick=QUICK_TIMING)
    count = args.count or (QUICK_COUNT if timing.quick else DEFAULT_COUNT)
    if count < QUEUES or args.pull_batch < 1:
        raise SystemExit(f"--count must be >= {QUEUES} and --pull-batch >= 1")

    started = time.perf_counter()
    load = os.getloadavg()[0]
    busy = " - the machine is busy, figures will be low and noisy" if load > 0.5 else ""
    print(
        f"gRPC throughput: Python {platform.python_version()}, grpcio {grpc.__version__}, "
        f"{os.cpu_count()} CPUs, load average {load:.2f}{busy}\n"
        f"timing: {timing.describe()}; rounds of every case interleaved with the store and "
        "the gRPC floor\n"
        f"broker: subprocess, flush ASYNC, loopback; {BODY_BYTES}-byte bodies, tag {TAG}, "
        f"{QUEUES} queues. vs store: median of per-round ratios; spread: (best - worst) / "
        "best round",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="rmq-grpc-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        begin = time.perf_counter()
        processes = ProcessProducers(PRODUCERS, args.seed + 100)  # imports while we fill
        for name in ("local", "broker"):
            fill_pull_store(work / name, count, args.seed)
        fill_s = time.perf_counter() - begin
        broker = broker_process(work / "broker", work / "broker.log").start()
        echo = echo_server(work / "echo.log").start()
        local = MessageStore.open(StoreConfig(work / "local"))
        echo_client = EchoClient(echo.endpoint)
        closers: list[Callable[[], object]] = [processes.close]
        try:
            producer = Producer(broker.endpoint)
            closers.append(producer.close)
            processes.connect(broker.endpoint)
            print(
                f"setup: {fmt_int(count)} messages stored twice in {fill_s:.1f} s; "
                f"{PRODUCERS} producer processes ready after {time.perf_counter() - begin:.1f} s\n"
                "\nproduce: msgs/s of the best round; calls/s: RPCs (appends) a second",
                flush=True,
            )
            bodies = make_bodies(POOL_MESSAGES, args.seed)
            produce = measure_produce(
                local, broker, echo_client, producer, processes, bodies, timing, closers
            )
            pull, consumers = measure_pull(
                local,
                broker.pid,
                broker.endpoint,
                echo_client,
                echo.pid,
                count,
                args.pull_batch,
                timing.rounds + 1,
            )
            closers += [c.close for c in consumers]
            print_summary(produce, pull)
            if args.profile:
                seconds = 2.0 if timing.quick else 4.0
                run_profiles(
                    broker, producer, processes, consumers[0], bodies, count, seconds, work
                )
        finally:
            for close in reversed(closers):
                close()
            echo_client.close()
            local.close()
            echo.stop()
            broker.stop()
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
