"""Single-message sends through gRPC to one broker process, with and without auto batching.

Each gRPC call costs the broker about a millisecond of CPU whatever it carries, so sending
one message a call caps what one broker accepts. ``ProducerConfig(auto_batch=True)`` sends
the single sends that arrive together as one request (see ``rmq_spark.client.auto_batch``).
Cases, 100-byte bodies, tag ``TagA``, round robin over 8 queues:

* ``send``, one thread, one message at a time: the baseline (every ratio is against it),
  and the same with auto batching (a lone send goes out at once, through two more threads);
* ``send_async`` from one thread (4 async workers), without and with auto batching, with
  at most 256 sends outstanding (the oldest is waited for when the window is full);
* ``send`` from 8 threads, without and with auto batching.

Cases run in interleaved rounds (alternating order); figures are the median round and the
spread (best - worst) / best; ratios the median of per-round ratios to the baseline. The
broker's CPU per message (utime + stime from /proc around each case's rounds) is printed
too: it is what auto batching saves.

Run: ``.venv/bin/python bench/single_send.py [--quick] [--rounds R] [--round-seconds S]``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from _common import (
    CpuMeter,
    RateResult,
    RoundFn,
    Table,
    Timing,
    add_timing_args,
    broker_process,
    fmt_int,
    measure_rates,
    paired_ratio,
    timing_from_args,
)

from rmq_spark.client import Producer, ProducerConfig

TOPIC = "single"
BODY = b"x" * 100
THREADS = 8
WINDOW = 256  # sends a send_async case keeps outstanding at most
DEFAULT = Timing(warmup_s=0.5, round_s=2.0, rounds=5)
QUICK = Timing(warmup_s=0.1, round_s=0.3, rounds=2, quick=True)


def sync_one_thread(producer: Producer) -> RoundFn:
    def run(seconds: float) -> tuple[int, int, float]:
        sent, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            producer.send(TOPIC, BODY, tags="TagA")
            sent += 1
        return sent, sent, time.perf_counter() - begin

    return run


def async_one_thread(producer: Producer) -> RoundFn:
    def run(seconds: float) -> tuple[int, int, float]:
        pending: deque[Future] = deque()
        sent, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            for _ in range(64):
                if len(pending) >= WINDOW:
                    pending.popleft().result()
                pending.append(producer.send_async(TOPIC, BODY, tags="TagA"))
            sent += 64
        for future in pending:
            future.result()
        return sent, sent, time.perf_counter() - begin

    return run


def sync_threads(producer: Producer) -> RoundFn:
    def run(seconds: float) -> tuple[int, int, float]:
        counts = [0] * THREADS
        begin = time.perf_counter()

        def sender(k: int) -> None:
            while time.perf_counter() - begin < seconds:
                producer.send(TOPIC, BODY, tags="TagA")
                counts[k] += 1

        threads = [threading.Thread(target=sender, args=(k,)) for k in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(counts), sum(counts), time.perf_counter() - begin

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(parser, default=DEFAULT, quick=QUICK)
    timing = timing_from_args(parser.parse_args(), default=DEFAULT, quick=QUICK)

    from rmq_spark.store import MessageStore, StoreConfig

    work = Path(tempfile.mkdtemp(prefix="single-send-"))
    with MessageStore.open(StoreConfig(work / "store")) as store:
        store.topics.create(TOPIC, queues=8)
    broker = broker_process(work / "store", work / "broker.log").start()
    plain = Producer(broker.endpoint, config=ProducerConfig())
    batched = Producer(broker.endpoint, config=ProducerConfig(auto_batch=True))
    try:
        cases = [
            ("send, 1 thread (baseline)", "off", sync_one_thread(plain)),
            ("send, 1 thread", "on", sync_one_thread(batched)),
            ("send_async, 1 thread", "off", async_one_thread(plain)),
            ("send_async, 1 thread", "on", async_one_thread(batched)),
            (f"send, {THREADS} threads", "off", sync_threads(plain)),
            (f"send, {THREADS} threads", "on", sync_threads(batched)),
        ]
        meters = [CpuMeter(broker.pid) for _ in cases]
        contenders = [meter.wrap(run) for (_, _, run), meter in zip(cases, meters, strict=True)]
        print(
            "single-message sends, 100 B bodies, 8 queues, broker subprocess on loopback; "
            f"{timing.rounds} interleaved rounds of {timing.round_s:g} s per case after "
            f"{timing.warmup_s:g} s of warm-up; msgs/s is the median round"
            + (" (--quick: a check that it runs, not a measurement)" if timing.quick else "")
        )

        def forget_warm_up() -> None:
            for meter in meters:
                meter.reset()

        results = measure_rates(contenders, timing, after_warmup=forget_warm_up)
    finally:
        plain.close()
        batched.close()
        broker.stop()
    report(cases, results, meters)


def report(cases, results: list[RateResult], meters: list[CpuMeter]) -> None:
    table = Table(
        [
            ("case", "<"),
            ("auto_batch", "<"),
            ("msgs/s", ">"),
            ("spread", ">"),
            ("vs baseline", ">"),
            ("broker CPU us/msg", ">"),
        ]
    )
    baseline = results[0]
    for (name, auto, _), result, meter in zip(cases, results, meters, strict=True):
        broker_s_per_million, _ = meter.per_million()
        table.add(
            name,
            auto,
            fmt_int(result.median),
            f"{result.spread:.0%}",
            f"{paired_ratio(result, baseline):.1f}x",
            f"{broker_s_per_million:,.0f}" if result.units else "",
        )
    table.print()
    alone, many_async, many_threads = (paired_ratio(results[i], results[i - 1]) for i in (1, 3, 5))
    print(
        f"auto batching against the same case without it: one sending thread {alone:.2f}x, "
        f"send_async {many_async:.1f}x, {THREADS} sending threads {many_threads:.1f}x "
        "(median of per-round ratios)"
    )


if __name__ == "__main__":
    main()
