"""The broker's pop state: every (group, topic, queue) that RocketMQ 5 consumers receive
from, kept in memory and recorded in an append-only journal (``config/popState.journal``)
before an answer leaves the broker, so in-flight messages, acks and attempts survive a
restart (a clean stop or a SIGKILL): an unacked message is delivered again, an acked one
never is.

Records (framed like the consumer-offset journal: length, CRC32, compact JSON):

    {"d": [group, topic, queue, next, [[offset, attempt, visibleAtMs, token], ...]]}
    {"a": [group, topic, queue, [offset, ...]]}          acked or dead-lettered
    {"c": [group, topic, queue, offset, visibleAtMs, token]}
    {"s": [group, topic, queue, base, next, [[offset, attempt, visibleAtMs, token], ...]]}

The journal is rewritten as one snapshot per queue when the broker opens it and whenever it
outgrows :data:`COMPACT_BYTES`. Offsets below a queue's ``base`` are the group's committed
offset, stored in the consumer-offset table as for every other consumer.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rmq_spark.broker.v2.pop import InFlight, PopQueue
from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.offsets.journal import OffsetJournal, frame, read_journal

log = logging.getLogger("rmq_spark.broker")

FILE_NAME = "popState.journal"
COMPACT_BYTES = 64 << 20

Key = tuple[str, str, int]  # (group, topic, queue id)


def _parse(payload: bytes) -> tuple[str, Any] | None:
    """A journal record: its kind and its JSON body (None: not one)."""
    try:
        document = json.loads(payload)
        ((kind, body),) = document.items()
        return kind, body
    except (ValueError, TypeError, AttributeError):
        return None


class PopStore:
    """Thread-safe table of :class:`PopQueue`; :meth:`queue` hands one out under its lock."""

    def __init__(self, config_dir: str | os.PathLike[str], *, sync: bool) -> None:
        self._path = Path(config_dir) / FILE_NAME
        self._sync = sync
        self._queues: dict[Key, PopQueue] = {}
        self._locks: dict[Key, threading.Lock] = {}
        self._table_lock = threading.Lock()
        self._replay()
        self._journal = self._compact()

    # -- access ------------------------------------------------------------------------

    @contextmanager
    def queue(self, key: Key, start: Callable[[], int]) -> Iterator[PopQueue]:
        """The queue's state under its lock; a new one starts at ``start()`` (asked only
        then: it may cost a look-up)."""
        with self._table_lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            state = self._queues.get(key)
            if state is None:
                offset = start()
                state = PopQueue(offset, offset)
                self.record_snapshot(key, state)
                self._queues[key] = state
            yield state

    @contextmanager
    def existing(self, key: Key) -> Iterator[PopQueue | None]:
        """The queue's state under its lock, or None when the queue has none: nothing was
        ever delivered from it, so a receipt handle naming it is not one this broker made.
        Creates nothing (an ack, a change or a forward names its queue in client input)."""
        with self._table_lock:
            lock = self._locks.get(key)
        if lock is None:
            yield None
            return
        with lock:
            yield self._queues.get(key)

    def find(self, key: Key) -> PopQueue | None:
        """The state as it is (unlocked; for quick checks on the event loop)."""
        return self._queues.get(key)

    def queue_keys(self) -> list[Key]:
        with self._table_lock:
            return list(self._queues)

    def forget_topic(self, topic: str) -> None:
        with self._table_lock:
            for key in [k for k in self._queues if k[1] == topic]:
                del self._queues[key]

    # -- recording ---------------------------------------------------------------------

    def record_delivery(self, key: Key, state: PopQueue, offsets: list[int]) -> None:
        entries = [_entry(o, state.inflight[o]) for o in offsets]
        self._write("d", [*key, state.next, entries])

    def record_acks(self, key: Key, offsets: list[int]) -> None:
        self._write("a", [*key, offsets])

    def record_change(self, key: Key, offset: int, entry: InFlight) -> None:
        self._write("c", [*key, offset, entry.visible_at_ms, entry.token])

    def record_snapshot(self, key: Key, state: PopQueue) -> None:
        self._write("s", [*key, *state.to_json()])

    def _write(self, kind: str, body: list) -> None:
        payload = json.dumps({kind: body}, separators=(",", ":")).encode()
        try:
            end = self._journal.append(payload)
            self._journal.make_durable(end)
        except OSError as exc:
            raise ResourceExhaustedError(
                f"cannot record pop state in {self._path}: {exc}; nothing was changed for "
                "the consumer (free disk space and try again)"
            ) from exc
        if self._journal.size > COMPACT_BYTES:
            with self._table_lock:
                if self._journal.size > COMPACT_BYTES:
                    self._journal.close()
                    self._journal = self._compact()

    # -- replay and compaction ---------------------------------------------------------

    def _replay(self) -> None:
        changes, _ = read_journal(self._path, _parse)
        for kind, body in changes:
            key: Key = (body[0], body[1], int(body[2]))
            state = self._queues.get(key)
            if kind == "s":
                self._queues[key] = PopQueue.from_json(body[3:])
                continue
            if state is None:  # a record of a queue whose snapshot came later: skip
                continue
            if kind == "d":
                state.next = max(state.next, int(body[3]))
                for offset, attempt, visible_at, token in body[4]:
                    state.inflight[int(offset)] = InFlight(attempt, visible_at, token)
                state.advance()
            elif kind == "a":
                for offset in body[3]:
                    state.drop(int(offset))
            elif kind == "c":
                entry = state.inflight.get(int(body[3]))
                if entry is not None:
                    entry.visible_at_ms, entry.token = int(body[4]), int(body[5])
        if self._queues:
            inflight = sum(len(q.inflight) for q in self._queues.values())
            log.info(
                "pop state: %d queues, %d messages in flight (from %s)",
                len(self._queues),
                inflight,
                self._path,
            )

    def _compact(self) -> OffsetJournal:
        """Write every queue's snapshot to a new journal and put it in place."""
        temp = self._path.with_name(self._path.name + ".tmp")
        with open(temp, "wb") as out:
            for key, state in sorted(self._queues.items()):
                body = [*key, *state.to_json()]
                out.write(frame(json.dumps({"s": body}, separators=(",", ":")).encode()))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self._path)
        return OffsetJournal(self._path, sync=self._sync)

    def close(self) -> None:
        self._journal.close()


def _entry(offset: int, entry: InFlight) -> list[int]:
    return [offset, entry.attempt, entry.visible_at_ms, entry.token]
