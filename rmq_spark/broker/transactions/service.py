"""Transactional messages (RocketMQ's half messages), kept by the broker.

* :meth:`TransactionService.prepare` stores a half message in ``RMQ_SYS_TRANS_HALF_TOPIC``
  with the prepared sys flag and ``TRAN_MSG=true``; its real topic and queue travel as the
  ``REAL_TOPIC``/``REAL_QID`` properties. Consumers of the real topic do not see it.
* :meth:`TransactionService.end` resolves it. COMMIT first records the operation in
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (with the real queue's max offset at that moment), then
  writes the message to its real queue: commit sys flag, ``TRAN_MSG`` kept,
  ``PREPARED_TX_OFFSET`` = the half message's commit-log offset. ROLLBACK records the
  operation only. A transaction resolves once: ending it again answers False and writes
  nothing.
* :meth:`TransactionService.due_checks` says which pending transactions to ask a producer
  about now: older than ``check_after_ms`` (or the client's own delay, capped at one hour),
  at most one check per ``check_interval_ms`` each, oldest first. Each check is recorded
  (an op tagged ``c``); one checked ``max_checks`` times is copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` and resolved as DISCARD instead. The caller (the v2
  service) sends the checks to producers over their Telemetry streams.

Restart: the pending set is rebuilt by pairing the half queue with the op queue (see
:mod:`rmq_spark.broker.transactions.state`). Because the commit op is written before the
committed copy, a kill between the two leaves an op without its copy; at start the real
queues are scanned from the op's recorded floor for a copy pointing at the half message,
and a missing one is written then. ``config/transactionState.json`` records up to which op
this was already verified, so only the ops written since need the scan.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from rmq_spark import clock
from rmq_spark.broker.transactions import state as ts
from rmq_spark.broker.write_path import WritePath
from rmq_spark.codec import properties as props
from rmq_spark.codec import record as rec
from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RocketliteError,
)
from rmq_spark.store import AppendResult
from rmq_spark.structs import PullStatus

log = logging.getLogger("rmq_spark.broker.transactions.service")

#: outcomes of resolved transactions remembered (answering a repeated end) after a restart
RESOLVED_MEMORY = 100_000
_READ_BATCH = 256
_SAVE_EVERY_MS = 1_000


class TransactionService:
    def __init__(
        self,
        writes: WritePath,
        check_interval_ms: int = 30_000,
        check_after_ms: int = 6_000,
        max_checks: int = 15,
    ) -> None:
        self.writes = writes
        self.store = writes.store
        self.check_interval_ms = check_interval_ms
        self.check_after_ms = check_after_ms
        self.max_checks = max_checks
        self._lock = threading.RLock()
        self._pending: dict[str, ts.HalfState] = {}
        self._resolved: OrderedDict[str, str] = OrderedDict()
        #: committed, op recorded, real copy not written yet (a write failed): id -> op offset
        self._unwritten: dict[str, tuple[ts.HalfState, int]] = {}
        self._state_path = Path(self.store.config.config_dir) / "transactionState.json"
        self._saved_verified = -1
        self._saved_at = 0
        self._rebuild()

    # -- the API ---------------------------------------------------------------------------

    def prepare(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: bytes,
        tag: str | None,
        *,
        transaction_id: str,
        born_host: str,
        born_timestamp_ms: int,
        check_after_ms: int | None = None,
    ) -> AppendResult:
        """Store a half message for ``topic``/``queue_id``; invisible until committed."""
        if not isinstance(transaction_id, str) or not transaction_id:
            raise InvalidArgumentError("a transaction id must be a non-empty string")
        config = self.writes.topic_for_write(topic)
        if not isinstance(queue_id, int) or not 0 <= queue_id < config.write_queue_nums:
            raise InvalidArgumentError(
                f"queue id {queue_id!r} is out of range for topic {topic!r}: "
                f"it has {config.write_queue_nums} write queues"
            )
        half_props = ts.half_properties(
            properties,
            topic=topic,
            queue_id=queue_id,
            tag=tag,
            transaction_id=transaction_id,
            check_after_ms=check_after_ms,
        )
        with self._lock:
            self._ensure_topic(ts.HALF_TOPIC)
            self._ensure_topic(ts.OP_TOPIC)
            if transaction_id in self._pending or transaction_id in self._unwritten:
                raise AlreadyExistsError(
                    f"transaction {transaction_id!r} is already pending; end it first"
                )
            result = self.store.append(
                ts.HALF_TOPIC,
                0,
                [body],
                [half_props],
                born_host=born_host,
                born_timestamps=born_timestamp_ms,
                sysflag=rec.TRANSACTION_PREPARED_TYPE,
            )
            self._pending[transaction_id] = ts.HalfState(
                transaction_id=transaction_id,
                queue_offset=result.first_queue_offset,
                physical_offset=int(result.physical_offsets[0]),
                store_timestamp=result.store_timestamp,
                real_topic=topic,
                real_queue_id=queue_id,
                check_after_ms=(
                    None if check_after_ms is None else ts.capped_check_after(check_after_ms)
                ),
                producer_group=props.decode_properties(half_props).get(ts.PRODUCER_GROUP),
            )
            self._resolved.pop(transaction_id, None)
        return result

    def half(self, transaction_id: str) -> ts.HalfState | None:
        """The half message of a transaction not ended yet (or committed and its copy still
        owed), or None. Who may end it is decided on this (its real topic, its producer
        group); :meth:`end` with ``expect`` then ends that half message and no other."""
        with self._lock:
            retry = self._unwritten.get(transaction_id)
            return retry[0] if retry is not None else self._pending.get(transaction_id)

    def end(
        self,
        transaction_id: str,
        commit: bool,
        *,
        topic: str | None = None,
        expect: ts.HalfState | None = None,
    ) -> bool:
        """Commit or roll back a pending transaction. True when this call resolved it; False
        when it was already resolved (nothing is written again). NotFoundError when the id
        is unknown; InvalidArgumentError when ``topic`` is not the transaction's topic, or
        the pending half message is not ``expect`` (the one the caller was authorized for:
        the id was ended and begun again in between)."""
        with self._lock:
            retry = self._unwritten.get(transaction_id)
            current = retry[0] if retry is not None else self._pending.get(transaction_id)
            if expect is not None and current is not None and current is not expect:
                raise InvalidArgumentError(
                    f"transaction {transaction_id!r} changed while it was being ended; end it again"
                )
            if retry is not None:
                self._check_topic(retry[0], topic)
                if not commit:
                    log.warning("rollback of %s refused: it is already committed", transaction_id)
                    return False
                self._write_committed(transaction_id, *retry)
                return True
            half = self._pending.get(transaction_id)
            if half is None:
                outcome = self._resolved.get(transaction_id)
                if outcome is None:
                    raise NotFoundError(
                        f"no pending transaction {transaction_id!r} on broker "
                        f"{self.writes.name}: it was never prepared here, or resolved long ago"
                    )
                log.info(
                    "%s of transaction %s ignored: already %s",
                    "commit" if commit else "rollback",
                    transaction_id,
                    outcome,
                )
                return False
            self._check_topic(half, topic)
            if not commit:
                self._append_op(half, ts.ROLLBACK)
                self._resolve(half, ts.ROLLBACK)
                return True
            # Refuse before the op is recorded when the copy could not be written now.
            if not self.writes.topic_for_write(half.real_topic).is_writable:
                raise PermissionDeniedError(
                    f"topic {half.real_topic!r} is not writable; transaction "
                    f"{transaction_id!r} stays pending until it is"
                )
            floor = self._max_offset(half.real_topic, half.real_queue_id)
            op_offset = self._append_op(half, ts.COMMIT, real_floor=floor)
            self._resolve(half, ts.COMMIT)
            self._unwritten[transaction_id] = (half, op_offset)
            self._write_committed(transaction_id, half, op_offset)
            return True

    def due_checks(self, now_ms: int | None = None) -> list[tuple[str, rec.Record]]:
        """The pending transactions to check now, oldest first, as (transaction id, half
        message with ``TRANSACTION_CHECK_TIMES`` set); each counts as one check. Those past
        ``max_checks`` are discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` instead."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._retry_unwritten()
            check, discard = ts.plan_checks(
                list(self._pending.values()),
                now,
                check_after_ms=self.check_after_ms,
                check_interval_ms=self.check_interval_ms,
                max_checks=self.max_checks,
            )
            for half in discard:
                try:
                    self._discard(half)
                except (OSError, RocketliteError) as exc:
                    log.error("transaction %s not discarded yet: %s", half.transaction_id, exc)
            out = []
            if check:
                self.store.append(
                    ts.OP_TOPIC,
                    0,
                    [str(h.queue_offset).encode() for h in check],
                    [ts.op_properties(ts.CHECK_TAG, h.transaction_id) for h in check],
                )
                for half in check:
                    half.checks += 1
                    half.last_check_ms = now
                    record = self._read_half(half)
                    record.properties = ts.with_check_times(record.properties, half.checks)
                    out.append((half.transaction_id, record))
            if now - self._saved_at >= _SAVE_EVERY_MS:
                self._save_verified(now)
        return out

    def status(self, transaction_id: str) -> str | None:
        """PENDING, COMMIT, ROLLBACK or DISCARD; None when unknown here."""
        with self._lock:
            if transaction_id in self._pending:
                return ts.PENDING
            return self._resolved.get(transaction_id)

    def pending(self) -> dict[str, ts.HalfState]:
        """A copy of the pending set: transaction id -> its half message's state."""
        with self._lock:
            return dict(self._pending)

    def close(self) -> None:
        """Record how far the commit ops are verified (the next start scans less)."""
        with self._lock:
            try:
                self._save_verified(clock.now_ms())
            except (OSError, RocketliteError) as exc:
                log.warning("could not save %s: %s", self._state_path, exc)

    # -- writing ---------------------------------------------------------------------------

    def _ensure_topic(self, topic: str) -> None:
        """The system topics are created when the first transaction needs them."""
        if self.store.topics.find(topic) is None:
            self.store.topics.create(topic, 1)

    def _check_topic(self, half: ts.HalfState, topic: str | None) -> None:
        if topic is not None and topic != half.real_topic:
            raise InvalidArgumentError(
                f"transaction {half.transaction_id!r} belongs to topic {half.real_topic!r}, "
                f"not {topic!r}"
            )

    def _append_op(self, half: ts.HalfState, outcome: str, real_floor: int | None = None) -> int:
        result = self.store.append(
            ts.OP_TOPIC,
            0,
            [str(half.queue_offset).encode()],
            [ts.op_properties(ts.REMOVE_TAG, half.transaction_id, outcome, real_floor)],
        )
        return result.first_queue_offset

    def _resolve(self, half: ts.HalfState, outcome: str) -> None:
        self._pending.pop(half.transaction_id, None)
        self._remember(half.transaction_id, outcome)

    def _remember(self, transaction_id: str, outcome: str) -> None:
        self._resolved.pop(transaction_id, None)
        self._resolved[transaction_id] = outcome
        while len(self._resolved) > RESOLVED_MEMORY:
            self._resolved.popitem(last=False)

    def _write_committed(self, transaction_id: str, half: ts.HalfState, op_offset: int) -> None:
        """Write the committed copy to the real queue (its op is already recorded)."""
        record = self._read_half(half)
        self.writes.put_messages(
            half.real_topic,
            half.real_queue_id,
            [record.body],
            [ts.committed_properties(record.properties)],
            [props.decode_properties(record.properties).get(props.TAGS)],
            born_host=record.born_host,
            born_timestamps=record.born_timestamp,
            flags=record.flag,
            sysflag=rec.with_transaction_type(record.sysflag, rec.TRANSACTION_COMMIT_TYPE),
            prepared_tx_offset=half.physical_offset,
        )
        self._unwritten.pop(transaction_id, None)

    def _retry_unwritten(self) -> None:
        for txid, (half, op_offset) in list(self._unwritten.items()):
            try:
                self._write_committed(txid, half, op_offset)
                log.info("committed transaction %s written to %s", txid, half.real_topic)
            except RocketliteError as exc:
                log.error("committed transaction %s still not written: %s", txid, exc)

    def _discard(self, half: ts.HalfState) -> None:
        record = self._read_half(half)
        self._ensure_topic(ts.CHECK_MAX_TOPIC)
        self.store.append(
            ts.CHECK_MAX_TOPIC,
            0,
            [record.body],
            [ts.with_check_times(record.properties, half.checks)],
            born_host=record.born_host,
            born_timestamps=record.born_timestamp,
            flags=record.flag,
            sysflag=record.sysflag,
        )
        self._append_op(half, ts.DISCARD)
        self._resolve(half, ts.DISCARD)
        log.warning(
            "transaction %s (topic %s) discarded to %s after %d unanswered checks",
            half.transaction_id,
            half.real_topic,
            ts.CHECK_MAX_TOPIC,
            half.checks,
        )

    # -- reading and rebuilding ------------------------------------------------------------

    def _read_half(self, half: ts.HalfState) -> rec.Record:
        return rec.decode_record(self.store.read_record(half.physical_offset))

    def _max_offset(self, topic: str, queue_id: int) -> int:
        try:
            return self.store.max_offset(topic, queue_id)
        except NotFoundError:
            return 0

    def _records(self, topic: str, queue_id: int, start: int = 0) -> Iterator[rec.Record]:
        if self.store.topics.find(topic) is None:
            return
        offset = max(start, self.store.min_offset(topic, queue_id))
        while True:
            got = self.store.get_messages(topic, queue_id, offset, max_count=_READ_BATCH)
            if got.status != PullStatus.FOUND:
                return
            yield from rec.iter_records(got.data)
            offset = got.next_begin_offset

    def _rebuild(self) -> None:
        verified = self._load_verified()
        halves = (ts.half_state(r) for r in self._records(ts.HALF_TOPIC, 0))
        ops = (ts.op_entry(r) for r in self._records(ts.OP_TOPIC, 0))
        paired = ts.pair(
            (h for h in halves if h is not None), (o for o in ops if o is not None), verified
        )
        self._pending = paired.pending
        for txid, outcome in paired.resolved.items():
            self._remember(txid, outcome)
        self._verify_commits(paired.commits_to_verify)
        self._save_verified(clock.now_ms())
        if self._pending:
            log.info("%d transaction(s) pending after restart", len(self._pending))

    def _verify_commits(self, commits: list[tuple[ts.OpEntry, ts.HalfState]]) -> None:
        """Write the committed copies that a stop between op and copy left unwritten."""
        floors: dict[tuple[str, int], int] = {}
        for op, half in commits:
            key = (half.real_topic, half.real_queue_id)
            floors[key] = min(floors.get(key, op.real_floor or 0), op.real_floor or 0)
        written: set[int] = set()
        for (topic, queue_id), floor in floors.items():
            try:
                for r in self._records(topic, queue_id, floor):
                    if rec.transaction_type(r.sysflag) == rec.TRANSACTION_COMMIT_TYPE:
                        written.add(r.prepared_tx_offset)
            except NotFoundError:
                pass
        for op, half in commits:
            if half.physical_offset in written:
                continue
            log.warning(
                "transaction %s was committed but its message was not written to %s before "
                "the broker stopped; writing it now",
                half.transaction_id,
                half.real_topic,
            )
            self._unwritten[half.transaction_id] = (half, op.op_offset)
        self._retry_unwritten()

    def _load_verified(self) -> int:
        try:
            obj, _ = read_json_with_backup(self._state_path)
        except RocketliteError as exc:
            log.warning("%s; verifying every committed transaction", exc)
            return 0
        if isinstance(obj, dict) and isinstance(obj.get("verified_op_offset"), int):
            return obj["verified_op_offset"]
        return 0

    def _save_verified(self, now: int) -> None:
        """Ops below the saved offset have their committed copy written."""
        if self.store.topics.find(ts.OP_TOPIC) is None:
            return  # no transaction ever: nothing to record
        verified = self._max_offset(ts.OP_TOPIC, 0)
        if self._unwritten:
            verified = min(verified, *(op for _, op in self._unwritten.values()))
        self._saved_at = now
        if verified != self._saved_verified:
            write_json_atomic(self._state_path, {"verified_op_offset": verified})
            self._saved_verified = verified
