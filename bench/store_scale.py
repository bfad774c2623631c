"""Start-up of a broker on a store of many queues, under an ordinary file limit, beside
Apache RocketMQ's broker on the same store directories.

    python bench/store_scale.py                     # N = 100, 1,000 and 10,000 topics
    python bench/store_scale.py --quick             # N = 100 and 1,000, one round
    ROCKETMQ_HOME=/path/to/rocketmq-4.9 python bench/store_scale.py   # with Apache RocketMQ

For each N a child process writes a store of N topics x 8 queues, one message in each queue
(128 MiB commit-log segments, RocketMQ's 300,000 entries per consume-queue file). Then, in
interleaved rounds (per round, each N: rocketlite, then Apache RocketMQ):

* ``rocketlite``: ``python -m rmq_spark.broker --remoting-port 0`` under a file limit of
  1,024 descriptors (soft and hard, as ``ulimit -n 1024`` sets them): the time until it
  prints its ready line, the descriptors it holds and its resident memory then, and the
  first send and the first pull (a message of the last queue written) over the remoting
  port after that;
* ``Apache``: RocketMQ's name server and broker (no file limit set: the JVM's own) on the
  same directory: the time until both listen and the broker registered (the ports accept,
  then RocketMQ's own 2 s wait), its descriptors and memory then, and the same first send
  and pull through the name server.

The baseline is Apache RocketMQ's; without ``ROCKETMQ_HOME`` (a build with ``lib/``) and
``java`` the Apache rows say skipped. It prints, per N and broker, the median of the rounds
and min..max, and start-up per 1,000 queues, with rocketlite's ratio to Apache.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _apache import ApacheRocketMQ, Java, interruptible, rocketmq_home
from _common import ServerProcess, Table, fmt_ratio

from rmq_spark.client import ClientConfig
from rmq_spark.client.connection import NO_RETRY
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue

QUEUES = 8
SEGMENT_BYTES = 128 << 20
FILE_LIMIT = 1024
#: how long a broker may take to start on the largest store before the run fails
READY_TIMEOUT_S = 300
FULL = (100, 1_000, 10_000)
QUICK = (100, 1_000)


def fill(store_dir: str, topics: int) -> None:
    """(In a child process.) N topics x 8 queues, one message in each."""
    from rmq_spark.durable_json import write_json_atomic
    from rmq_spark.store import MessageStore, StoreConfig
    from rmq_spark.store.mapped_file import raise_file_limit
    from rmq_spark.store.topics import FILE_NAME as TOPICS_FILE
    from rmq_spark.store.topics import TopicConfig, topic_table_to_json

    raise_file_limit()
    config = StoreConfig(store_dir, commitlog_segment_bytes=SEGMENT_BYTES)
    # The topic table written once (creating topics one by one rewrites it each time).
    config.config_dir.mkdir(parents=True, exist_ok=True)
    table = {topic_name(t): TopicConfig(topic_name(t), QUEUES, QUEUES) for t in range(topics)}
    write_json_atomic(config.config_dir / TOPICS_FILE, topic_table_to_json(table))
    store = MessageStore.open(config)
    for t in range(topics):
        name = topic_name(t)
        for q in range(QUEUES):
            store.append(name, q, [f"{name}/{q}".encode()], tags=["scale"])
    store.close()


def topic_name(t: int) -> str:
    return f"Scale{t:05d}"


@dataclass
class Start:
    ready_s: float
    descriptors: int
    rss_mb: float
    send_ms: float
    pull_ms: float


def process_figures(pid: int) -> tuple[int, float]:
    """(descriptors held, resident MB) of process ``pid`` now."""
    descriptors = len(os.listdir(f"/proc/{pid}/fd"))
    rss_kb = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return descriptors, rss_kb / 1024


def first_send_and_pull(address: str, broker: str, topics: int) -> tuple[float, float]:
    """(ms of the first send, ms of the first pull) to the last topic's last queue."""
    mq = MessageQueue(topic_name(topics - 1), broker, QUEUES - 1)
    with RemotingClient(address, ClientConfig(retry=NO_RETRY)) as client:
        started = time.perf_counter()
        client.send(mq, [b"after start"])
        sent = time.perf_counter()
        answer = client.pull(mq, 0, group="scale-bench")
        pulled = time.perf_counter()
    if answer.data is None or not len(answer.data):
        raise SystemExit(f"the pull of {mq} after start found nothing")
    return (sent - started) * 1000, (pulled - sent) * 1000


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


def start_rocketlite(store: Path, log: Path, topics: int) -> Start:
    argv = [sys.executable, "-m", "rmq_spark.broker", "--store", str(store), "--port", "0"]
    argv += ["--remoting-port", "0", "--log-level", "WARNING", "--name", "broker-a"]
    argv += ["--commitlog-segment-bytes", str(SEGMENT_BYTES)]
    server = ServerProcess(
        "rocketlite broker", argv, log, preexec=limit_files, ready_timeout_s=READY_TIMEOUT_S
    )
    started = time.perf_counter()
    server.start()
    ready = time.perf_counter() - started
    try:
        descriptors, rss = process_figures(server.pid)
        address = server.ready_line.split(" remoting=")[1].split()[0]
        send_ms, pull_ms = first_send_and_pull(address, "broker-a", topics)
    finally:
        server.stop()
    return Start(ready, descriptors, rss, send_ms, pull_ms)


def start_apache(java: Java, store: Path, topics: int) -> Start | str:
    """Apache RocketMQ on ``store``; the reason when it does not start (its last log
    lines: with tens of thousands of queues it maps more files than the kernel's
    vm.max_map_count allows)."""
    conf = {"mappedFileSizeCommitLog": SEGMENT_BYTES, "autoCreateTopicEnable": "false"}
    apache = ApacheRocketMQ(java, store=store, conf=conf)
    started = time.perf_counter()
    try:
        apache.start()
    except SystemExit as exc:
        apache.stop()
        reason = " ".join(str(exc).split())[-300:]
        print(f"Apache RocketMQ did not start on {topics:,} topics: {reason}", flush=True)
        return "did not start"
    ready = time.perf_counter() - started
    try:
        broker_pid = apache.processes[-1].pid
        descriptors, rss = process_figures(broker_pid)
        send_ms, pull_ms = first_send_and_pull(apache.namesrv, "broker-a", topics)
    finally:
        apache.stop()
    return Start(ready, descriptors, rss, send_ms, pull_ms)


def median_span(values: list[float], fmt: str) -> tuple[str, str]:
    return format(statistics.median(values), fmt), (
        f"{format(min(values), fmt)}..{format(max(values), fmt)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 100 and 1,000, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topics", help="comma-separated N (default 100,1000,10000)")
    parser.add_argument("--fill", nargs=2, metavar=("DIR", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fill:
        fill(args.fill[0], int(args.fill[1]))
        return 0
    sizes = tuple(int(n) for n in args.topics.split(",")) if args.topics else None
    sizes = sizes or (QUICK if args.quick else FULL)
    rounds = 1 if args.quick else args.rounds
    home = rocketmq_home() if shutil.which("java") else None
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    with interruptible(), contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        java = Java(home, work / "java") if home is not None else None
        stores = {}
        for n in sizes:
            stores[n] = work / f"store-{n}"
            began = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--fill", str(stores[n]), str(n)], check=True)
            print(
                f"wrote {n:,} topics x {QUEUES} queues in {time.perf_counter() - began:.1f} s",
                flush=True,
            )
        results: dict[tuple[int, str], list[Start | str]] = {}
        for r in range(rounds):
            for n in sizes:
                log = work / f"rocketlite-{n}.log"
                results.setdefault((n, "rocketlite"), []).append(
                    start_rocketlite(stores[n], log, n)
                )
                if java is not None:
                    results.setdefault((n, "Apache"), []).append(start_apache(java, stores[n], n))
            print(f"round {r + 1} of {rounds} done", flush=True)
        report(sizes, results, apache=java is not None)
    return 0


def report(sizes, results, *, apache: bool) -> None:
    table = Table(
        [
            ("N topics", ">"),
            ("queues", ">"),
            ("broker", "<"),
            ("start s", ">"),
            ("min..max", ">"),
            ("s per 1k queues", ">"),
            ("fds", ">"),
            ("RSS MB", ">"),
            ("1st send ms", ">"),
            ("1st pull ms", ">"),
            ("start vs Apache", ">"),
        ]
    )
    for n in sizes:
        queues = n * QUEUES
        base = [r for r in results.get((n, "Apache"), []) if isinstance(r, Start)] or None
        for name in ("rocketlite", "Apache"):
            everything = results.get((n, name))
            runs = [r for r in everything or [] if isinstance(r, Start)]
            if not runs:
                said = "skipped" if everything is None else str(everything[0])
                table.add(f"{n:,}", f"{queues:,}", name, said, "", "", "", "", "", "", "")
                continue
            ready, span = median_span([s.ready_s for s in runs], ".2f")
            per_k = statistics.median(s.ready_s for s in runs) / queues * 1000
            vs = ""
            if base is not None:
                vs = fmt_ratio(
                    statistics.median(s.ready_s for s in runs)
                    / statistics.median(s.ready_s for s in base)
                )
            table.add(
                f"{n:,}",
                f"{queues:,}",
                name + (f" (ulimit -n {FILE_LIMIT})" if name == "rocketlite" else ""),
                ready,
                span,
                f"{per_k:.3f}",
                f"{statistics.median(s.descriptors for s in runs):,.0f}",
                f"{statistics.median(s.rss_mb for s in runs):,.0f}",
                f"{statistics.median(s.send_ms for s in runs):.1f}",
                f"{statistics.median(s.pull_ms for s in runs):.1f}",
                vs,
            )
        table.rule()
    table.print()
    if not apache:
        print(
            "Apache RocketMQ: skipped (set ROCKETMQ_HOME to an Apache RocketMQ 4.9 build with "
            "lib/, and put java on PATH, to compare)"
        )


if __name__ == "__main__":
    sys.exit(main())
