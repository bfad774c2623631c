"""Exactly-once writes through ``nameServer``: what the query's checkpoint records of each
micro-batch, and the decisions taken from it.

The tasks send their rows as RocketMQ half messages; the driver's commit records the batch
(its decision and every half message's coordinates) in
``<checkpointLocation>/rocketlite-sink/batch-<id>.json`` before it ends any of them, and
marks the record ended once every one is committed. The files are durable JSON with a
backup copy (:mod:`rmq_spark.durable_json`), as the broker keeps its own sink records.

Two decisions are pure and tested as tables here:

* :func:`check_answer`: a broker asks about a half message (CHECK_TRANSACTION_STATE); the
  record says COMMIT (its batch is committed and not every half is ended yet: finish the
  batch), ROLLBACK (a failed or replaced attempt's row, or a copy of a row already
  committed) or UNKNOW (its batch is still being written).
* :func:`still_to_end`: on a replay, the recorded half messages whose rows are not yet in
  their queue: the only ones to commit (RocketMQ 4.9 commits a half message again if
  asked again, so a row would show twice).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.client.remoting.transactions import HalfRef
from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.sink.options import local_checkpoint
from rmq_spark.sink.send import BATCH_PROPERTY

__all__ = [
    "BATCH_PROPERTY",
    "COMMIT",
    "ROLLBACK",
    "UNKNOW",
    "BatchRecord",
    "RecordView",
    "SinkState",
    "check_answer",
    "still_to_end",
]

#: the checkpoint's subdirectory of the sink's records
STATE_DIR = "rocketlite-sink"
#: ended records kept (the newest); older ones are removed
KEEP_ENDED = 10
FORMAT = 1

COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
UNKNOW = "UNKNOW"  # RocketMQ's spelling

_BATCH_FILE = re.compile(r"^batch-(\d+)\.json$")


@dataclass(frozen=True)
class RecordView:
    """What a check needs of one batch's record."""

    ended: bool
    keys: frozenset[str] = frozenset()


def check_answer(records: Mapping[int, RecordView], batch: int | None, key: str) -> str:
    """The answer to a broker's check of half message ``key`` of micro-batch ``batch``
    (None: the message names no batch of this sink), given the records kept."""
    if batch is None:
        return UNKNOW
    record = records.get(batch)
    if record is None:
        if records and batch < max(records):
            # a later batch is recorded, so this one ended without a record of this row:
            # aborted, or replaced by its replay
            return ROLLBACK
        return UNKNOW  # still being written: no decision yet
    if record.ended:
        # every recorded row is in its queue: this is a copy the broker made while
        # checking, or a row of an attempt that was not recorded
        return ROLLBACK
    if key not in record.keys:
        return ROLLBACK  # a failed task attempt's, or the first run's of a replayed batch
    return COMMIT


def still_to_end(halves: Sequence[HalfRef], visible: Collection[str]) -> list[HalfRef]:
    """The recorded half messages to commit, in order: those whose row (by its unique key)
    is not in its queue yet, each once."""
    done = set(visible)
    todo = []
    for half in halves:
        if half.key in done:
            continue
        done.add(half.key)
        todo.append(half)
    return todo


@dataclass
class BatchRecord:
    sink_id: str
    batch: int
    halves: list[HalfRef] = field(default_factory=list)
    #: each broker's address when the batch was recorded
    brokers: dict[str, str] = field(default_factory=dict)
    #: (topic, broker, queue) -> the queue's end before any half message was committed
    queue_ends: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: rows of one queue are committed in order (the write has a shardingKey or queueId)
    ordered: bool = False
    ended: bool = False

    def view(self) -> RecordView:
        return RecordView(self.ended, frozenset(h.key for h in self.halves))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "sinkId": self.sink_id,
            "batch": self.batch,
            "decision": "commit",
            "ended": self.ended,
            "ordered": self.ordered,
            "brokers": dict(sorted(self.brokers.items())),
            "queueEnds": [[t, b, q, end] for (t, b, q), end in sorted(self.queue_ends.items())],
            # an ended record needs no coordinates: every check of its rows is answered
            # with a rollback
            "halves": [] if self.ended else [h.to_json() for h in self.halves],
        }

    @classmethod
    def from_json(cls, data: Any) -> BatchRecord:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a rocketlite sink record of format {FORMAT}")
        return cls(
            sink_id=str(data["sinkId"]),
            batch=int(data["batch"]),
            halves=[HalfRef.from_json(item) for item in data["halves"]],
            brokers={str(k): str(v) for k, v in data["brokers"].items()},
            queue_ends={(str(t), str(b), int(q)): int(end) for t, b, q, end in data["queueEnds"]},
            ordered=bool(data.get("ordered", False)),
            ended=bool(data["ended"]),
        )


def state_path(checkpoint_location: str) -> Path:
    """The sink's directory in a checkpoint given as a local path or a file: URI."""
    return Path(local_checkpoint(checkpoint_location)) / STATE_DIR


class SinkState:
    """The records of one sink in its checkpoint directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._cache: dict[int, tuple[float, BatchRecord]] = {}

    def _file(self, batch: int) -> Path:
        return self.path / f"batch-{batch}.json"

    def batches(self) -> list[int]:
        found = []
        for name in os.listdir(self.path):
            match = _BATCH_FILE.match(name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def load(self, batch: int) -> BatchRecord | None:
        path = self._file(batch)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            mtime = -1.0
        cached = self._cache.get(batch)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        data, source = read_json_with_backup(path, validate=BatchRecord.from_json)
        if source == "none":
            return None
        record = BatchRecord.from_json(data)
        self._cache[batch] = (mtime, record)
        return record

    def views(self) -> dict[int, RecordView]:
        views = {}
        for batch in self.batches():
            record = self.load(batch)
            if record is not None:
                views[batch] = record.view()
        return views

    def save(self, record: BatchRecord) -> None:
        write_json_atomic(
            self._file(record.batch), record.to_json(), validate=BatchRecord.from_json
        )

    def prune(self) -> None:
        """Remove ended records but the newest KEEP_ENDED (never one still to end)."""
        ended = [b for b in self.batches() if (r := self.load(b)) is not None and r.ended]
        for batch in ended[:-KEEP_ENDED]:
            for path in (self._file(batch), Path(str(self._file(batch)) + ".bak")):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._cache.pop(batch, None)

    def unended(self) -> list[int]:
        return [b for b in self.batches() if (r := self.load(b)) is not None and not r.ended]

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Held while half messages of this sink are committed: by the driver's commit, or
        by the process answering the brokers' checks; never both at once."""
        with open(self.path / "end.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
