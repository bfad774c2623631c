"""Append throughput of the message store, against a raw sequential file write.

Cases: 100-byte and 1 KiB bodies, batches of 1, 32 and 1024 messages, flush mode ASYNC and
SYNC, one thread appending to one queue. Every message carries realistic properties
(``UNIQ_KEY`` = 32 hex digits, ``TAGS``) and its tag is passed explicitly, as a broker
does. Each case opens a fresh store in a temporary directory (default 1 GiB segments,
sparse) and deletes it afterwards.

The baseline ("raw") is what the kernel and the disk allow without any store logic: the
same record bytes written sequentially with one ``os.write`` per batch (the store also
writes each batch with one call), followed by ``os.fdatasync`` after each write for SYNC
and no sync for ASYNC. Like the store's commit log it writes into 1 GiB sparse files
(``ftruncate``), rolling to a new one when full. The store also writes a 20-byte
consume-queue entry per message to a second file; the baseline does not.

The store and the baseline are timed in interleaved rounds (store, raw, raw, store, ...)
after a warm-up, because fdatasync latency on a shared virtual disk drifts by several
times within seconds. Figures are the best round; ``store/raw`` is the median over rounds
of the store's rate against the raw rate measured next to it. A round ends after
``round_s`` or ``ROUND_BYTES`` of records, whichever comes first, and ``os.sync`` runs
(untimed) before every round: the page cache absorbs a burst of a few hundred MB at memory
speed, after which the kernel throttles writers to the disk's sustained rate, and a raw
writer at GB/s would otherwise push every later round into that regime. So ASYNC figures
are burst rates (CPU and page cache); sustained ASYNC throughput cannot exceed the disk's
write bandwidth, printed at the end.

Group commit: SYNC mode, 100-byte bodies, batches of 1 and 32, with 1 and 4 threads
appending concurrently (each to its own queue) to one store, interleaved the same way with
the raw fdatasync baseline. The commit log's fdatasyncs are counted by wrapping the store's
``commitlog.flush`` from the outside, so the table shows how many appends shared one.

MB/s counts record bytes (header, body, topic, properties) as laid out in the commit log,
1 MB = 10^6 bytes.

Run: ``.venv/bin/python bench/append_throughput.py [--quick] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    RateResult,
    Table,
    Timing,
    add_timing_args,
    fmt_bytes,
    fmt_int,
    fmt_mb,
    fmt_ratio,
    looped,
    measure_rates,
    paired_ratio,
    timing_from_args,
)

from rmq_spark.codec.batch_encode import prepare_batch
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore

DEFAULT_TIMING = Timing(warmup_s=0.3, round_s=0.4, rounds=4)
QUICK_TIMING = Timing(warmup_s=0.05, round_s=0.1, rounds=2, quick=True)

TOPIC = "BenchTopic"
QUEUES = 4
BODY_SIZES = (100, 1024)
BATCH_SIZES = (1, 32, 1024)
MODES = ("ASYNC", "SYNC")
TAG_VALUES = ("TagA", "TagB", "TagC", "TagD")
#: distinct messages per case; batches are consecutive slices of them, reused in turn
POOL_MESSAGES = 4096
#: size of the baseline's files, as the store's default commit-log segment
RAW_FILE_BYTES = StoreConfig("unused").commitlog_segment_bytes
#: record bytes after which a timed round ends even if its time is not up
ROUND_BYTES = 128 << 20
#: bytes written (and fdatasynced) to measure the disk's sustained write bandwidth
DISK_PROBE_BYTES = 1 << 30

GROUP_THREADS = (1, 4)
GROUP_BATCHES = (1, 32)
GROUP_BODY = 100

#: (mode, body bytes, batch) -> msgs/s the store should reach
TARGETS = {("ASYNC", 100, 1024): 1_000_000}
TARGET_TEXT = "batch append of 100-byte messages >= 1,000,000 msgs/s in ASYNC"


# -- workload ----------------------------------------------------------------------------


@dataclass
class Batch:
    bodies: list[bytes]
    properties: list[bytes]
    tags: list[str]


def make_batches(body_bytes: int, batch: int, seed: int) -> list[Batch]:
    """``POOL_MESSAGES`` distinct messages (at least one batch) cut into batches."""
    rng = random.Random(seed)
    count = max(batch, POOL_MESSAGES - POOL_MESSAGES % batch)
    bodies = [rng.randbytes(body_bytes) for _ in range(count)]
    tags = [TAG_VALUES[i % len(TAG_VALUES)] for i in range(count)]
    props = [
        b"UNIQ_KEY\x01%032X\x02TAGS\x01%s\x02" % (rng.getrandbits(128), tag.encode())
        for tag in tags
    ]
    return [
        Batch(bodies[i : i + batch], props[i : i + batch], tags[i : i + batch])
        for i in range(0, count, batch)
    ]


def batch_record_bytes(batches: list[Batch], store_host: str) -> int:
    """Average commit-log bytes of one batch (the codec's own size computation)."""
    total = sum(
        prepare_batch(TOPIC, 0, b.bodies, b.properties, store_host=store_host).total_bytes
        for b in batches
    )
    return round(total / len(batches))


# -- contenders --------------------------------------------------------------------------


class FsyncCounter:
    """Counts commit-log flushes that synced something (the store's own fdatasyncs).

    Wraps ``store.commitlog.flush`` on the instance; the flush service and the checkpoint
    call it through the store. A call counts when a segment's flushed position moved.
    """

    def __init__(self, store: MessageStore) -> None:
        self.count = 0
        commitlog = store.commitlog
        original = commitlog.flush

        def counting_flush() -> int:
            before = sum(seg.flushed_pos for seg in commitlog.segments)
            end = original()
            if sum(seg.flushed_pos for seg in commitlog.segments) > before:
                self.count += 1
            return end

        commitlog.flush = counting_flush  # type: ignore[method-assign]


class StoreAppender:
    """Appends batches to one store: from the calling thread (``threads=0``, rounds capped at
    ``max_messages``), or from ``threads`` new threads, thread i to queue i (rounds end on
    time only). Counts the appends and commit-log fsyncs of its rounds."""

    def __init__(
        self,
        store: MessageStore,
        fsyncs: FsyncCounter,
        batches: list[Batch],
        threads: int = 0,
        max_messages: int | None = None,
    ) -> None:
        self.store = store
        self.counter = fsyncs
        self.threads = threads
        lanes = max(1, threads)
        self._cycles = [itertools.cycle(batches[i::lanes] or batches) for i in range(lanes)]
        self._loop = looped(self._step, max_messages)
        self.appends = self.fsyncs = 0

    def reset(self) -> None:
        self.appends = self.fsyncs = 0

    def _step(self) -> int:
        b = next(self._cycles[0])
        self.store.append(TOPIC, 0, b.bodies, b.properties, tags=b.tags)
        return len(b.bodies)

    def __call__(self, seconds: float) -> tuple[int, int, float]:
        before = self.counter.count
        if self.threads:
            calls, units, elapsed = self._run_threads(seconds)
        else:
            calls, units, elapsed = self._loop(seconds)
        self.fsyncs += self.counter.count - before
        self.appends += calls
        return calls, units, elapsed

    def _run_threads(self, seconds: float) -> tuple[int, int, float]:
        stop = threading.Event()
        calls = [0] * self.threads
        units = [0] * self.threads
        errors: list[BaseException] = []
        append = self.store.append

        def worker(lane: int) -> None:
            cycle = self._cycles[lane]
            try:
                while not stop.is_set():
                    b = next(cycle)
                    append(TOPIC, lane, b.bodies, b.properties, tags=b.tags)
                    calls[lane] += 1
                    units[lane] += len(b.bodies)
            except BaseException as exc:
                errors.append(exc)

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(self.threads)]
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


class RawWriter:
    """The baseline: ``os.write`` of one batch's bytes (+ ``os.fdatasync`` when ``sync``)
    into sparse files of ``RAW_FILE_BYTES``, rolling to a new file like the commit log."""

    def __init__(
        self,
        directory: Path,
        batch_bytes: int,
        per_batch: int,
        sync: bool,
        max_messages: int | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.data = os.urandom(batch_bytes)
        self.per_batch = per_batch
        self.sync = sync
        self.files = 0
        self.fd = -1
        self.pos = 0
        self._roll()
        self.run = looped(self.step, max_messages)

    def _roll(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        path = self.directory / f"{self.files * RAW_FILE_BYTES:020d}"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, RAW_FILE_BYTES)
        self.files += 1
        self.pos = 0

    def step(self) -> int:
        size = len(self.data)
        if self.pos + size > RAW_FILE_BYTES:
            self._roll()
        if os.write(self.fd, self.data) != size:
            raise OSError("short write")
        if self.sync:
            os.fdatasync(self.fd)
        self.pos += size
        return self.per_batch

    def close(self) -> None:
        os.close(self.fd)


# -- driver ------------------------------------------------------------------------------


def open_store(directory: Path, mode: str) -> tuple[MessageStore, FsyncCounter]:
    store = MessageStore.open(StoreConfig(directory, flush_mode=mode))
    store.topics.create(TOPIC, queues=QUEUES)
    return store, FsyncCounter(store)


def fresh_dir(parent: Path, name: str) -> Path:
    path = parent / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def drop_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.sync()  # write back and discard now, not during the next case's timing


@dataclass
class Measured:
    """One store contender against the raw baseline measured next to it."""

    threads: int
    store: RateResult  # messages/s
    raw: RateResult  # messages/s
    appends: int  # append calls in the timed rounds
    fsyncs: int  # commit-log fdatasyncs in the timed rounds

    @property
    def ratio(self) -> float:
        return paired_ratio(self.store, self.raw)

    def appends_per_fsync(self) -> str:
        return f"{self.appends / self.fsyncs:.2f}" if self.fsyncs else "-"


@dataclass
class Case:
    mode: str
    body: int
    batch: int
    msg_bytes: float  # record bytes per message in the commit log
    runs: list[Measured]


def run_case(
    parent: Path,
    mode: str,
    body: int,
    batch: int,
    timing: Timing,
    seed: int,
    threads: tuple[int, ...] = (0,),
) -> Case:
    """Store appenders with each thread count in ``threads`` (0 = the calling thread) and
    the raw baseline, all on one fresh store, in interleaved rounds."""
    batches = make_batches(body, batch, seed)
    batch_bytes = batch_record_bytes(batches, StoreConfig(parent).store_host)
    cap = max(batch, ROUND_BYTES * batch // batch_bytes)  # messages per round at most
    case_dir = fresh_dir(parent, f"{mode.lower()}-{body}-{batch}-{'-'.join(map(str, threads))}")
    try:
        store, counter = open_store(case_dir / "store", mode)
        try:
            appenders = [StoreAppender(store, counter, batches, n, cap) for n in threads]
            raw = RawWriter(case_dir / "raw", batch_bytes, batch, mode == "SYNC", cap)
            try:

                def reset() -> None:
                    for a in appenders:
                        a.reset()

                *store_rates, raw_rate = measure_rates(
                    [*appenders, raw.run], timing, after_warmup=reset, between_rounds=os.sync
                )
            finally:
                raw.close()
        finally:
            store.close()
    finally:
        drop_dir(case_dir)
    runs = [
        Measured(a.threads, rate, raw_rate, a.appends, a.fsyncs)
        for a, rate in zip(appenders, store_rates, strict=True)
    ]
    return Case(mode, body, batch, batch_bytes / batch, runs)


def target_cell(case: Case) -> str:
    target = TARGETS.get((case.mode, case.body, case.batch))
    if target is None:
        return ""
    best = case.runs[0].store.best
    verdict = "met" if best >= target else "MISSED"
    return f">= {target / 1e6:g}M msgs/s: {verdict} ({best / target:.0%})"


def print_main_table(cases: list[Case]) -> None:
    table = Table(
        [
            ("mode", "<"),
            ("body", ">"),
            ("batch", ">"),
            ("B/msg", ">"),
            ("store msgs/s", ">"),
            ("store MB/s", ">"),
            ("raw msgs/s", ">"),
            ("raw MB/s", ">"),
            ("store/raw", ">"),
            ("spread", ">"),
            ("appends/fsync", ">"),
            ("target", "<"),
        ]
    )
    previous = None
    for case in cases:
        if previous is not None and case.mode != previous:
            table.rule()
        previous = case.mode
        run = case.runs[0]
        table.add(
            case.mode,
            fmt_bytes(case.body),
            case.batch,
            f"{case.msg_bytes:.0f}",
            fmt_int(run.store.best),
            fmt_mb(run.store.best * case.msg_bytes),
            fmt_int(run.raw.best),
            fmt_mb(run.raw.best * case.msg_bytes),
            fmt_ratio(run.ratio),
            f"{max(run.store.spread, run.raw.spread):.0%}",
            run.appends_per_fsync() if case.mode == "SYNC" else "-",
            target_cell(case),
        )
    table.print()


def print_group_table(cases: list[Case]) -> None:
    table = Table(
        [
            ("batch", ">"),
            ("threads", ">"),
            ("msgs/s", ">"),
            ("MB/s", ">"),
            ("appends/s", ">"),
            ("fsyncs/s", ">"),
            ("appends/fsync", ">"),
            ("vs 1 thread", ">"),
            ("raw msgs/s", ">"),
            ("store/raw", ">"),
        ]
    )
    for case in cases:
        single = case.runs[0]
        for run in case.runs:
            table.add(
                case.batch,
                run.threads,
                fmt_int(run.store.best),
                fmt_mb(run.store.best * case.msg_bytes),
                fmt_int(run.appends / run.store.seconds),
                fmt_int(run.fsyncs / run.store.seconds),
                run.appends_per_fsync(),
                fmt_ratio(paired_ratio(run.store, single.store)),
                fmt_int(run.raw.best),
                fmt_ratio(run.ratio),
            )
        table.rule()
    table.print()


def disk_write_bandwidth(directory: Path, total: int) -> float:
    """Bytes/s of writing ``total`` bytes in 1 MiB writes to a new file plus fdatasync."""
    chunk = os.urandom(1 << 20)
    path = directory / "disk-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        begin = time.perf_counter()
        for _ in range(total // len(chunk)):
            os.write(fd, chunk)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - begin
    finally:
        os.close(fd)
        path.unlink()
        os.sync()
    return total / elapsed


def filesystem_of(path: Path) -> str:
    try:
        out = subprocess.run(
            ["findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "-T", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "filesystem unknown"
    if len(out) < 3:
        return " ".join(out) or "filesystem unknown"
    return f"{out[0]} on {out[1]}" + (", discard" if "discard" in out[2].split(",") else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_timing_args(parser, default=DEFAULT_TIMING, quick=QUICK_TIMING)
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to create the temporary stores (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated messages")
    args = parser.parse_args(argv)
    timing = timing_from_args(args, default=DEFAULT_TIMING, quick=QUICK_TIMING)

    started = time.perf_counter()
    load = os.getloadavg()[0]
    busy = " - the machine is busy, figures will be low and noisy" if load > 0.5 else ""
    with tempfile.TemporaryDirectory(prefix="rmq-append-bench-", dir=args.dir) as tmp:
        parent = Path(tmp)
        print(
            f"append throughput: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {load:.2f}{busy}\n"
            f"stores in {parent} ({filesystem_of(parent)})\n"
            f"timing: {timing.describe()}, store and raw rounds interleaved\n"
            "B/msg and MB/s: commit-log record bytes (1 MB = 10^6 B). raw: os.write of the "
            "same bytes, one write per batch,\n"
            "+ fdatasync per write in SYNC. store/raw: median of per-round ratios. "
            "spread: (best - worst) / best round.\n",
            flush=True,
        )
        cases = [
            run_case(parent, mode, body, batch, timing, args.seed)
            for mode in MODES
            for body in BODY_SIZES
            for batch in BATCH_SIZES
        ]
        print_main_table(cases)

        print(
            f"\ngroup commit: SYNC, {GROUP_BODY}-byte bodies, thread i appends to queue i of "
            "one store; fsyncs = commit-log fdatasyncs;\nmsgs/s: best round; appends/s, "
            "fsyncs/s: mean; vs 1 thread: median per-round ratio; raw: one thread, os.write + "
            "fdatasync per batch",
            flush=True,
        )
        group = [
            run_case(parent, "SYNC", GROUP_BODY, batch, timing, args.seed, GROUP_THREADS)
            for batch in GROUP_BATCHES
        ]
        print_group_table(group)

        disk = None if timing.quick else disk_write_bandwidth(parent, DISK_PROBE_BYTES)

    if disk is None:
        print("\ndisk: sustained write bandwidth not measured with --quick")
    else:
        print(
            f"\ndisk: {fmt_mb(disk)} MB/s sustained ({fmt_bytes(DISK_PROBE_BYTES)} in 1 MiB "
            "writes + one fdatasync); ASYNC rates above this are bursts the page cache absorbs"
        )
    print(f"target: {TARGET_TEXT}")
    for case in cases:
        target = TARGETS.get((case.mode, case.body, case.batch))
        if target is not None:
            run = case.runs[0]
            best, median = run.store.best, run.store.median
            print(
                f"  {case.mode} {fmt_bytes(case.body)} x {case.batch}: best round "
                f"{fmt_int(best)} msgs/s -> {'met' if best >= target else 'MISSED'} "
                f"({best / target:.0%}); median round {fmt_int(median)} msgs/s "
                f"({median / target:.0%})\n"
                f"  raw write of the same bytes: {fmt_int(run.raw.best)} msgs/s; the target "
                f"needs {fmt_mb(target * case.msg_bytes)} MB/s of records"
            )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
