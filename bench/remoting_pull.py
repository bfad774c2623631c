"""Reading a pre-filled topic to Arrow over RocketMQ's remoting protocol, against the gRPC
PullConsumer on the same broker and the same data, in one run.

The store is filled before the broker starts (as ``grpc_throughput.py`` fills it): N
messages (2,000,000; ``--quick`` 200,000) of 100-byte bodies, tag ``TagA``, TAGS + UNIQ_KEY
properties, spread over the 4 queues of one topic in batches of 1024. Then the broker runs
as a subprocess (``python -m rmq_spark.broker --remoting-port 0``, flush ASYNC) on loopback,
and both clients read it from this process, one thread, one queue after the other, each
queue from offset 0 to its end: what one Spark task does with its queue ranges.

* ``remoting``: ``RemotingClient.pull(mq, offset, max_messages=B)`` then
  ``answer.records()`` (a rocketlite broker sends the records' sizes, so the decoder need
  not walk the TOTALSIZE chain), with the next pull in flight while this one is decoded, as
  the Spark source's ``nameServer`` reader does it;
* ``gRPC`` (the baseline): ``PullConsumer`` (assign, seek, ``pull(mq, B)``, which decodes to
  Arrow with the record sizes the answer carries), pull batch B, at most 32 MiB a call.

For each pull batch B of ``--pull-batch`` (4096, 16384 and 32768) the two run in interleaved
rounds (alternating order), a round being one pass over the N messages, after one untimed
pass each. It prints each one's median round and min..max in msgs/s and MB/s of records,
the messages a pull actually returned, the ratio remoting/gRPC (median of per-round ratios)
and the CPU seconds per million messages of the broker (/proc utime + stime) and of this
process (the client) over the timed rounds; then the verdict on the target (remoting >=
2,000,000 msgs/s for 100-byte bodies, the best batch's median).

Then an untimed diagnostic of where the remoting time goes, per batch (median of 3 passes;
1 with ``--quick``): the time spent in ``RemotingClient.pull`` against ``decode_records``
(and, measured apart, ``index_records``: the TOTALSIZE walk ``decode_records`` does first),
and the same PULL_MESSAGE requests sent over a plain socket whose answers are read with one
``recv_into`` into a buffer of the frame's size: the time the broker and the kernel take,
with none of the client's copying.

``--profile`` then samples the client and the broker with py-spy ``--gil`` (if it is
installed beside this Python; it is not a dependency) during remoting passes at the largest
batch and prints their hot spots.

Run: ``.venv/bin/python bench/remoting_pull.py [--quick] [--rounds R] [--count N]
[--pull-batch 4096,16384,32768] [--profile]``; about 2 minutes, ``--quick`` about 15 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    CpuMeter,
    RateResult,
    RoundFn,
    ServerProcess,
    Table,
    Timing,
    append_spread,
    broker_process,
    fmt_int,
    fmt_mb,
    fmt_ratio,
    measure_rates,
    paired_ratio,
)

from rmq_spark.client import ConsumerConfig, PullConsumer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.client.remoting.transport import RemotingConnection
from rmq_spark.codec.arrow_decode import index_records
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.remoting.codes import ResponseCode
from rmq_spark.wire.remoting.frame import Command, encode

TOPIC = "BenchRemotingPull"
QUEUES = 4
BODY_BYTES = 100
TAG = "TagA"
FILL_BATCH = 1024
POOL_MESSAGES = 4096  # distinct bodies, reused in turn
DEFAULT_COUNT = 2_000_000
QUICK_COUNT = 400_000
DEFAULT_ROUNDS = 5
QUICK_ROUNDS = 2
DEFAULT_BATCHES = (4096, 16_384, 32_768)
#: what the gRPC consumer may take a call: more than any batch here needs
GRPC_PULL_MAX_BYTES = 32 << 20
DIAG_PASSES = 3
QUICK_DIAG_PASSES = 1
TARGET = 2_000_000  # remoting pull to Arrow, msgs/s, 100-byte bodies


# -- store and broker ------------------------------------------------------------------------


def fill_store(directory: Path, count: int, seed: int) -> None:
    """A closed store holding ``count`` messages in the topic's queues (queue i gets the
    fill batches i, i + QUEUES, ...)."""
    rng = random.Random(seed)
    bodies = [rng.randbytes(BODY_BYTES) for _ in range(POOL_MESSAGES)]
    with MessageStore.open(StoreConfig(directory)) as store:
        store.topics.create(TOPIC, queues=QUEUES)
        append_spread(store, TOPIC, QUEUES, count, bodies, TAG, FILL_BATCH)


def remoting_address(broker: ServerProcess) -> str:
    match = re.search(r" remoting=(\S+:\d+)", broker.ready_line)
    if match is None:
        raise SystemExit(f"the broker serves no remoting port: {broker.ready_line}")
    return match[1]


# -- contenders: one pass over every queue, one thread, queue after queue -------------------


@dataclass
class Pass:
    """What one pass read: pull calls, messages, bytes of records."""

    pulls: int = 0
    rows: int = 0
    record_bytes: int = 0


def check(done: Pass, count: int, what: str) -> Pass:
    if done.rows != count:
        raise SystemExit(f"a {what} pass read {done.rows:,} messages, expected {count:,}")
    return done


def remoting_pass(
    client: RemotingClient,
    ends: dict[MessageQueue, int],
    batch: int,
    ahead: ThreadPoolExecutor | None = None,
) -> Pass:
    """One pass; with ``ahead`` the next pull is sent before this one is decoded, as the
    Spark source's reader does (one pull in flight on a second thread)."""
    done = Pass()
    for mq, end in ends.items():
        offset = 0
        pending = None
        while offset < end:
            if pending is not None:
                answer = pending.result()
            else:
                answer = client.pull(mq, offset, max_messages=min(batch, end - offset))
            if answer.status != PullStatus.FOUND:
                raise SystemExit(f"pull of {mq} at {offset} answered {answer.status.name}")
            following = answer.next_begin_offset
            pending = None
            if ahead is not None and following < end:
                wanted = min(batch, end - following)
                pending = ahead.submit(client.pull, mq, following, max_messages=wanted)
            done.rows += answer.records().num_rows
            done.record_bytes += len(answer.data)
            done.pulls += 1
            offset = following
    return done


def grpc_pass(consumer: PullConsumer, ends: dict[MessageQueue, int], batch: int) -> Pass:
    done = Pass()
    for mq, end in ends.items():
        consumer.seek(mq, 0)
        offset = 0
        while offset < end:
            result = consumer.pull(mq, max_messages=min(batch, end - offset))
            if result.status != PullStatus.FOUND:
                raise SystemExit(f"gRPC pull of {mq} at {offset} answered {result.status.name}")
            done.rows += result.batch.num_rows
            done.pulls += 1
            offset = result.next_begin_offset
    return done


def one_pass_round(run: Callable[[], Pass], count: int, what: str) -> RoundFn:
    """A contender whose round is one pass, whatever the round length asked."""

    def round_fn(_seconds: float) -> tuple[int, int, float]:
        begin = time.perf_counter()
        done = check(run(), count, what)
        return done.pulls, done.rows, time.perf_counter() - begin

    return round_fn


# -- diagnostic: where the remoting time goes -----------------------------------------------


@dataclass
class Split:
    """Seconds summed over one remoting pass, by step."""

    pull_s: float = 0.0  # in RemotingClient.pull
    decode_s: float = 0.0  # in decode_records
    walk_s: float = 0.0  # in index_records (measured apart, not part of the pass)
    raw_s: float = 0.0  # the same requests over a plain socket, read with recv_into
    pulls: int = 0
    rows: int = 0


def split_pass(
    client: RemotingClient, ends: dict[MessageQueue, int], batch: int, split: Split
) -> None:
    clock = time.perf_counter
    for mq, end in ends.items():
        offset = 0
        while offset < end:
            begin = clock()
            answer = client.pull(mq, offset, max_messages=min(batch, end - offset))
            pulled = clock()
            rows = answer.records().num_rows
            decoded = clock()
            index_records(answer.data)
            split.walk_s += clock() - decoded
            split.decode_s += decoded - pulled
            split.pull_s += pulled - begin
            split.pulls += 1
            split.rows += rows
            offset = answer.next_begin_offset


@contextlib.contextmanager
def captured_requests() -> Iterator[list[Command]]:
    """Every remoting request the client sends while inside (``RemotingConnection.call`` is
    its one path for calls that wait for an answer)."""
    requests: list[Command] = []
    original = RemotingConnection.call

    def call(self, request, timeout_s):
        requests.append(Command(request.code, dict(request.ext), request.body))
        return original(self, request, timeout_s)

    RemotingConnection.call = call  # type: ignore[method-assign]
    try:
        yield requests
    finally:
        RemotingConnection.call = original  # type: ignore[method-assign]


class RawPuller:
    """Sends recorded PULL_MESSAGE requests over a plain socket, one at a time, and reads
    each answer with ``recv_into`` into a buffer of the frame's size: no copy after the
    kernel's, no reader thread. The header is parsed to check the answer; the body is left
    as a memoryview."""

    def __init__(self, address: str, requests: list[Command]) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.requests = requests
        self.opaque = 0

    def _read_exactly(self, size: int) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:], size - got)
            if not n:
                raise SystemExit("the broker closed the raw remoting connection")
            got += n
        return buf

    def one_pass(self) -> tuple[int, int]:
        """(pulls, bytes of records) of one pass over the recorded requests."""
        body_bytes = 0
        for request in self.requests:
            self.opaque += 1
            command = Command(request.code, request.ext, request.body, opaque=self.opaque)
            command.language, command.version = "PYTHON", 399
            self.sock.sendall(encode(command))
            (length,) = struct.unpack(">i", self._read_exactly(4))
            frame = self._read_exactly(length)
            header_len = struct.unpack_from(">i", frame, 0)[0] & 0xFFFFFF
            header = json.loads(bytes(memoryview(frame)[4 : 4 + header_len]))
            if header.get("opaque") != self.opaque or header.get("code") != ResponseCode.SUCCESS:
                raise SystemExit(f"raw pull answered {header}")
            body_bytes += length - 4 - header_len
        return len(self.requests), body_bytes

    def close(self) -> None:
        self.sock.close()


@dataclass
class Diagnostic:
    batch: int
    splits: list[Split] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.splits)


def diagnose(
    client: RemotingClient, address: str, ends: dict[MessageQueue, int], batch: int, passes: int
) -> Diagnostic:
    """``passes`` x (one remoting pass split by step, one raw-socket pass of the same
    requests), interleaved."""
    with captured_requests() as requests:
        remoting_pass(client, ends, batch)
    pulls = [r for r in requests if r.ext.get("topic") == TOPIC]
    raw = RawPuller(address, pulls)
    result = Diagnostic(batch)
    try:
        for _ in range(passes):
            split = Split()
            split_pass(client, ends, batch, split)
            begin = time.perf_counter()
            raw.one_pass()
            split.raw_s = time.perf_counter() - begin
            result.splits.append(split)
    finally:
        raw.close()
    return result


def print_diagnostics(diagnostics: list[Diagnostic], broker_us: dict[int, float]) -> None:
    table = Table(
        [
            ("batch", ">"),
            ("pulls", ">"),
            ("msgs/pull", ">"),
            ("in pull", ">"),
            ("in decode", ">"),
            ("pull share", ">"),
            ("pull us/call", ">"),
            ("decode us/call", ">"),
            ("walk us/call", ">"),
            ("raw recv_into us/call", ">"),
            ("broker CPU us/call", ">"),
        ]
    )
    for diag in diagnostics:
        pulls, rows = diag.splits[0].pulls, diag.splits[0].rows
        pull_s, decode_s = diag.median("pull_s"), diag.median("decode_s")

        def per_call(seconds: float, calls: int = pulls) -> str:
            return f"{seconds / calls * 1e6:,.0f}"

        table.add(
            fmt_int(diag.batch),
            pulls,
            fmt_int(rows / pulls),
            f"{pull_s:.3f} s",
            f"{decode_s:.3f} s",
            f"{pull_s / (pull_s + decode_s):.0%}",
            per_call(pull_s),
            per_call(decode_s),
            per_call(diag.median("walk_s")),
            per_call(diag.median("raw_s")),
            f"{broker_us.get(diag.batch, float('nan')):,.0f}",
        )
    table.print()
    print(
        "in pull / in decode: seconds summed over one pass in RemotingClient.pull and in "
        "decode_records (median of the passes);\nwalk: index_records of the same answers "
        "(the TOTALSIZE walk decode_records starts with; timed apart, not in the pass);\n"
        "raw recv_into: the same PULL_MESSAGE requests over a plain socket, each answer read "
        "into one buffer of its size\n(the broker and the kernel, none of the client's "
        "copies); broker CPU: /proc utime + stime per pull over the timed remoting rounds",
        flush=True,
    )


# -- profile (optional: py-spy) -------------------------------------------------------------


def run_profile(
    client: RemotingClient,
    ends: dict[MessageQueue, int],
    batch: int,
    broker_pid: int,
    seconds: float,
    work: Path,
) -> None:
    spy_bin = Path(sys.executable).with_name("py-spy")
    if not spy_bin.exists():
        print(f"\n--profile: skipped: no py-spy beside {sys.executable} (pip install py-spy)")
        return
    from grpc_throughput import profile_run  # the same sampling and hot-spot tables

    def run(seconds_: float) -> None:
        end = time.perf_counter() + seconds_
        while time.perf_counter() < end:
            remoting_pass(client, ends, batch)

    print(f"\nprofile: py-spy --gil, {seconds:g} s, remoting passes, batch {batch}\n")
    pids = {"client": os.getpid(), "broker": broker_pid}
    profile_run(f"remoting pull, batch {batch}", run, pids, seconds, work)


# -- driver ---------------------------------------------------------------------------------


def span(rate: RateResult) -> str:
    return f"{fmt_int(min(rate.rates))}..{fmt_int(max(rate.rates))}"


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        batches = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SystemExit(f"--pull-batch {text!r}: give sizes separated by commas") from None
    if not batches or min(batches) < 1:
        raise SystemExit("--pull-batch needs sizes >= 1")
    return batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_COUNT:,} messages, {QUICK_ROUNDS} rounds, {QUICK_DIAG_PASSES} "
        "diagnostic pass",
    )
    parser.add_argument(
        "--rounds", type=int, help=f"timed passes per case ({DEFAULT_ROUNDS}; quick {QUICK_ROUNDS})"
    )
    parser.add_argument(
        "--count", type=int, help=f"messages stored ({DEFAULT_COUNT:,}; quick {QUICK_COUNT:,})"
    )
    parser.add_argument(
        "--pull-batch",
        default=",".join(map(str, DEFAULT_BATCHES)),
        help="max_messages a pull, several separated by commas (%(default)s)",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy client and broker too")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to create the temporary store (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated bodies")
    args = parser.parse_args(argv)
    count = args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    passes = QUICK_DIAG_PASSES if args.quick else DIAG_PASSES
    batches = parse_batches(args.pull_batch)
    if count < QUEUES or rounds < 1:
        raise SystemExit(f"--count must be >= {QUEUES} and --rounds >= 1")

    started = time.perf_counter()
    load = os.getloadavg()
    busy = " - the machine is busy, figures will be low and noisy" if load[0] > 0.5 else ""
    print(
        f"remoting pull: Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}{busy}\n"
        f"{fmt_int(count)} messages of {BODY_BYTES} B (tag {TAG}, TAGS + UNIQ_KEY) in "
        f"{QUEUES} queues; broker subprocess, flush ASYNC, loopback; client: 1 thread, "
        "queue after queue, each from 0 to its end, decoded to Arrow\n"
        f"{rounds} timed passes per case after 1 untimed, remoting and gRPC interleaved "
        "(alternating order) at each pull batch",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="rmq-remoting-pull-", dir=args.dir) as tmp:
        work = Path(tmp)
        begin = time.perf_counter()
        fill_store(work / "store", count, args.seed)
        fill_s = time.perf_counter() - begin
        broker = broker_process(work / "store", work / "broker.log")
        broker.argv += ["--remoting-port", "0"]
        with contextlib.ExitStack() as stack:
            stack.callback(broker.stop)
            broker.start()
            address = remoting_address(broker)
            client = stack.enter_context(RemotingClient(address))
            queues = client.route(TOPIC).readable
            ends = {mq: client.max_offset(mq) for mq in queues}
            if sum(ends.values()) != count:
                raise SystemExit(f"the broker holds {sum(ends.values()):,} of {count:,}")
            print(
                f"setup: stored in {fill_s:.1f} s; broker {broker.endpoint} remoting {address}\n",
                flush=True,
            )
            run_cases(stack, client, broker, address, ends, batches, rounds, passes, count)
            if args.profile:
                run_profile(client, ends, batches[-1], broker.pid, 4.0, work)
    load_end = os.getloadavg()
    print(
        f"\nload average at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}; "
        f"total {time.perf_counter() - started:.1f} s"
    )
    return 0


def run_cases(
    stack: contextlib.ExitStack,
    client: RemotingClient,
    broker: ServerProcess,
    address: str,
    ends: dict[MessageQueue, int],
    batches: tuple[int, ...],
    rounds: int,
    passes: int,
    count: int,
) -> None:
    results: dict[int, tuple[RateResult, RateResult, CpuMeter, CpuMeter]] = {}
    record_bytes = 0.0
    ahead = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="read-ahead"))
    for batch in batches:
        config = ConsumerConfig(pull_batch_size=batch, pull_max_bytes=GRPC_PULL_MAX_BYTES)
        consumer = stack.enter_context(PullConsumer(broker.endpoint, config=config))
        consumer.assign(consumer.queues(TOPIC))
        by_id = {mq.queue_id: end for mq, end in ends.items()}
        ordered = {mq: by_id[mq.queue_id] for mq in consumer.assignment()}
        if not record_bytes:
            record_bytes = remoting_pass(client, ends, batch).record_bytes / count
        meters = [CpuMeter(broker.pid), CpuMeter(broker.pid)]
        contenders = [
            meters[0].wrap(
                one_pass_round(
                    lambda b=batch: remoting_pass(client, ends, b, ahead), count, "remoting"
                )
            ),
            meters[1].wrap(
                one_pass_round(
                    lambda b=batch, c=consumer, o=ordered: grpc_pass(c, o, b), count, "gRPC"
                )
            ),
        ]
        timing = Timing(warmup_s=0.0, round_s=0.0, rounds=rounds)  # a call is one pass

        def reset(m: list[CpuMeter] = meters) -> None:
            for meter in m:
                meter.reset()

        remoting, grpc_ = measure_rates(contenders, timing, after_warmup=reset)
        results[batch] = (remoting, grpc_, meters[0], meters[1])
        print(
            f"  batch {fmt_int(batch)}: remoting {' '.join(fmt_int(r) for r in remoting.rates)}; "
            f"gRPC {' '.join(fmt_int(r) for r in grpc_.rates)} msgs/s",
            flush=True,
        )
        consumer.close()

    print(
        f"\nread to Arrow, msgs/s and MB/s of records ({record_bytes:.0f} B a record): median "
        f"of {rounds} passes and min..max; ratio: median of per-round remoting/gRPC",
        flush=True,
    )
    table = Table(
        [
            ("batch", ">"),
            ("remoting msgs/s", ">"),
            ("min..max", ">"),
            ("MB/s", ">"),
            ("gRPC msgs/s", ">"),
            ("min..max", ">"),
            ("MB/s", ">"),
            ("remoting/gRPC", ">"),
        ]
    )
    for batch, (remoting, grpc_, _, _) in results.items():
        table.add(
            fmt_int(batch),
            fmt_int(remoting.median),
            span(remoting),
            fmt_mb(remoting.median * record_bytes),
            fmt_int(grpc_.median),
            span(grpc_),
            fmt_mb(grpc_.median * record_bytes),
            fmt_ratio(paired_ratio(remoting, grpc_)),
        )
    table.print()

    print("\nper pull and CPU seconds per million messages over the timed passes", flush=True)
    cpu = Table(
        [
            ("batch", ">"),
            ("case", "<"),
            ("msgs/pull", ">"),
            ("broker CPU s/M", ">"),
            ("client CPU s/M", ">"),
        ]
    )
    broker_us: dict[int, float] = {}
    for batch, (remoting, grpc_, remoting_cpu, grpc_cpu) in results.items():
        for name, rate, meter in (("remoting", remoting, remoting_cpu), ("gRPC", grpc_, grpc_cpu)):
            server_s, client_s = meter.per_million()
            cpu.add(
                fmt_int(batch),
                name,
                fmt_int(rate.units / rate.calls),
                f"{server_s:.3f}",
                f"{client_s:.3f}",
            )
        broker_us[batch] = remoting_cpu.server_s / remoting.calls * 1e6
    cpu.print()

    best_batch = max(results, key=lambda b: results[b][0].median)
    best = results[best_batch][0].median
    verdict = "met" if best >= TARGET else "MISSED"
    print(
        f"\ntarget: remoting pull to Arrow >= {fmt_int(TARGET)} msgs/s ({BODY_BYTES} B bodies): "
        f"{verdict} (best median {fmt_int(best)} at batch {fmt_int(best_batch)}, "
        f"{best / TARGET:.0%} of it; gRPC at that batch "
        f"{fmt_int(results[best_batch][1].median)})",
        flush=True,
    )

    print(
        f"\nwhere the remoting time goes (untimed; median of {passes} pass"
        f"{'es' if passes > 1 else ''} per batch, 1 thread, queue after queue)",
        flush=True,
    )
    diagnostics = [diagnose(client, address, ends, batch, passes) for batch in batches]
    print_diagnostics(diagnostics, broker_us)


if __name__ == "__main__":
    raise SystemExit(main())
