"""Send latency of a broker that holds many waiting calls, next to the same broker idle.

    python bench/broker_load.py            # 10,000 held pulls + 1,000 watch streams
    python bench/broker_load.py --quick    # 500 + 50, one round

One broker subprocess serves three cases, interleaved round by round so that drifting
conditions hit them alike:

* ``idle``: nothing else is connected;
* ``held``: a loader process keeps ``--polls`` long polls on an idle topic of ``--queues``
  queues and ``--watches`` WatchConsumerChanges streams open (each re-issued as it ends);
* ``push``: a real PushConsumer (our client) in its own process consumes that idle topic,
  so every one of its queues has a long poll held.

In each case one producer sends single 100-byte messages to another topic, one call at a
time, and the bench prints p50, p99 and the ratio of each case's p99 to the idle p99 of
the same round (median and spread over rounds). The loader is also what this script runs
as with ``--loader ENDPOINT``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Table, broker_process, fmt_ratio, percentile, stop_process

from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    groups_pb2,
    groups_pb2_grpc,
    messaging_pb2,
    messaging_pb2_grpc,
)

IDLE_TOPIC = "Idle"
SEND_TOPIC = "Orders"
LOADER_CHANNELS = 16
BODY = b"x" * 100


# -- the loader: holds waiting calls open until it is stopped ------------------------------


async def _hold_pulls(stub, queues: int, index: int) -> None:
    queue = common_pb2.MessageQueue(topic=IDLE_TOPIC, broker_name="broker-a", queue_id=0)
    queue.queue_id = index % queues
    request = messaging_pb2.PullMessagesRequest(queue=queue, suspend_timeout_ms=30_000)
    while True:
        await stub.PullMessages(request, timeout=60)


async def _hold_watch(stub, index: int) -> None:
    request = groups_pb2.WatchConsumerChangesRequest(consumer_group=f"watchers-{index % 50}")
    while True:
        async for _ in stub.WatchConsumerChanges(request):
            pass


async def _load(endpoint: str, polls: int, watches: int, queues: int) -> None:
    # Separate connections (no shared subchannel), as many clients would have.
    channels = [
        grpc.aio.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(LOADER_CHANNELS)
    ]
    messaging = [messaging_pb2_grpc.MessagingServiceStub(c) for c in channels]
    groups = [groups_pb2_grpc.GroupServiceStub(c) for c in channels]
    tasks = [
        asyncio.create_task(_hold_pulls(messaging[i % LOADER_CHANNELS], queues, i))
        for i in range(polls)
    ]
    tasks += [
        asyncio.create_task(_hold_watch(groups[i % LOADER_CHANNELS], i)) for i in range(watches)
    ]
    print("loader started", flush=True)
    await asyncio.gather(*tasks)


def run_loader(args: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    asyncio.run(_load(args.loader, args.polls, args.watches, args.queues))


def run_push_member(args: argparse.Namespace) -> None:
    from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig

    consumer = PushConsumer("bench-push", args.push_member, config=PushConsumerConfig())
    consumer.subscribe(IDLE_TOPIC, "*")
    consumer.register_listener(lambda messages, context: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    print("push consumer started", flush=True)
    while not stopping:
        time.sleep(0.1)
    consumer.shutdown()


# -- the bench -----------------------------------------------------------------------------


class Broker:
    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)

    def stats(self) -> admin_pb2.ServerStats:
        return self.admin.GetBrokerInfo(admin_pb2.GetBrokerInfoRequest()).server_stats

    def wait_for(self, predicate, what: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.stats()):
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}: {self.stats()}")
            time.sleep(0.2)

    def send_latencies(self, count: int) -> list[float]:
        request = messaging_pb2.SendMessagesRequest(
            topic=SEND_TOPIC, messages=[messaging_pb2.Message(body=BODY)]
        )
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            self.messaging.SendMessages(request, timeout=60)
            latencies.append(time.perf_counter() - started)
        return latencies


def start_helper(argv: list[str], ready: str, log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, *argv], stdout=subprocess.PIPE, stderr=log
        )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if ready not in line:
        process.kill()
        raise SystemExit(f"{argv[0]} did not start: {log_path.read_text()[-2000:]}")
    return process


def run_bench(args: argparse.Namespace) -> None:
    polls, watches = (500, 50) if args.quick else (args.polls, args.watches)
    sends = 100 if args.quick else args.sends
    rounds = 1 if args.quick else args.rounds
    work = Path(tempfile.mkdtemp(prefix="rocketlite-load-"))
    server = broker_process(work / "store", work / "broker.log").start()
    broker = Broker(server.endpoint)
    try:
        for topic, queues in ((IDLE_TOPIC, args.queues), (SEND_TOPIC, 4)):
            broker.admin.CreateTopic(
                admin_pb2.CreateTopicRequest(
                    topic=topic, read_queue_nums=queues, write_queue_nums=queues
                )
            )
        broker.send_latencies(sends)  # warm-up
        results: dict[str, list[list[float]]] = {"idle": [], "held": [], "push": []}
        print(
            f"broker {server.endpoint}: {rounds} rounds of {sends} sends per case; held = "
            f"{polls:,} pulls on {args.queues} queues + {watches:,} watch streams; push = one "
            f"PushConsumer on the {args.queues}-queue topic",
            flush=True,
        )
        loader_argv = ["--loader", server.endpoint, "--polls", str(polls)]
        loader_argv += ["--watches", str(watches), "--queues", str(args.queues)]
        for round_no in range(rounds):
            results["idle"].append(broker.send_latencies(sends))

            loader = start_helper(loader_argv, "loader started", work / "loader.log")
            broker.wait_for(
                lambda s: s.held_pulls >= polls and s.watch_streams >= watches, "held calls"
            )
            results["held"].append(broker.send_latencies(sends))
            stop_process(loader, 60)
            broker.wait_for(lambda s: s.held_pulls == 0 and s.watch_streams == 0, "release")

            member = start_helper(
                ["--push-member", server.endpoint], "push consumer started", work / "push.log"
            )
            broker.wait_for(lambda s: s.held_pulls >= args.queues, "push consumer's pulls")
            results["push"].append(broker.send_latencies(sends))
            stop_process(member, 60)
            broker.wait_for(lambda s: s.held_pulls == 0, "push consumer release")
            print(f"  round {round_no + 1} done", flush=True)
    finally:
        broker.channel.close()
        server.stop()
    report(results)


def report(results: dict[str, list[list[float]]]) -> None:
    table = Table(
        [
            ("case", "<"),
            ("p50 ms", ">"),
            ("p99 ms", ">"),
            ("p99 / idle p99 (median)", ">"),
            ("spread of that ratio", ">"),
        ]
    )
    idle_p99 = [percentile(r, 0.99) for r in results["idle"]]
    for case, rounds in results.items():
        p50 = statistics.median(percentile(r, 0.5) for r in rounds) * 1000
        p99s = [percentile(r, 0.99) for r in rounds]
        ratios = [p / i for p, i in zip(p99s, idle_p99, strict=True)]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        table.add(
            case,
            f"{p50:.2f}",
            f"{statistics.median(p99s) * 1000:.2f}",
            fmt_ratio(statistics.median(ratios)),
            spread,
        )
    table.print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="500 pulls, 50 watches, 100 sends, 1 round"
    )
    parser.add_argument("--polls", type=int, default=10_000)
    parser.add_argument("--watches", type=int, default=1_000)
    parser.add_argument("--queues", type=int, default=1_024)
    parser.add_argument("--sends", type=int, default=1_000, help="sends per case per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loader", metavar="ENDPOINT", help=argparse.SUPPRESS)
    parser.add_argument("--push-member", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loader:
        run_loader(args)
    elif args.push_member:
        run_push_member(args)
    else:
        run_bench(args)


if __name__ == "__main__":
    main()
