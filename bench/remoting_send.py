"""Apache RocketMQ's own benchmark producer against rocketlite's remoting port and against
Apache RocketMQ itself, with rocketlite's gRPC single sends beside them, in one run.

    ROCKETMQ_HOME=/path/to/rocketmq-4.9 python bench/remoting_send.py [--quick] [--rounds N]
        [--windows W] [--round-seconds S] [--warmup-seconds S]

It needs an Apache RocketMQ 4.9 build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars; the
logback configs of ``conf/`` are used when there) and ``java`` on PATH; without them it says
so and exits 0. It starts everything itself on free 127.0.0.1 ports with temporary store and
log directories, and stops it all (the JVMs too) on the way out, Ctrl-C and errors included:

* a rocketlite broker (``python -m rmq_spark.broker --remoting-port 0
  --auto-create-topics``), flush ASYNC;
* Apache RocketMQ's name server and one broker (ASYNC_MASTER, ASYNC_FLUSH, 128 MiB commit
  log files, topics auto-created); their logs go under the temporary directory, not ``~``.
  (RocketMQ 4.9 has no bind-address setting: its servers listen on the wildcard address;
  everything here connects to them through 127.0.0.1.)

Cases, for 100-byte and 1 KiB bodies, each a fresh topic of 4 queues created on first send:

* ``remoting``: ``org.apache.rocketmq.example.benchmark.Producer -w 32`` (32 threads of
  synchronous ``DefaultMQProducer.send``, one message a call) in its own JVM, with
  rocketlite's remoting port as its name server;
* ``Apache``: the same command against Apache RocketMQ's name server (the baseline);
* ``gRPC``: rocketlite's own client for reference: 32 threads sharing one
  ``rmq_spark.client.Producer``, each calling ``send(topic, body)`` in a loop, against the
  same rocketlite broker's gRPC port, ``--round-seconds`` per round.

The benchmark producer prints ``Send TPS: N`` every 10 s, over the last 9 s. A round of a
Java case is one run of it: the first line (JVM start, routes, JIT) is dropped, the run is
stopped (SIGINT) after ``--windows`` more lines, and the round's figure is their median. A
new JVM each round means every round pays the client's start-up alike for both brokers;
before the rounds each broker gets one untimed run of one window (the Apache broker's JIT
warm-up) and the gRPC case ``--warmup-seconds`` (none with ``--quick``).

Rounds are interleaved (per round, each size: remoting, Apache, gRPC; the order reversed
every other round) so that drifting conditions hit all cases alike. It prints, per size,
each case's median round and min..max, the ratio rocketlite/Apache (target >= 0.7x) and
remoting/gRPC (target >= 10x), each the median of per-round ratios, with a verdict. All
processes share this machine's CPUs: the clients' CPU counts against every case.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _apache import (
    CLIENT_JVM,
    JVM_STOP_S,
    ApacheRocketMQ,
    Java,
    describe_build,
    interruptible,
    java_version,
    rocketmq_home,
    tail,
)
from _common import (
    RateResult,
    Table,
    Timing,
    add_timing_args,
    broker_process,
    fmt_bytes,
    fmt_int,
    fmt_ratio,
    in_threads,
    paired_ratio,
    timing_from_args,
)

from rmq_spark.client import Admin, Producer, ProducerConfig

#: --round-seconds and --warmup-seconds are the gRPC case's; Java rounds are --windows long
DEFAULT = Timing(warmup_s=2.0, round_s=5.0, rounds=3)
QUICK = Timing(warmup_s=0.0, round_s=2.0, rounds=1, quick=True)
DEFAULT_WINDOWS = 1  # timed 10-s windows per benchmark-producer run, after the first

SIZES = (100, 1024)
THREADS = 32
QUEUES = 4  # what both brokers give an auto-created topic (defaultTopicQueueNums)
TARGET_VS_APACHE = 0.7
TARGET_VS_GRPC = 10.0

BENCH_PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"
WINDOW_S = 10  # the benchmark producer prints a line this often
#: a benchmark-producer run's time beyond its windows before it counts as stuck
RUN_SLACK_S = 60
TPS_LINE = re.compile(r"Send TPS: (\d+).*Send Failed: (\d+) Response Failed: (\d+)")


@dataclass
class Window:
    tps: int
    failed: int  # the producer's send failures + failed responses so far


def benchmark_producer(java: Java, namesrv: str, topic: str, size: int, lines: int) -> list[Window]:
    """Run the benchmark producer until it printed ``lines`` TPS lines; they, in order."""
    log_dir = java.work / "client-logs"
    argv = java.argv(
        [*CLIENT_JVM, f"-Drocketmq.client.logRoot={log_dir}"],
        BENCH_PRODUCER,
        *("-n", namesrv, "-t", topic, "-s", str(size), "-w", str(THREADS)),
    )
    stderr_log = java.work / "benchmark-producer.err"
    found: queue.Queue[str | None] = queue.Queue()
    with open(stderr_log, "ab") as err:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=java.work)
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for raw in stdout:
            found.put(raw.decode(errors="replace"))
        found.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    windows: list[Window] = []
    deadline = time.monotonic() + lines * WINDOW_S + RUN_SLACK_S
    try:
        while len(windows) < lines:
            try:
                line = found.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"the benchmark producer printed {len(windows)} of {lines} TPS lines in "
                    f"{lines * WINDOW_S + RUN_SLACK_S} s; stderr:\n{tail(stderr_log)}"
                ) from None
            if line is None:
                raise SystemExit(
                    f"the benchmark producer exited ({process.wait()}) after "
                    f"{len(windows)} TPS lines; stderr:\n{tail(stderr_log)}"
                )
            match = TPS_LINE.search(line)
            if match:
                tps, failed, response_failed = map(int, match.groups())
                windows.append(Window(tps, failed + response_failed))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(JVM_STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(5)
        stdout.close()
    return windows


def grpc_sends(producer: Producer, topic: str, body: bytes, seconds: float) -> RateResult:
    """``THREADS`` threads calling ``producer.send`` for ``seconds``: one round."""
    calls, elapsed = in_threads(THREADS, seconds, lambda _: producer.send(topic, body))
    result = RateResult()
    result.add(calls, calls, elapsed)
    return result


# -- the bench ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    run: Callable[[int], float]  # body size -> messages/s of one round
    results: dict[int, RateResult] = field(default_factory=dict)
    failures: int = 0  # send failures the Java benchmark producer reported

    def round(self, size: int) -> None:
        self.results.setdefault(size, RateResult()).rates.append(self.run(size))


def java_case(name: str, java: Java, namesrv: str, windows: int) -> Case:
    case: Case

    def run(size: int) -> float:
        seen = benchmark_producer(java, namesrv, f"RemotingSend{size}", size, windows + 1)
        case.failures += seen[-1].failed
        return statistics.median(w.tps for w in seen[1:])

    case = Case(name, run)
    return case


def grpc_case(producer: Producer, round_s: float) -> Case:
    def run(size: int) -> float:
        return grpc_sends(producer, f"GrpcSend{size}", b"x" * size, round_s).rates[0]

    return Case("gRPC", run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(parser, default=DEFAULT, quick=QUICK)
    parser.add_argument(
        "--windows",
        type=int,
        default=DEFAULT_WINDOWS,
        help=f"timed {WINDOW_S}-s windows per benchmark-producer run, after the first "
        f"(default {DEFAULT_WINDOWS})",
    )
    args = parser.parse_args(argv)
    timing = timing_from_args(args, default=DEFAULT, quick=QUICK)
    if args.windows < 1:
        raise SystemExit("--windows must be >= 1")
    home = rocketmq_home()
    if home is None:
        print(
            "remoting_send: skipped: set ROCKETMQ_HOME to an Apache RocketMQ 4.9 build "
            "(a directory with lib/ of its jars) to compare with Apache RocketMQ"
        )
        return 0
    if shutil.which("java") is None:
        print("remoting_send: skipped: needs java (a JDK or JRE 11+) on PATH")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-remoting-"))
    with interruptible(), contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        return run(stack, home, work, timing, args.windows)


def run(stack: contextlib.ExitStack, home: Path, work: Path, timing: Timing, windows: int) -> int:
    java = Java(home, work)
    load = os.getloadavg()[0]
    apache = ApacheRocketMQ(java)
    stack.callback(apache.stop)
    broker = broker_process(work / "rocketlite-store", work / "rocketlite.log")
    broker.argv += ["--remoting-port", "0", "--auto-create-topics"]
    stack.callback(broker.stop)
    broker.start()
    remoting = re.search(r" remoting=(\S+:\d+)", broker.ready_line)
    if remoting is None:
        raise SystemExit(f"the rocketlite broker serves no remoting port: {broker.ready_line}")
    apache.start()
    with Admin(broker.endpoint) as admin:
        for size in SIZES:
            admin.create_topic(f"GrpcSend{size}", queues=QUEUES)
    producer = Producer(broker.endpoint, config=ProducerConfig())
    stack.callback(producer.close)

    cases = [
        java_case("remoting", java, remoting[1], windows),
        java_case("Apache", java, apache.namesrv, windows),
        grpc_case(producer, timing.round_s),
    ]
    java_round_s = (windows + 1) * WINDOW_S
    print(
        f"RocketMQ's benchmark producer (-w {THREADS}: sync sends, one message a call) against "
        f"rocketlite's remoting port and against Apache RocketMQ\n"
        f"  ({describe_build(home)}; {java_version()}), and rocketlite's gRPC "
        f"Producer.send from {THREADS} threads, on the same rocketlite broker;\n"
        f"  {timing.rounds} interleaved round(s) per case: a Java round is one ~{java_round_s} s "
        f"run (median of its {windows} {WINDOW_S}-s window(s) after the first), a gRPC round "
        f"{timing.round_s:g} s;\n  {os.cpu_count()} CPUs shared by brokers and clients, "
        f"load average at start {load:.1f}"
        + (" (--quick: a check that it runs, not a measurement)" if timing.quick else ""),
        flush=True,
    )
    if timing.warmup_s > 0:  # the Apache broker's JIT, rocketlite's topics and connections
        for namesrv in (remoting[1], apache.namesrv):
            benchmark_producer(java, namesrv, "Warmup", SIZES[0], 1)
        for size in SIZES:
            grpc_sends(producer, f"GrpcSend{size}", b"x" * size, timing.warmup_s)
    for round_no in range(timing.rounds):
        order = cases if round_no % 2 == 0 else cases[::-1]
        for size in SIZES:
            for case in order:
                case.round(size)
        print(
            f"  round {round_no + 1}/{timing.rounds}: "
            + "; ".join(
                f"{fmt_bytes(size)} "
                + " ".join(f"{c.name} {fmt_int(c.results[size].rates[-1])}" for c in cases)
                for size in SIZES
            ),
            flush=True,
        )
    report(cases, load_end=os.getloadavg()[0])
    return 0


def span(result: RateResult) -> str:
    return f"{fmt_int(min(result.rates))}..{fmt_int(max(result.rates))}"


def verdict(ratio: float, target: float) -> str:
    return f"{'met' if ratio >= target else 'MISSED'} (target >= {target:g}x)"


def report(cases: list[Case], load_end: float) -> None:
    remoting, apache, grpc_ = cases
    table = Table(
        [
            ("body", "<"),
            ("remoting msgs/s", ">"),
            ("min..max", ">"),
            ("Apache msgs/s", ">"),
            ("min..max", ">"),
            ("gRPC msgs/s", ">"),
            ("min..max", ">"),
        ]
    )
    for size in SIZES:
        table.add(
            fmt_bytes(size),
            *(
                cell
                for case in cases
                for cell in (fmt_int(case.results[size].median), span(case.results[size]))
            ),
        )
    print()
    table.print()
    print()
    ratios = Table(
        [
            ("body", "<"),
            ("rocketlite/Apache", ">"),
            ("verdict", "<"),
            ("remoting/gRPC", ">"),
            ("verdict", "<"),
        ]
    )
    for size in SIZES:
        vs_apache = paired_ratio(remoting.results[size], apache.results[size])
        vs_grpc = paired_ratio(remoting.results[size], grpc_.results[size])
        ratios.add(
            fmt_bytes(size),
            fmt_ratio(vs_apache),
            verdict(vs_apache, TARGET_VS_APACHE),
            fmt_ratio(vs_grpc),
            verdict(vs_grpc, TARGET_VS_GRPC),
        )
    ratios.print()
    print(
        "msgs/s: median round; ratios: median of per-round ratios (rounds next to each other). "
        f"Send failures reported by the benchmark producer: remoting {remoting.failures}, "
        f"Apache {apache.failures}. Load average at the end {load_end:.1f}."
    )


if __name__ == "__main__":
    sys.exit(main())
