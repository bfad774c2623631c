"""Offset commits per second against a broker subprocess, journaled (ASYNC and SYNC).

    python bench/offset_commits.py            # 8 threads x 8 queues per call
    python bench/offset_commits.py --quick

Each ``UpdateConsumerOffsets`` call commits 8 queues and returns once the change is in the
broker's offset journal (ASYNC: in the page cache; SYNC: fsynced, shared by concurrent
calls). The baseline, measured in the same rounds, is ``QueryConsumerOffsets`` of the same
8 queues: the same round trip with no journal, so the ratio is what durability costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Table, broker_process, fmt_int, fmt_ratio

from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    offsets_pb2,
    offsets_pb2_grpc,
)

THREADS = 8
QUEUES_PER_CALL = 8


def rate(stub_call, make_request, seconds: float) -> float:
    """Calls per second of ``THREADS`` threads calling in a loop for ``seconds``;
    ``make_request(thread, n)`` builds each call's request."""
    counts = [0] * THREADS
    stop = time.perf_counter() + seconds

    def loop(i: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            stub_call(make_request(i, n))
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def measure(flush: str, rounds: int, seconds: float) -> tuple[list[float], list[float]]:
    work = Path(tempfile.mkdtemp(prefix=f"rocketlite-commits-{flush}-"))
    server = broker_process(work / "store", work / "broker.log")
    server.argv += ["--flush", flush]
    server.start()
    channel = grpc.insecure_channel(server.endpoint)
    try:
        admin_pb2_grpc.AdminServiceStub(channel).CreateTopic(
            admin_pb2.CreateTopicRequest(topic="T", read_queue_nums=64, write_queue_nums=64)
        )
        stub = offsets_pb2_grpc.OffsetServiceStub(channel)
        queues = [
            [common_pb2.MessageQueue(topic="T", queue_id=t * QUEUES_PER_CALL + q)
             for q in range(QUEUES_PER_CALL)]
            for t in range(THREADS)
        ]  # fmt: skip
        # Every commit moves its queues on, so every one is a change the journal records.
        base = iter(range(1, 1 << 40))
        start = {t: next(base) * 1_000_000 for t in range(THREADS)}

        def commit(t: int, n: int):
            return offsets_pb2.UpdateConsumerOffsetsRequest(
                consumer_group="G",
                offsets=[offsets_pb2.QueueOffset(queue=q, offset=start[t] + n) for q in queues[t]],
            )

        def query(t: int, n: int):
            return offsets_pb2.QueryConsumerOffsetsRequest(consumer_group="G", queues=queues[t])

        rate(stub.UpdateConsumerOffsets, commit, 1.0)  # warm-up
        commit_rates, query_rates = [], []
        for round_no in range(rounds):
            pairs = [(stub.UpdateConsumerOffsets, commit, commit_rates),
                     (stub.QueryConsumerOffsets, query, query_rates)]  # fmt: skip
            for call, make, out in pairs if round_no % 2 == 0 else pairs[::-1]:
                out.append(rate(call, make, seconds))
        return commit_rates, query_rates
    finally:
        channel.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 0.3 s")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rounds, seconds = (2, 0.3) if args.quick else (args.rounds, args.seconds)
    table = Table(
        [("flush", "<"), ("commits/s (median)", ">"), ("queue commits/s", ">"),
         ("query baseline calls/s", ">"), ("ratio", ">"), ("spread", ">")]
    )  # fmt: skip
    for flush in ("ASYNC", "SYNC"):
        commit_rates, query_rates = measure(flush, rounds, seconds)
        ratios = sorted(c / q for c, q in zip(commit_rates, query_rates, strict=True))
        commits = sorted(commit_rates)[len(commit_rates) // 2]
        table.add(
            flush,
            fmt_int(commits),
            fmt_int(commits * QUEUES_PER_CALL),
            fmt_int(sorted(query_rates)[len(query_rates) // 2]),
            fmt_ratio(ratios[len(ratios) // 2]),
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}",
        )
    print(f"{THREADS} threads, {QUEUES_PER_CALL} queues per call, {rounds} x {seconds:g} s")
    table.print()


if __name__ == "__main__":
    main()
