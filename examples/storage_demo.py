"""A tour of the rocketlite storage engine: write, read, filter, decode, crash, recover.

Run it with ``./dev demo`` (or ``python examples/storage_demo.py [--store DIR]``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.store import MessageStore, StoreConfig

TOPIC = "orders"
QUEUES = 4
TAGS = ["created", "paid", "shipped"]


def make_batches(total: int, batch: int = 1024) -> list[tuple[int, list, list, list]]:
    """Order events as (queue id, bodies, encoded properties, tags) batches."""
    batches = []
    for first in range(0, total, batch):
        n = min(batch, total - first)
        ids = range(first, first + n)
        tags = [TAGS[i % len(TAGS)] for i in ids]
        bodies = [f'{{"order": {i}, "amount": {i % 97}}}'.encode() for i in ids]
        props = [
            encode_properties({"TAGS": t, "KEYS": f"order-{i}"})
            for i, t in zip(ids, tags, strict=True)
        ]
        batches.append(((first // batch) % QUEUES, bodies, props, tags))
    return batches


def produce(store: MessageStore, total: int) -> float:
    """Append ``total`` order events spread over the queues; returns the seconds taken."""
    batches = make_batches(total)
    started = time.perf_counter()
    for queue_id, bodies, props, tags in batches:
        store.append(TOPIC, queue_id, bodies, props, tags=tags)
    return time.perf_counter() - started


def show_queues(store: MessageStore) -> None:
    print(f"  {'queue':>5} {'min':>8} {'max':>8}")
    for qid in range(QUEUES):
        print(f"  {qid:>5} {store.min_offset(TOPIC, qid):>8} {store.max_offset(TOPIC, qid):>8}")


def read_paid(store: MessageStore) -> None:
    """Tag-filtered read of queue 0, decoded to Arrow in one call."""
    result = store.get_messages(TOPIC, 0, 0, max_count=5, tag_codes=[tag_hash_code("paid")])
    batch = decode_records(result.data, result.record_starts(), result.sizes)
    print(f"  status {result.status.name}, nextBeginOffset {result.next_begin_offset}")
    table = batch.select(["queueOffset", "tags", "keys", "msgId"]).to_pylist()
    for row in table:
        print(
            f"  offset {row['queueOffset']:>5}  {row['tags']:<6} {row['keys']:<12} {row['msgId']}"
        )
    print(
        "  bodies:",
        pc.cast(batch.column("body"), "string").to_pylist()[:2],
        "...",
    )


def crash_and_recover(store_dir: Path) -> None:
    """Append from a child process, kill it with SIGKILL, then reopen and check."""
    child = (
        "import sys\n"
        "from rmq_spark.store import MessageStore, StoreConfig\n"
        f"s = MessageStore.open(StoreConfig({str(store_dir)!r}, flush_mode='SYNC'))\n"
        f"r = s.append({TOPIC!r}, 1, [b'written just before the crash'])\n"
        "print(r.first_queue_offset, flush=True)\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    acked = int(out.stdout.split()[0])
    print(f"  child acknowledged queue offset {acked} and was killed (exit {out.returncode})")
    with MessageStore.open(StoreConfig(store_dir)) as store:
        rep = store.recovery
        print(
            f"  recovery: abnormal={rep.abnormal}, scanned {rep.records_scanned} records "
            f"from offset {rep.scanned_from}, log ends at {rep.end_offset}"
        )
        result = store.get_messages(TOPIC, 1, acked, max_count=1)
        body = decode_records(result.data).column("body")[0].as_py()
        print(f"  queue 1 offset {acked} after recovery: {body!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, help="store directory (default: a temp dir)")
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    store_dir = args.store or Path(tempfile.mkdtemp(prefix="rocketlite-demo-"))

    print(f"store directory: {store_dir}")
    with MessageStore.open(StoreConfig(store_dir, commitlog_segment_bytes=16 << 20)) as store:
        if store.topics.find(TOPIC) is None:
            store.topics.create(TOPIC, queues=QUEUES)
        seconds = produce(store, args.messages)
        print(
            f"\n1. appended {args.messages:,} messages in {seconds:.2f} s "
            f"({args.messages / seconds:,.0f} msgs/s, ASYNC flush)"
        )
        show_queues(store)
        print("\n2. first 'paid' orders in queue 0 (tag filter on the consume queue):")
        read_paid(store)
        store.offsets.commit("billing", TOPIC, {0: 300, 1: 120})
        print("\n3. group 'billing' committed offsets:", store.offsets.query("billing", TOPIC))
        stats = store.stats()
        print(
            f"   commit log: {stats['commitlog_segments']} segment(s), "
            f"{stats['commitlog_max_offset']:,} bytes"
        )
    print("\n4. crash test: a writer is killed with SIGKILL right after an acknowledged append")
    crash_and_recover(store_dir)
    with MessageStore.open(StoreConfig(store_dir)) as store:
        print(
            "\n5. after a clean restart, offsets of 'billing' are still there:",
            store.offsets.query("billing", TOPIC),
        )
    if args.store is None:
        shutil.rmtree(store_dir)


if __name__ == "__main__":
    main()
