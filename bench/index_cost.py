"""What the message index costs the write path: appends with the index on, against the same
appends to a store without it (``message_index=False``, the baseline), in one process.

The index is built by a thread behind the writes (it reads what was appended, column-wise,
and adds each record's KEYS and UNIQ_KEY to RocketMQ's IndexFile). It never blocks an
append, but it shares the process's CPU and GIL with the appending thread, as it shares
the broker's with its senders. Every message carries TAGS, two KEYS and a UNIQ_KEY.

Cases run in interleaved rounds (off, on, on, off, ...), each on a fresh store; a round
appends ``--messages`` 100-byte messages in batches of 1024 to 8 queues, then waits for
the index to catch up (timed apart: how far behind the writes it was). Reported: median
msgs/s and spread of each case, the ratio on/off per round, and the catch-up time.

Run: ``.venv/bin/python bench/index_cost.py [--messages N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rmq_spark.store import MessageStore, StoreConfig

BATCH = 1024
QUEUES = 8


def one_round(root: Path, messages: int, index: bool) -> tuple[float, float]:
    """(msgs/s of the appends, seconds the index then took to catch up)."""
    config = StoreConfig(root, message_index=index, commitlog_segment_bytes=256 << 20)
    with MessageStore.open(config) as store:
        store.topics.create("bench", queues=QUEUES)
        body = bytes(range(100))
        batches = []
        for first in range(0, messages, BATCH):
            n = min(BATCH, messages - first)
            props = [
                b"TAGS\x01TagA\x02KEYS\x01order-%d user-%d\x02UNIQ_KEY\x01%032X\x02"
                % (i, i % 977, i)
                for i in range(first, first + n)
            ]
            batches.append(([body] * n, props))
        started = time.perf_counter()
        for i, (bodies, props) in enumerate(batches):
            store.append("bench", i % QUEUES, bodies, props, tags=["TagA"] * len(bodies))
        rate = messages / (time.perf_counter() - started)
        started = time.perf_counter()
        if store.index_builder is not None:
            store.index_builder.catch_up()
            assert store.query_messages("bench", f"order-{messages - 1}"), "last key not found"
        return rate, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    behind: list[float] = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="rmq-index-bench-") as work:
        one_round(Path(work) / "warm", 20_000, True)
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {}
            for index in order:
                rate, catch_up = one_round(Path(work) / f"r{r}-{index}", args.messages, index)
                got[index] = rate
                rates[index].append(rate)
                if index:
                    behind.append(catch_up)
            ratios.append(got[True] / got[False])
    print(f"{args.messages:,} x 100 B in batches of {BATCH}, {args.rounds} interleaved rounds")
    for index, name in ((False, "index off (baseline)"), (True, "index on")):
        values = rates[index]
        print(
            f"  {name:<22} {statistics.median(values):>11,.0f} msgs/s "
            f"({min(values):,.0f}-{max(values):,.0f})"
        )
    print(
        f"  on/off: {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
        f"the index caught up {statistics.median(behind) * 1000:.0f} ms after the last append"
    )


if __name__ == "__main__":
    main()
