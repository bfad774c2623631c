"""Helpers shared by the benchmarks in ``bench/``: timing, a ``--quick`` flag, tables.

* :func:`add_timing_args` / :func:`timing_from_args`: ``--quick``, ``--rounds``,
  ``--round-seconds`` and ``--warmup-seconds``, resolved into one :class:`Timing`.
* :func:`best_of`: best-of-N wall time of a callable (for a fixed amount of work).
* :func:`measure_rates`: throughput of several contenders (e.g. the code under test and a
  baseline) timed in interleaved rounds, so that drifting conditions (disk, CPU frequency,
  neighbours) hit all of them alike; :func:`paired_ratio` compares two of them round by
  round. :func:`looped` turns "do one unit of work" into a contender.
* :class:`Table`: a plain-text table with aligned columns; :func:`percentile` of latencies.
* :class:`ServerProcess` / :func:`broker_process`: a broker (or any server printing
  ``... listening on HOST:PORT``) in a subprocess; :func:`append_spread` fills a store's
  queues the way the broker stores tagged sends.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Look at the clock about this often while looping over short calls.
_CLOCK_CHECK_S = 0.002

#: A contender: run for about ``seconds``, return (calls, units of work, elapsed seconds).
RoundFn = Callable[[float], tuple[int, int, float]]


@dataclass(frozen=True)
class Timing:
    """How long to warm up and measure each case."""

    warmup_s: float
    round_s: float
    rounds: int
    quick: bool = False

    def describe(self) -> str:
        text = f"best of {self.rounds} x {self.round_s:g} s after {self.warmup_s:g} s warm-up"
        return text + (" (--quick)" if self.quick else "")


def add_timing_args(parser: argparse.ArgumentParser, *, default: Timing, quick: Timing) -> None:
    """Add ``--quick``, ``--rounds``, ``--round-seconds``, ``--warmup-seconds``."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"short run: {quick.describe().removesuffix(' (--quick)')}",
    )
    parser.add_argument("--rounds", type=int, help=f"timed rounds per case ({default.rounds})")
    parser.add_argument(
        "--round-seconds", type=float, help=f"length of one timed round ({default.round_s:g})"
    )
    parser.add_argument(
        "--warmup-seconds", type=float, help=f"untimed warm-up per case ({default.warmup_s:g})"
    )


def timing_from_args(args: argparse.Namespace, *, default: Timing, quick: Timing) -> Timing:
    base = quick if args.quick else default
    rounds = args.rounds if args.rounds is not None else base.rounds
    round_s = args.round_seconds if args.round_seconds is not None else base.round_s
    warmup_s = args.warmup_seconds if args.warmup_seconds is not None else base.warmup_s
    if rounds < 1 or round_s <= 0 or warmup_s < 0:
        raise SystemExit("--rounds must be >= 1, --round-seconds > 0, --warmup-seconds >= 0")
    return Timing(warmup_s, round_s, rounds, quick=args.quick)


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """The shortest wall time in seconds of ``repeats`` calls of ``fn``."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@dataclass
class RateResult:
    """Throughput of one contender: units (e.g. messages) per second, per timed round."""

    rates: list[float] = field(default_factory=list)
    calls: int = 0  # calls made in the timed rounds
    units: int = 0  # units of work done in the timed rounds
    seconds: float = 0.0  # length of the timed rounds together

    def add(self, calls: int, units: int, elapsed: float) -> None:
        self.rates.append(units / elapsed)
        self.calls += calls
        self.units += units
        self.seconds += elapsed

    @property
    def best(self) -> float:
        return max(self.rates)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def spread(self) -> float:
        """(best - worst) / best over the rounds: how noisy the measurement was."""
        return (self.best - min(self.rates)) / self.best if self.best else 0.0


def looped(step: Callable[[], int], max_units: int | None = None) -> RoundFn:
    """A contender calling ``step`` (one unit of work; returns how many units) in a loop
    until the round's time is up or, if given, ``max_units`` units are done.

    The clock is read every few calls, not every call, so that the cost of reading it does
    not count for short calls; how many is learned from the previous round.
    """
    chunk = 1
    cap = max_units if max_units is not None else float("inf")

    def run(seconds: float) -> tuple[int, int, float]:
        nonlocal chunk
        calls = units = 0
        begin = time.perf_counter()
        while True:
            for _ in range(chunk):
                units += step()
            calls += chunk
            elapsed = time.perf_counter() - begin
            if elapsed >= seconds or units >= cap:
                break
        chunk = max(1, int(_CLOCK_CHECK_S * calls / elapsed)) if elapsed > 0 else chunk
        if max_units is not None:
            chunk = max(1, min(chunk, calls // 8))  # do not overshoot the cap by much
        return calls, units, elapsed

    return run


def measure_rates(
    contenders: Sequence[RoundFn],
    timing: Timing,
    *,
    after_warmup: Callable[[], None] | None = None,
    between_rounds: Callable[[], None] | None = None,
) -> list[RateResult]:
    """Warm each contender up, call ``after_warmup``, then time ``timing.rounds`` rounds of
    each, interleaved and in alternating order (A B, B A, A B, ...).

    ``between_rounds`` runs untimed before every round (e.g. ``os.sync`` so that each round
    starts with no dirty pages left by the one before).
    """
    settle = between_rounds or (lambda: None)
    for run in contenders:
        settle()
        run(timing.warmup_s)
    if after_warmup is not None:
        after_warmup()
    results = [RateResult() for _ in contenders]
    for round_no in range(timing.rounds):
        order = list(range(len(contenders)))
        if round_no % 2:
            order.reverse()
        for i in order:
            settle()
            results[i].add(*contenders[i](timing.round_s))
    return results


def measure_rate(step: Callable[[], int], timing: Timing) -> RateResult:
    """Throughput of one step function on its own."""
    return measure_rates([looped(step)], timing)[0]


def paired_ratio(a: RateResult, b: RateResult) -> float:
    """Median over rounds of a/b, each round of ``a`` against the round of ``b`` next to it."""
    return statistics.median(x / y for x, y in zip(a.rates, b.rates, strict=True))


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` so far, all its threads (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds a server process and this (client) process use during a contender's
    rounds, per message: wraps the contender; ``reset()`` forgets the warm-up."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.server_s = self.client_s = 0.0
        self.units = 0

    def wrap(self, run: RoundFn) -> RoundFn:
        def measured(seconds: float) -> tuple[int, int, float]:
            server, client = process_cpu_seconds(self.server_pid), time.process_time()
            calls, units, elapsed = run(seconds)
            self.server_s += process_cpu_seconds(self.server_pid) - server
            self.client_s += time.process_time() - client
            self.units += units
            return calls, units, elapsed

        return measured

    def reset(self) -> None:
        self.server_s = self.client_s = 0.0
        self.units = 0

    def per_million(self) -> tuple[float, float]:
        """(server, client) CPU seconds per million messages."""
        scale = 1e6 / self.units if self.units else float("nan")
        return self.server_s * scale, self.client_s * scale


class Table:
    """A plain-text table: ``Table([("name", "<"), ("msgs/s", ">")])``, then rows."""

    def __init__(self, columns: Sequence[tuple[str, str]], gap: str = "  ") -> None:
        self.headers = [name for name, _ in columns]
        self.aligns = [align for _, align in columns]
        self.gap = gap
        self.rows: list[list[str] | None] = []  # None draws a rule

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"{len(cells)} cells for {len(self.headers)} columns")
        self.rows.append(["" if c is None else str(c) for c in cells])

    def rule(self) -> None:
        """A horizontal rule before the next row (none is drawn at the end)."""
        self.rows.append(None)

    def render(self) -> str:
        cells = [self.headers] + [r for r in self.rows if r is not None]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.headers))]

        def line(row: list[str]) -> str:
            parts = [
                cell.ljust(w) if a == "<" else cell.rjust(w)
                for cell, w, a in zip(row, widths, self.aligns, strict=True)
            ]
            return self.gap.join(parts).rstrip()

        rule = self.gap.join("-" * w for w in widths)
        rows = list(self.rows)
        while rows and rows[-1] is None:
            rows.pop()
        return "\n".join(
            [line(self.headers), rule] + [rule if r is None else line(r) for r in rows]
        )

    def print(self) -> None:
        print(self.render(), flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at index ``int(q * n)`` of the sorted
    values (the last one for q = 1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt_int(value: float) -> str:
    """``1234567.8`` -> ``"1,234,568"``."""
    return f"{value:,.0f}"


def fmt_mb(bytes_per_s: float) -> str:
    """Bytes per second as MB/s (10^6 bytes)."""
    return f"{bytes_per_s / 1e6:,.1f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def fmt_bytes(size: int) -> str:
    """``100`` -> ``"100 B"``, ``1024`` -> ``"1 KiB"``, ``512 << 20`` -> ``"512 MiB"``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


# -- server subprocesses and store filling -------------------------------------------------

#: how long a server subprocess may take to print its ready line
READY_TIMEOUT_S = 30


class ServerProcess:
    """A server subprocess that prints ``... listening on HOST:PORT ...`` when ready."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        preexec: Callable[[], None] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.ready_timeout_s = ready_timeout_s
        self.argv = argv
        self.log_path = log_path
        #: run in the child before it execs (e.g. to set its file limit)
        self.preexec = preexec
        self.process: subprocess.Popen | None = None
        self.endpoint = ""
        self.ready_line = ""  # the whole "... listening on ..." line (e.g. remoting=HOST:PORT)

    def start(self) -> ServerProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=log, preexec_fn=self.preexec
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if not ready:
                continue
            line = self.process.stdout.readline().decode()
            match = re.search(r" listening on (\S+:\d+)", line)
            if match:
                self.endpoint = match[1]
                self.ready_line = line.strip()
                return self
            if not line:
                break
        self.stop()
        raise SystemExit(f"{self.name} did not start; log:\n{self.log_path.read_text()[-2000:]}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


def stop_process(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``timeout_s``; closes its stdout."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def broker_process(store_dir: Path, log_path: Path) -> ServerProcess:
    """``python -m rmq_spark.broker`` on a free loopback port over ``store_dir``, with the
    extra flags of ``ROCKETLITE_BENCH_BROKER_FLAGS`` (e.g. ``--no-message-index``) to
    compare a setting."""
    argv = [sys.executable, "-m", "rmq_spark.broker", "--store", str(store_dir), "--port", "0"]
    extra = os.environ.get("ROCKETLITE_BENCH_BROKER_FLAGS", "").split()
    return ServerProcess("broker", [*argv, "--log-level", "WARNING", *extra], log_path)


def stored_properties(tag: str, count: int, start: int = 0) -> list[bytes]:
    """TAGS + UNIQ_KEY, encoded as the broker stores messages sent with ``tag``."""
    return [
        b"TAGS\x01%s\x02UNIQ_KEY\x01%032X\x02" % (tag.encode(), start + i) for i in range(count)
    ]


def append_spread(
    store: Any, topic: str, queues: int, count: int, bodies: list[bytes], tag: str, batch: int
) -> None:
    """Append ``count`` messages to ``topic`` in batches of ``batch``, batch n to queue
    n % queues, bodies taken round the ``bodies`` pool (longer than ``batch``)."""
    tags = [tag] * batch
    for n, start in enumerate(range(0, count, batch)):
        size = min(batch, count - start)
        first = start % (len(bodies) - batch)
        store.append(
            topic,
            n % queues,
            bodies[first : first + size],
            stored_properties(tag, size, start),
            tags=tags[:size],
        )


# -- single remoting sends to brokers that differ in one setting ----------------------------


def remoting_broker(work: Path, name: str, *flags: str) -> ServerProcess:
    """A started broker named ``name`` with its remoting port on, and ``flags``."""
    broker = broker_process(work / name, work / f"{name}.log")
    broker.name = name
    broker.argv += ["--name", name, "--remoting-port", "0", *flags]
    return broker.start()


def ready_address(broker: ServerProcess, key: str) -> str:
    """The ``key=HOST:PORT`` address of the broker's ready line (``remoting``, ``http``)."""
    found = re.search(rf" {key}=(\S+:\d+)", broker.ready_line)
    if found is None:
        raise SystemExit(f"{broker.name} serves no {key} port: {broker.ready_line}")
    return found[1]


@dataclass
class SendRounds:
    """Per broker: sends/s and the broker's CPU µs per send, one value per round."""

    rates: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)


SEND_THREADS = 8
SEND_QUEUES = 4


def remoting_sends(client, topic: str, broker_name: str, seconds: float, size: int = 100) -> float:
    """Messages/s of SEND_THREADS threads of one RemotingClient, each sending one message
    a call (SEND_MESSAGE_V2, as Java's DefaultMQProducer.send) for ``seconds``."""
    from rmq_spark.structs import MessageQueue

    body = b"x" * size
    queues = [MessageQueue(topic, broker_name, k % SEND_QUEUES) for k in range(SEND_THREADS)]
    calls, elapsed = in_threads(
        SEND_THREADS, seconds, lambda k: client.send(queues[k], [body], [{}])
    )
    return calls / elapsed


def in_threads(threads: int, seconds: float, call: Callable[[int], object]) -> tuple[int, float]:
    """``threads`` threads each calling ``call(its number)`` in a loop for ``seconds``: the
    calls made in all and the seconds taken. A call's exception stops its thread and is
    raised here once all have ended."""
    counts = [0] * threads
    errors: list[BaseException] = []
    begin = time.perf_counter()

    def loop(k: int) -> None:
        try:
            while time.perf_counter() - begin < seconds:
                call(k)
                counts[k] += 1
        except BaseException as exc:  # re-raised below, in the bench's thread
            errors.append(exc)

    running = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    if errors:
        raise errors[0]
    return sum(counts), time.perf_counter() - begin


def compare_sends(brokers: list[ServerProcess], timing: Timing) -> dict[str, SendRounds]:
    """Single remoting sends to each broker in turn, ``timing.rounds`` interleaved rounds
    (the order reversed every other round), after ``timing.warmup_s`` each."""
    from rmq_spark.client import Admin
    from rmq_spark.client.remoting import RemotingClient

    clients = {}
    try:
        for broker in brokers:
            with Admin(broker.endpoint) as admin:
                admin.create_topic("Sends", queues=SEND_QUEUES)
            client = RemotingClient(ready_address(broker, "remoting"))
            client.route("Sends")
            clients[broker.name] = client
        if timing.warmup_s:
            for broker in brokers:
                remoting_sends(clients[broker.name], "Sends", broker.name, timing.warmup_s)
        rounds = {broker.name: SendRounds() for broker in brokers}
        for round_no in range(timing.rounds):
            for broker in brokers if round_no % 2 == 0 else brokers[::-1]:
                used = process_cpu_seconds(broker.pid)
                rate = remoting_sends(clients[broker.name], "Sends", broker.name, timing.round_s)
                used = process_cpu_seconds(broker.pid) - used
                rounds[broker.name].rates.append(rate)
                rounds[broker.name].cpu_us.append(used / (rate * timing.round_s) * 1e6)
            print(
                f"  round {round_no + 1}/{timing.rounds}: "
                + ", ".join(f"{n} {fmt_int(r.rates[-1])}/s" for n, r in rounds.items()),
                flush=True,
            )
        return rounds
    finally:
        for client in clients.values():
            client.close()


def report_sends(rounds: dict[str, SendRounds], labels: dict[str, str], target: float) -> None:
    """A table of the brokers' sends, and the ratio of the second to the first (the
    baseline), the median of per-round ratios, against ``target``."""
    print("| broker | sends/s (median, min..max) | broker CPU µs per send (median) |")
    print("|---|---|---|")
    for name, found in rounds.items():
        print(
            f"| {labels[name]} | {fmt_int(statistics.median(found.rates))} "
            f"({fmt_int(min(found.rates))}..{fmt_int(max(found.rates))}) | "
            f"{statistics.median(found.cpu_us):.0f} |"
        )
    (base_name, base), (other_name, other) = rounds.items()
    ratios = [a / b for a, b in zip(other.rates, base.rates, strict=True)]
    ratio = statistics.median(ratios)
    verdict = "met" if ratio >= target else "MISSED"
    print(
        f"{labels[other_name]} / {labels[base_name]}: {ratio:.3f}x "
        f"(rounds {min(ratios):.3f}..{max(ratios):.3f}); target >= {target}x: {verdict}"
    )
