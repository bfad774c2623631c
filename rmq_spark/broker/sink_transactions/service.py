"""The Spark sink's transactions, kept by the broker: staged sends and the batch ends that
make them visible once (the rules are in :mod:`.state`; a staged send's rows are held, read
back and copied by :mod:`.sends`).

* :meth:`SinkTransactions.stage` appends a send's messages to ``RMQ_SYS_SINK_HALF_TOPIC``
  (queue 0) with the prepared sys flag and marks naming the sink, transaction, send number,
  real topic and queue. Consumers of the real topic do not see them. A send number the
  transaction already has is not staged again.
* :meth:`SinkTransactions.end` commits or rolls back: a commit writes each staged send to
  its real queue (or its delay level's schedule queue) as one append, with the commit sys
  flag and the staged record's commit-log offset as PREPARED_TX_OFFSET.

Durability: ``config/sinkTransactions.json`` records every sink's last committed batch and
decision, the transactions ended since the staging floor, and a commit in progress. It is
written (fsynced, with a backup) before any row of a commit becomes visible and again after
the last one, so a broker killed in between finishes the commit when it starts: it scans
each real queue from the offset it had when the commit began for copies that point at the
staged records, and writes the missing ones. Pending transactions are rebuilt at start by
scanning the staging queue from the floor (the oldest record of a pending transaction).

Staged rows are also kept in memory (up to ``memory_bytes``) so a commit does not read them
back; past that, and after a restart, a commit reads them from the store.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from pathlib import Path

from rmq_spark.broker.delivery.schedule import DelayScheduler
from rmq_spark.broker.sink_transactions import sends
from rmq_spark.broker.sink_transactions import state as ss
from rmq_spark.broker.write_path import WritePath
from rmq_spark.clock import now_ms
from rmq_spark.codec import record as rec
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.batch_encode import set_prepared_offset
from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.errors import (
    InvalidArgumentError,
    ResourceExhaustedError,
    StoreError,
    UnavailableError,
)
from rmq_spark.names import validate_sink_id
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

log = logging.getLogger("rmq_spark.broker.sinks")

#: sinks remembered (their last committed batch); the oldest are forgotten past this
MAX_SINKS = 10_000


class SinkTransactions:
    def __init__(
        self,
        writes: WritePath,
        delays: DelayScheduler,
        timeout_ms: int,
        memory_bytes: int = 256 << 20,
    ) -> None:
        self.writes = writes
        self.delays = delays
        self.store = writes.store
        self.timeout_ms = timeout_ms
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()  # the maps below
        self._end_lock = threading.Lock()  # one batch end (or recovery) at a time
        self._blocks: dict[str, list[sends.Block]] = {}  # transaction id -> its sends
        self._staging: set[tuple[str, int]] = set()  # sends being appended now
        self._sinks: dict[str, ss.SinkRecord] = {}
        #: ended transactions with records at or above the floor: id -> [outcome, end]
        self._resolved: dict[str, list] = {}
        self._floor = 0
        self._committing: dict | None = None
        self._held_bytes = 0
        self._path = Path(self.store.config.config_dir) / "sinkTransactions.json"
        self._load()
        self._rebuild()
        with self._end_lock:
            self._finish_committing()  # saves when it had anything to finish
            if self._expire(now_ms()):
                self._save()

    # -- the API ---------------------------------------------------------------------------

    def stage(
        self,
        stage: messaging_pb2.SinkStage,
        topic: str,
        queue_id: int,
        batch: sends.ColumnSend,
        born_host: str,
    ) -> int:
        """Stage a checked columnar send (a ColumnBatch) of transaction ``stage``; returns
        the staging queue offset of its first message (of the earlier copy, for a repeat)."""
        sink_id = validate_sink_id(stage.sink_id, "stage.sink_id")
        txn = validate_sink_id(stage.transaction_id, "stage.transaction_id")
        seq = stage.sequence
        if seq < 0:
            raise InvalidArgumentError(f"stage.sequence {seq} must be >= 0")
        key = (txn, seq)
        with self._lock:
            ended = self._resolved.get(txn)
            if ended is not None:
                raise InvalidArgumentError(
                    f"transaction {txn!r} was already ended ({ended[0].lower()}); a new task "
                    "attempt writes under a new transaction id"
                )
            for block in self._blocks.get(txn, ()):
                if block.sequence == seq:
                    return block.half_first
            if key in self._staging:
                raise UnavailableError(
                    f"send {seq} of transaction {txn!r} is being staged by an earlier request; "
                    "retry"
                )
            self._staging.add(key)
        try:
            self._ensure_topic()
            count = len(batch.bodies)
            marks = ss.stage_marks(sink_id, txn, seq, topic, queue_id, batch.delay_level, count)
            held, crcs, codes = sends.final_form(
                self.store.config.store_host, topic, queue_id, batch, born_host
            )
            result = self.store.append(
                ss.HALF_TOPIC,
                0,
                batch.bodies,
                sends.marked_first(batch.properties, marks),
                born_host=born_host,
                # numpy arrays, which append takes, though it annotates Sequence[int]
                born_timestamps=batch.born_timestamps,
                flags=batch.flags,
                sysflag=rec.TRANSACTION_PREPARED_TYPE,
                body_crcs=crcs,
                tag_codes=codes,
            )
            marker = int(result.physical_offsets[0])
            if isinstance(held, sends.Ready):
                set_prepared_offset(held.records, marker)
            block = sends.Block(
                sink_id=sink_id,
                transaction_id=txn,
                sequence=seq,
                half_first=result.first_queue_offset,
                count=count,
                marker=marker,
                topic=topic,
                queue_id=queue_id,
                delay=batch.delay_level,
                marks_len=len(marks),
                born_host=born_host,
                staged_at_ms=result.store_timestamp,
            )
            with self._lock:
                if self._held_bytes + held.nbytes <= self.memory_bytes:
                    block.held = held
                    self._held_bytes += held.nbytes
                self._blocks.setdefault(txn, []).append(block)
            return block.half_first
        finally:
            with self._lock:
                self._staging.discard(key)

    def end(
        self, sink_id: str, batch_id: int, commit: bool, decision: ss.Decision
    ) -> tuple[ss.EndPlan, int, int]:
        """End a batch (see EndSinkBatch in proto/); returns the plan carried out, the
        messages made visible and the sink's last committed batch (-1: none)."""
        validate_sink_id(sink_id, "sink_id")
        if batch_id < 0:
            raise InvalidArgumentError(f"batch_id {batch_id} must be >= 0")
        for broker_name, parts in decision.items():
            for txn, count in parts:
                validate_sink_id(txn, f"a transaction of broker {broker_name!r}")
                if count < 1:
                    raise InvalidArgumentError(
                        f"transaction {txn!r} counts {count} messages; a transaction has >= 1"
                    )
        with self._end_lock:
            self._finish_committing()
            now = now_ms()
            self._expire(now)
            with self._lock:
                pending = {
                    txn: sum(b.count for b in blocks)
                    for txn, blocks in self._blocks.items()
                    if blocks[0].sink_id == sink_id
                }
                plan = ss.plan_end(
                    self._sinks.get(sink_id),
                    pending,
                    batch_id=batch_id,
                    commit=commit,
                    decision=decision,
                    broker_name=self.writes.name,
                    now_ms=now,
                )
                blocks = [
                    b
                    for txn in plan.commit
                    for b in sorted(self._blocks[txn], key=lambda b: b.sequence)
                ]
            # Refuse before anything changes: a topic gone, staged rows deleted by retention.
            for topic in sorted({b.topic for b in blocks}):
                self.writes.topic_for_write(topic)
            sends.check_still_staged(self.store, blocks)
            committing = [self._commit_entry(b) for b in blocks]
            with self._lock:
                for txn in plan.commit:
                    self._resolve(txn, "COMMIT")
                for txn in plan.rollback:
                    self._resolve(txn, "ROLLBACK")
                if plan.record is not None:
                    self._sinks[sink_id] = plan.record
                self._committing = {"entries": committing} if committing else None
            if committing:
                self._save()  # the decision is durable before any row is visible
            for block in blocks:
                sends.write_copies(self.writes, self.delays, block, 0)
            with self._lock:
                self._committing = None
                for txn in plan.commit + plan.rollback:
                    self._drop(txn)
                self._advance_floor()
            self._save()
            record = self._sinks.get(sink_id)
            last = -1 if record is None else record.batch
            if plan.rollback:
                log.info("sink %s: rolled back %d transactions", sink_id, len(plan.rollback))
            return plan, sum(b.count for b in blocks), last

    def pending(self) -> dict[str, int]:
        """Pending transaction id -> messages staged (for tests and status)."""
        with self._lock:
            return {txn: sum(b.count for b in blocks) for txn, blocks in self._blocks.items()}

    # -- commit ----------------------------------------------------------------------------

    def _commit_entry(self, block: sends.Block) -> dict:
        topic, queue_id = sends.landing(self.delays, block)
        return {
            "txn": block.transaction_id,
            "seq": block.sequence,
            "marker": block.marker,
            "count": block.count,
            "floor": sends.queue_end(self.store, topic, queue_id),
        }

    def _finish_committing(self) -> None:
        """Write what a commit cut short by a crash or a failed write did not write."""
        if self._committing is None:
            return
        todo: list[tuple[sends.Block, tuple[str, int], int]] = []
        for entry in self._committing["entries"]:
            block = next(
                (b for b in self._blocks.get(entry["txn"], ()) if b.sequence == entry["seq"]),
                None,
            )
            if block is None:
                raise StoreError(
                    f"a commit in progress names send {entry['seq']} of transaction "
                    f"{entry['txn']!r}, which is not in {ss.HALF_TOPIC} any more"
                )
            todo.append((block, sends.landing(self.delays, block), entry["floor"]))
        # the copies already written, counted in one pass per queue (a marker is one
        # staged send's: copies of other sends, and those written below, do not count)
        done_by_marker: dict[int, int] = {}
        for queue in {landing for _, landing, _ in todo}:
            floor = min(f for _, landing, f in todo if landing == queue)
            markers = [b.marker for b, landing, _ in todo if landing == queue]
            done_by_marker.update(sends.copies_since(self.store, *queue, floor, markers))
        for block, _, _ in todo:
            done = done_by_marker[block.marker]
            if done < block.count:
                log.warning(
                    "finishing a commit cut short: %d of %d messages of transaction %s",
                    block.count - done,
                    block.count,
                    block.transaction_id,
                )
                sends.write_copies(self.writes, self.delays, block, done)
        with self._lock:
            for entry in self._committing["entries"]:
                self._drop(entry["txn"])
            self._committing = None
            self._advance_floor()
        self._save()

    # -- state -----------------------------------------------------------------------------

    def _resolve(self, txn: str, outcome: str) -> None:
        blocks = self._blocks.get(txn, [])
        end = max((b.half_first + b.count for b in blocks), default=0)
        self._resolved[txn] = [outcome, end]

    def _drop(self, txn: str) -> None:
        for block in self._blocks.pop(txn, ()):
            if block.held is not None:
                self._held_bytes -= block.held.nbytes

    def _advance_floor(self) -> None:
        firsts = [b.half_first for blocks in self._blocks.values() for b in blocks]
        if firsts:
            self._floor = min(firsts)
        else:
            self._floor = sends.queue_end(self.store, ss.HALF_TOPIC, 0)
        self._resolved = {t: v for t, v in self._resolved.items() if v[1] > self._floor}

    def _expire(self, now: int) -> bool:
        with self._lock:
            oldest = {t: min(b.staged_at_ms for b in blocks) for t, blocks in self._blocks.items()}
            old = ss.expired(oldest, now_ms=now, timeout_ms=self.timeout_ms)
            for txn in old:
                self._resolve(txn, "ROLLBACK")
                self._drop(txn)
        if old:
            log.warning(
                "rolled back %d sink transactions staged more than %d ms ago",
                len(old),
                self.timeout_ms,
            )
        return bool(old)

    def _ensure_topic(self) -> None:
        if self.store.topics.find(ss.HALF_TOPIC) is None:
            self.store.topics.create(ss.HALF_TOPIC, 1)

    def _save(self) -> None:
        with self._lock:
            sinks = sorted(self._sinks.items(), key=lambda item: item[1].at_ms)[-MAX_SINKS:]
            self._sinks = dict(sinks)
            state = {
                "version": 1,
                "floor": self._floor,
                "resolved": dict(self._resolved),
                "sinks": {sink: record.to_json() for sink, record in sinks},
                "committing": self._committing,
            }
        try:
            write_json_atomic(self._path, state)
        except OSError as exc:
            raise ResourceExhaustedError(
                f"cannot record the sink transactions in {self._path}: {exc.strerror}; free "
                "disk space; ending the batch again is safe (no row is made visible twice)"
            ) from exc

    def _load(self) -> None:
        state, _ = read_json_with_backup(self._path)
        if state is None:
            return
        try:
            self._floor = int(state["floor"])
            self._resolved = {str(t): [str(v[0]), int(v[1])] for t, v in state["resolved"].items()}
            self._sinks = {str(s): ss.SinkRecord.from_json(r) for s, r in state["sinks"].items()}
            self._committing = state.get("committing")
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise StoreError(
                f"{self._path} is not a sink transaction state ({exc!r}); restore it from "
                f"{self._path}.bak or remove both to forget every sink's committed batches"
            ) from None

    def _rebuild(self) -> None:
        """Pending sends from the staging queue, from the floor on."""
        if self.store.topics.find(ss.HALF_TOPIC) is None:
            return
        committing = {e["txn"] for e in (self._committing or {}).get("entries", [])}
        offset = max(self._floor, self.store.min_offset(ss.HALF_TOPIC, 0))
        end = self.store.max_offset(ss.HALF_TOPIC, 0)
        found: dict[tuple[str, int], sends.Block] = {}
        while offset < end:  # one read per staged send: its first record has the marks
            got = self.store.get_messages(ss.HALF_TOPIC, 0, offset, max_count=1)
            if not got.count:
                offset = got.next_begin_offset if got.next_begin_offset > offset else end
                continue
            row = decode_records(got.data, got.record_starts(), got.sizes).to_pylist()[0]
            mark = ss.parse_marks(dict(row["properties"]))
            if mark is None:  # not the start of a staged send (the floor is one, always)
                offset += 1
                continue
            # a crash may have cut the send's last records: count what is there
            count = min(mark.count, end - offset)
            key = (mark.transaction_id, mark.sequence)
            ended = mark.transaction_id in self._resolved
            if key not in found and (not ended or mark.transaction_id in committing):
                found[key] = sends.Block(
                    sink_id=mark.sink_id,
                    transaction_id=mark.transaction_id,
                    sequence=mark.sequence,
                    half_first=offset,
                    count=count,
                    marker=row["commitLogOffset"],
                    topic=mark.topic,
                    queue_id=mark.queue_id,
                    delay=mark.delay,
                    marks_len=len(mark.marks()),
                    born_host=row["bornHost"],
                    staged_at_ms=row["storeTimestamp"],
                )
            offset += max(count, 1)
        blocks: dict[str, list[sends.Block]] = defaultdict(list)
        for block in found.values():
            blocks[block.transaction_id].append(block)
        self._blocks = dict(blocks)
        if self._blocks:
            log.info("sink transactions: %d pending after restart", len(self._blocks))
