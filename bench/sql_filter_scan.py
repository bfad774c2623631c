"""The task-side cost of option ``sqlFilter`` on short-circuit reads, without Spark or a
broker: CPU time per message scanned by :class:`ShortCircuitReader` applying a selector.

Builds the store of bench/spark_sql_filter.py (8 queues of 100-byte bodies, six properties
each, ``region = 'eu'`` on 1%) and reads every queue in this process: the reader maps the
files :meth:`MessageStore.range_files` names, as a task maps those a broker passes. Cases,
in interleaved rounds (every case once a round, after an untimed warm-up), each the median
CPU time (user + system) per message over the rounds, with the spread:

* ``memmem``: what a task does, the bytes ``region\\x01eu`` searched for with the C
  library's ``memmem`` where the records lie (in their properties alone when the records
  are of 1.5 KB or more), then only the records holding them decoded;
* ``find``: the same with Python's ``find`` (where ``memmem`` is not available, and what
  tasks did before);
* ``memmem, whole records``: the whole records searched whatever their size;
* ``no needle``: ``region = 'eu' OR amount < 0``, a selector naming no bytes a match must
  hold: every record's properties read and the selector applied to them.

Run: ``.venv/bin/python bench/sql_filter_scan.py [--quick] [--messages N] [--rounds R] [--body B]``
(``--body``: the bodies' size, 100 bytes by default).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_sql_filter
from spark_sql_filter import QUEUES, SELECTOR, TOPIC, build_store, matching

from rmq_spark.client.short_circuit import LocalRange
from rmq_spark.filter import stored
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.read.short_circuit import ShortCircuitReader
from rmq_spark.store import MessageStore, StoreConfig
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.short_circuit import MAX_FDS, range_answer


class InProcess:
    """Stands for a short-circuit connection: maps the files the store names for a range."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def open_range(
        self, mq: MessageQueue, start: int, end: int, group: str | None = None
    ) -> LocalRange:
        found = self.store.range_files(mq.topic, mq.queue_id, start, end, MAX_FDS)
        answer, fds = range_answer("bench", found)
        try:
            return LocalRange(answer, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        pass


def reader(store: MessageStore, selector: str) -> ShortCircuitReader:
    from rmq_spark.source.options import SourceOptions

    options = SourceOptions.parse(
        {"endpoints": "127.0.0.1:1", "topic": TOPIC, "sqlFilter": selector}, False
    )
    columns = ("body", "queueOffset", "properties")
    return ShortCircuitReader(InProcess(store), None, options, columns)  # type: ignore[arg-type]


def scan(store: MessageStore, read: ShortCircuitReader) -> int:
    rows = 0
    for qid in range(QUEUES):
        mq = MessageQueue(TOPIC, "bench", qid)
        queue_range = QueueRange(mq, store.min_offset(TOPIC, qid), store.max_offset(TOPIC, qid))
        rows += sum(batch.num_rows for batch in read.read_range(queue_range))
    return rows


def cpu_seconds(run: Callable[[], int], expected: int) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF)
    rows = run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert rows == expected, (rows, expected)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=800_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="16,000 messages, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 16_000, 1
    messages = args.messages // (QUEUES * 100) * QUEUES * 100
    memmem = stored._MEMMEM
    if memmem is None:
        sys.exit("this C library has no memmem: nothing to compare")

    properties_only_from = stored.PROPERTIES_ONLY_FROM
    spark_sql_filter.BODY = args.body

    def searching(on: bool, whole: bool = False) -> None:
        stored._MEMMEM = memmem if on else None
        stored.PROPERTIES_ONLY_FROM = 1 << 62 if whole else properties_only_from

    with tempfile.TemporaryDirectory(prefix="sql-filter-scan-") as tmp:
        build_store(Path(tmp), messages)
        with MessageStore.open(StoreConfig(Path(tmp))) as store:
            wanted = matching(messages)
            needle, no_needle = reader(store, SELECTOR), reader(store, f"{SELECTOR} OR amount < 0")
            cases: dict[str, Callable[[], int]] = {
                "memmem": lambda: (searching(True), scan(store, needle))[1],
                "find": lambda: (searching(False), scan(store, needle))[1],
                "memmem, whole records": lambda: (searching(True, True), scan(store, needle))[1],
                "no needle": lambda: (searching(True), scan(store, no_needle))[1],
            }
            for run in cases.values():  # warm-up
                cpu_seconds(run, wanted)
            seconds: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, run in cases.items():
                    seconds[name].append(cpu_seconds(run, wanted))
            searching(True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{messages:,} messages of {args.body} B, {args.rounds} rounds, load average {load}")
    print("| case | CPU µs per message (median) | spread |")
    print("|---|---|---|")
    for name, values in seconds.items():
        per = [v / messages * 1e6 for v in values]
        print(f"| {name} | {statistics.median(per):.3f} | {min(per):.3f}-{max(per):.3f} |")
    ratios = [a / b for a, b in zip(seconds["memmem"], seconds["find"], strict=True)]
    print(f"memmem / find, per round: {statistics.median(ratios):.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
