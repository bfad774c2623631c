"""How long a broker takes to serve again after a crash, with a full commit-log segment.

    python bench/restart_time.py            # one full 1 GiB segment of 1 KiB messages
    python bench/restart_time.py --quick    # an 8 MiB segment

A child process fills a store (default geometry: 1 GiB segments) through the store API and
dies without closing it (``os._exit``: the ``abort`` marker stays, as after a SIGKILL), with
checkpoints turned down so recovery has to scan the whole segment. The bench then starts
``python -m rmq_spark.broker`` on that store and times it until the broker prints its ready
line, then stops it cleanly and times a clean restart as the baseline. Each is repeated
(interleaved: crash, clean, crash, clean, ...) and the median and spread are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Table, broker_process, fmt_ratio

MESSAGE_BYTES = 1024
BATCH = 1024


def fill_and_crash(store_dir: str, segment_bytes: int) -> None:
    """Fill one commit-log segment (almost) and exit without closing the store."""
    from rmq_spark.store import MessageStore
    from rmq_spark.store.config import StoreConfig

    config = StoreConfig(
        store_dir,
        commitlog_segment_bytes=segment_bytes,
        checkpoint_interval_ms=3_600_000,  # no checkpoint after the first: scan it all
    )
    store = MessageStore.open(config)
    store.topics.create("Filled", 8)
    bodies = [os.urandom(MESSAGE_BYTES - 200)] * BATCH
    batch_bytes = BATCH * MESSAGE_BYTES
    n = 0
    while store.commitlog.max_offset + 2 * batch_bytes < segment_bytes:
        store.append("Filled", n % 8, bodies, tags=["T"] * BATCH)
        n += 1
    store.commitlog.flush()
    print(f"filled {store.commitlog.max_offset:,} bytes in {n * BATCH:,} messages", flush=True)
    os._exit(0)


def time_start(store: Path, log: Path, segment_bytes: int) -> float:
    server = broker_process(store, log)
    server.argv += ["--commitlog-segment-bytes", str(segment_bytes)]
    started = time.perf_counter()
    server.start()
    elapsed = time.perf_counter() - started
    server.stop()
    return elapsed


def crash_copy(store: Path, crashed: Path) -> None:
    """The crashed store again: a restart recovers and so changes it."""
    shutil.rmtree(crashed, ignore_errors=True)
    shutil.copytree(store, crashed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="an 8 MiB segment, 2 rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--segment-bytes", type=int, default=1 << 30, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        fill_and_crash(args.fill, args.segment_bytes)
        return
    segment = (8 << 20) if args.quick else args.segment_bytes
    rounds = 2 if args.quick else args.rounds
    work = Path(tempfile.mkdtemp(prefix="rocketlite-restart-"))
    try:
        pristine = work / "pristine"
        filled = subprocess.run(
            [sys.executable, __file__, "--fill", str(pristine), "--segment-bytes", str(segment)],
            check=True,
            capture_output=True,
            text=True,
        )
        print(filled.stdout.strip(), f"(segment {segment >> 20} MiB)", flush=True)
        crashed, clean = work / "crashed", work / "clean"
        crash_copy(pristine, clean)
        time_start(clean, work / "clean.log", segment)  # recovered once: now it is clean
        times: dict[str, list[float]] = {"after a crash": [], "after a clean stop": []}
        for _ in range(rounds):
            crash_copy(pristine, crashed)
            times["after a crash"].append(time_start(crashed, work / "crashed.log", segment))
            times["after a clean stop"].append(time_start(clean, work / "clean.log", segment))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table([("restart", "<"), ("median s", ">"), ("min-max s", ">"), ("vs clean", ">")])
    base = statistics.median(times["after a clean stop"])
    for case, values in times.items():
        median = statistics.median(values)
        table.add(
            case, f"{median:.2f}", f"{min(values):.2f}-{max(values):.2f}", fmt_ratio(median / base)
        )
    table.print()


if __name__ == "__main__":
    main()
