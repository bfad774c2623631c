"""What metrics cost: single sends over remoting with the HTTP port on and scraped, beside
the same sends with it off; and how long one scrape of a large broker takes.

    python bench/observability.py [--quick] [--rounds N] [--round-seconds S]
        [--topics N] [--groups N] [--topics-per-group N] [--scrape-every S]

1. **Sends.** Two rocketlite brokers on free 127.0.0.1 ports, each with its remoting port:
   one with ``--http-port`` and a scraper in this process fetching ``/metrics`` every
   ``--scrape-every`` seconds (1 s: 15 to 60 times Prometheus' usual rate), one without
   an HTTP port (the baseline). 8 threads of rocketlite's RemotingClient send one 100-byte
   message a call (SEND_MESSAGE_V2, as Java's DefaultMQProducer.send does) for
   ``--round-seconds``, to one broker then the other, the order swapped every round. It
   reports sends/s of each (median and min..max of rounds), the median of per-round
   ratios on/off (target: at most 3% slower, i.e. >= 0.97x) and each broker's CPU per
   send.
2. **A scrape of a large broker.** A broker with ``--topics`` topics of 8 queues, one
   message in each queue, and ``--groups`` consumer groups, each having committed offset 0
   of every queue of ``--topics-per-group`` topics (so every lag series is non-zero and
   its age is looked up). It times ``GET /metrics`` (median and min..max of 10, after one
   untimed), beside ``GET /readyz`` on the same connection (the HTTP floor), and prints the
   samples and bytes of one scrape. Target: under 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    SEND_THREADS,
    Timing,
    add_timing_args,
    compare_sends,
    ready_address,
    remoting_broker,
    report_sends,
    timing_from_args,
)

from rmq_spark.client import Admin, PullConsumer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue

DEFAULT = Timing(warmup_s=3.0, round_s=6.0, rounds=5)
QUICK = Timing(warmup_s=0.0, round_s=2.0, rounds=1, quick=True)
THREADS = 8
QUEUES = 4
SIZE = 100
TARGET_SENDS = 0.97
TARGET_SCRAPE_MS = 100.0


class Scraper:
    """Fetches /metrics every ``every_s`` seconds on one connection until stopped."""

    def __init__(self, http_address: str, every_s: float) -> None:
        host, port = http_address.rsplit(":", 1)
        self._conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self._every_s = every_s
        self._stop = threading.Event()
        self.scrapes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            fetch(self._conn, "/metrics")
            self.scrapes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()


def fetch(conn: http.client.HTTPConnection, path: str) -> bytes:
    conn.request("GET", path)
    answer = conn.getresponse()
    body = answer.read()
    if answer.status != 200:
        raise SystemExit(f"GET {path} answered {answer.status}: {body[:200]!r}")
    return body


def bench_sends(work: Path, timing: Timing, scrape_every_s: float) -> None:
    off = remoting_broker(work, "metrics-off")
    on = remoting_broker(work, "metrics-on", "--http-port", "0")
    scraper = None
    try:
        scraper = Scraper(ready_address(on, "http"), scrape_every_s)
        rounds = compare_sends([off, on], timing)
        print(
            f"\nsingle sends over remoting, {SEND_THREADS} threads, 100 B, {timing.rounds} "
            f"interleaved round(s) of {timing.round_s:g} s; /metrics scraped every "
            f"{scrape_every_s:g} s on the metrics broker ({scraper.scrapes} scrapes)"
        )
        labels = {"metrics-off": "no HTTP port (baseline)", "metrics-on": "--http-port, scraped"}
        report_sends(rounds, labels, TARGET_SENDS)
    finally:
        if scraper is not None:
            scraper.stop()
        on.stop()
        off.stop()


def bench_scrape(work: Path, topics: int, groups: int, per_group: int) -> None:
    broker = remoting_broker(work, "big", "--http-port", "0")
    try:
        began = time.perf_counter()
        names = [f"T{n:05d}" for n in range(topics)]
        with Admin(broker.endpoint) as admin:
            for name in names:
                admin.create_topic(name, queues=8)
        with RemotingClient(ready_address(broker, "remoting")) as client:
            for name in names:
                client.route(name)
                for queue_id in range(8):
                    client.send(MessageQueue(name, "big", queue_id), [b"m"], [{}])
        for g in range(groups):
            chosen = [names[(g * per_group + k) % topics] for k in range(per_group)]
            with PullConsumer(broker.endpoint, group=f"G{g:04d}") as consumer:
                consumer.commit(
                    offsets={MessageQueue(t, "big", q): 0 for t in chosen for q in range(8)}
                )
        print(
            f"\nscrape of a broker with {topics} topics x 8 queues (one message each) and "
            f"{groups} groups each committed on {per_group} topics "
            f"(set up in {time.perf_counter() - began:.0f} s)"
        )
        host, port = ready_address(broker, "http").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = fetch(conn, "/metrics")  # untimed
        scrape, ready = [], []
        for _ in range(10):
            t0 = time.perf_counter()
            fetch(conn, "/readyz")
            t1 = time.perf_counter()
            body = fetch(conn, "/metrics")
            t2 = time.perf_counter()
            ready.append((t1 - t0) * 1000)
            scrape.append((t2 - t1) * 1000)
        conn.close()
        samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        median = statistics.median(scrape)
        print("| request | ms (median of 10, min..max) |")
        print("|---|---|")
        print(
            f"| GET /readyz (the floor) | {statistics.median(ready):.1f} "
            f"({min(ready):.1f}..{max(ready):.1f}) |"
        )
        print(f"| GET /metrics | {median:.1f} ({min(scrape):.1f}..{max(scrape):.1f}) |")
        verdict = "met" if median < TARGET_SCRAPE_MS else "MISSED"
        print(
            f"one scrape: {samples:,} samples, {len(body) / 1e6:.1f} MB; "
            f"target < {TARGET_SCRAPE_MS:g} ms: {verdict}"
        )
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(parser, default=DEFAULT, quick=QUICK)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--topics-per-group", type=int, default=1)
    parser.add_argument("--scrape-every", type=float, default=1.0)
    args = parser.parse_args(argv)
    timing = timing_from_args(args, default=DEFAULT, quick=QUICK)
    if args.quick:
        args.topics, args.groups = 50, 10
    print(
        f"observability bench: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        + (" (--quick: a check that it runs, not a measurement)" if timing.quick else ""),
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="bench-observability-"))
    try:
        bench_sends(work, timing, args.scrape_every)
        bench_scrape(work, args.topics, args.groups, args.topics_per_group)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
