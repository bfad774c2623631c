"""Pop-style consumption over the store: receive, ack, change invisibility, dead letters.

Everything here runs on the broker's worker threads (it reads the store and writes the pop
journal); the servicer does the waiting on the event loop. Decisions are
:mod:`rmq_spark.broker.v2.pop`'s; this module applies them to one (group, topic, queue) at
a time under that queue's lock, records each change in the pop journal before answering,
and moves the group's committed offset (the consumer-offset table) as acks come in.
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import Read
from rmq_spark.broker.delivery.retry import plan_send_back
from rmq_spark.broker.v2.codes import Code, V2Error
from rmq_spark.broker.v2.convert import Handle
from rmq_spark.broker.v2.pop import PopQueue, attempts_exhausted
from rmq_spark.broker.v2.pop_store import Key, PopStore
from rmq_spark.broker.v2.requests import existing_topic
from rmq_spark.clock import now_ms
from rmq_spark.codec.record import Record, decode_record, iter_records, offset_msg_id
from rmq_spark.filter import Selector
from rmq_spark.structs import PullStatus

log = logging.getLogger("rmq_spark.broker")

#: bytes one receive reads at most
MAX_RECEIVE_BYTES = 4 << 20
#: how long a push consumer's (auto-renewed) delivery is invisible before its client is
#: asked about: while the client lives it stays invisible
AUTO_RENEW_MS = 60_000
#: a client that left: its auto-renewed messages come back after this
RELEASE_DELAY_MS = 1_000


@dataclass
class Delivery:
    record: Record
    handle: Handle
    attempt: int
    invisible_ms: int


@dataclass(frozen=True)
class ReceiveArgs:
    group: str
    topic: str
    batch: int
    invisible_ms: int
    tag_codes: list[int] | None
    fifo: bool
    max_attempts: int
    client_id: str = ""  # auto-renew: invisible while this client lives
    #: a SQL92 filter over the messages' properties (None: the tag filter alone)
    selector: Selector | None = None


class PopService:
    def __init__(self, broker: Broker, pops: PopStore, alive: Callable[[str], bool]) -> None:
        self._broker = broker
        self._core = broker.messaging
        self._pops = pops
        self._alive = alive
        self._rotation = itertools.count()
        self._rotation_lock = threading.Lock()

    # -- receive ---------------------------------------------------------------------------

    def readable_queues(self, topic: str) -> list[int]:
        """The topic's read queues; FORBIDDEN (PermissionDeniedError) when the broker or
        the topic does not allow reads, as for a pull."""
        config = existing_topic(self._broker, topic)
        self._core.check_readable(config, 0)  # every topic has read queue 0
        return list(range(config.read_queue_nums))

    def receive(self, args: ReceiveArgs) -> list[Delivery]:
        """Take up to ``args.batch`` messages from the topic's queues (starting at a
        different queue each time, so every queue gets its turn)."""
        queue_ids = self.readable_queues(args.topic)
        with self._rotation_lock:
            start = next(self._rotation) % len(queue_ids)
        out: list[Delivery] = []
        for queue_id in queue_ids[start:] + queue_ids[:start]:
            room = args.batch - len(out)
            if room <= 0:
                break
            out.extend(self._receive_queue(args, queue_id, room))
        return out

    def _receive_queue(self, args: ReceiveArgs, queue_id: int, room: int) -> list[Delivery]:
        key: Key = (args.group, args.topic, queue_id)
        with self._pops.queue(key, functools.partial(self._start_offset, key)) as state:
            base_before = state.base
            committed = self._core.committed(*key)
            self._follow_committed(key, state, committed)
            now = now_ms()
            if args.fifo and state.blocked_for_fifo(now, self._alive):
                return []
            again, dead = attempts_exhausted(state.due(now, self._alive), args.max_attempts)
            if dead:
                self._dead_letter(key, state, dead)
            out: list[Delivery] = []
            redelivered = []
            for offset in again[:room]:
                record = self._read_one(args.topic, queue_id, offset)
                if record is None:  # gone (retention): nothing to deliver again
                    state.drop(offset)
                    self._pops.record_acks(key, [offset])
                    continue
                entry = state.redeliver(
                    offset,
                    now_ms=now,
                    invisible_ms=args.invisible_ms,
                    token=_token(),
                    client_id=args.client_id,
                )
                redelivered.append(offset)
                out.append(
                    self._delivery(record, queue_id, offset, entry.token, entry.attempt, args)
                )
            room -= len(out)
            new_offsets: list[int] = []
            if room > 0 and not (args.fifo and again):
                read = Read(
                    args.topic, queue_id, state.next, room, MAX_RECEIVE_BYTES, args.tag_codes,
                    args.selector, args.group,
                )  # fmt: skip
                result = self._core.read(read)
                if result.status == PullStatus.FOUND:
                    records = list(iter_records(result.data))
                    tokens = [_token() for _ in records]
                    new_offsets = [r.queue_offset for r in records]
                    state.deliver_new(
                        new_offsets,
                        next_offset=result.next_begin_offset,
                        now_ms=now,
                        invisible_ms=args.invisible_ms,
                        tokens=tokens,
                        client_id=args.client_id,
                    )
                    out.extend(
                        self._delivery(r, queue_id, r.queue_offset, t, 1, args)
                        for r, t in zip(records, tokens, strict=True)
                    )
                elif result.status == PullStatus.NO_MATCHED_MSG:
                    state.deliver_new(
                        [], next_offset=result.next_begin_offset, now_ms=now,
                        invisible_ms=0, tokens=[],
                    )  # fmt: skip
                elif result.status == PullStatus.OFFSET_ILLEGAL and not state.inflight:
                    state.reset(result.next_begin_offset)
            if redelivered or new_offsets or state.base != base_before:
                self._pops.record_delivery(key, state, redelivered + new_offsets)
            # a group seen here for the first time shows in `rocketlite offsets` at once
            self._commit(key, state, base_before, first_seen=committed is None)
            return out

    def _delivery(
        self,
        record: Record,
        queue_id: int,
        offset: int,
        token: int,
        attempt: int,
        args: ReceiveArgs,
    ) -> Delivery:
        return Delivery(record, Handle(queue_id, offset, token), attempt, args.invisible_ms)

    def _read_one(self, topic: str, queue_id: int, offset: int) -> Record | None:
        result = self._core.read(Read(topic, queue_id, offset, 1, MAX_RECEIVE_BYTES))
        if result.status != PullStatus.FOUND or result.queue_offsets is None:
            return None
        if int(result.queue_offsets[0]) != offset:
            return None
        return decode_record(result.data)

    def _start_offset(self, key: Key) -> int:
        group, topic, queue_id = key
        committed = self._core.committed(group, topic, queue_id)
        if committed is not None:
            return committed
        return self._core.min_offset(topic, queue_id)

    def _follow_committed(self, key: Key, state: PopQueue, committed: int | None) -> None:
        """An offset set by other means (an admin reset, a pull consumer of the same group)
        is taken over when nothing is in flight."""
        if state.inflight:
            return
        if committed is not None and committed != state.base:
            state.reset(committed)
            self._pops.record_snapshot(key, state)

    def _commit(
        self, key: Key, state: PopQueue, base_before: int, *, first_seen: bool = False
    ) -> None:
        if state.base != base_before or first_seen:
            group, topic, queue_id = key
            self._core.commit_offsets(group, topic, {queue_id: state.base})

    def _dead_letter(self, key: Key, state: PopQueue, offsets: list[int]) -> None:
        group, topic, queue_id = key
        for offset in offsets:
            record = self._read_one(topic, queue_id, offset)
            if record is not None:
                self._forward_to_dlq(group, record)
            state.drop(offset)
        self._pops.record_acks(key, offsets)

    def _forward_to_dlq(self, group: str, record: Record) -> None:
        msg_id = offset_msg_id(record.store_host, record.physical_offset)
        plan = plan_send_back(record, group=group, record_msg_id=msg_id, dead_letter_now=True)
        self._core.send_back(record, plan)
        log.info(
            "message %s of %s queue %d offset %d moved to %s",
            msg_id, record.topic, record.queue_id, record.queue_offset, plan.topic,
        )  # fmt: skip

    def is_ready(self, group: str, topic: str, queue_ids: list[int], fifo: bool) -> bool:
        """Quick check (event loop): may a receive find something now?"""
        core = self._core
        now = now_ms()
        for queue_id in queue_ids:
            state = self._pops.find((group, topic, queue_id))
            if state is None:
                if core.max_offset(topic, queue_id) > 0:
                    return True
                continue
            if fifo and state.blocked_for_fifo(now, self._alive):
                continue
            if core.max_offset(topic, queue_id) > state.next:
                return True
            due = state.next_due_ms()
            if due is not None and due <= now:
                return True
        return False

    def next_due_ms(self, group: str, topic: str, queue_ids: list[int]) -> int | None:
        times = []
        for queue_id in queue_ids:
            state = self._pops.find((group, topic, queue_id))
            if state is not None and (due := state.next_due_ms()) is not None:
                times.append(due)
        return min(times) if times else None

    # -- ack, change, forward ----------------------------------------------------------
    # Each acts on the pop state of the (group, topic) the request names, which the access
    # check authorized: a receipt handle only picks a delivery inside it (queue, offset and
    # the delivery's random token), so a handle of another group's or topic's delivery
    # matches nothing here. A queue never received from has no state and none is made.

    def ack(self, group: str, topic: str, handle: Handle) -> None:
        error = self.ack_many(group, topic, [handle])[0]
        if error is not None:
            raise error

    def ack_many(self, group: str, topic: str, handles: list[Handle]) -> list[V2Error | None]:
        """Ack several deliveries; per handle None (acked) or the error. One journal record
        and at most one offset commit per queue, however many handles it has."""
        results: list[V2Error | None] = [None] * len(handles)
        by_queue: dict[int, list[int]] = {}
        for i, handle in enumerate(handles):
            by_queue.setdefault(handle.queue_id, []).append(i)
        for queue_id, indexes in by_queue.items():
            key: Key = (group, topic, queue_id)
            with self._pops.existing(key) as state:
                if state is None:  # nothing was delivered from this queue to this group
                    for i in indexes:
                        results[i] = _stale(handles[i])
                    continue
                before = state.base
                acked = []
                for i in indexes:
                    handle = handles[i]
                    if state.ack(handle.offset, handle.token):
                        acked.append(handle.offset)
                    else:
                        results[i] = _stale(handle)
                if acked:
                    self._pops.record_acks(key, acked)
                    self._commit(key, state, before)
            if acked:
                self._core.wake(topic, queue_id)  # a FIFO queue may be free now
        return results

    def change_invisible(self, group: str, topic: str, handle: Handle, invisible_ms: int) -> Handle:
        key: Key = (group, topic, handle.queue_id)
        with self._pops.existing(key) as state:
            if state is None:
                raise _stale(handle)
            new_token = _token()
            entry = state.change_invisible(
                handle.offset, handle.token, now_ms=now_ms(), invisible_ms=invisible_ms,
                new_token=new_token,
            )  # fmt: skip
            if entry is None:
                raise _stale(handle)
            self._pops.record_change(key, handle.offset, entry)
        self._core.wake(topic, handle.queue_id)  # waiting receives re-plan
        return Handle(handle.queue_id, handle.offset, new_token)

    def forward_to_dlq(self, group: str, topic: str, handle: Handle) -> None:
        key: Key = (group, topic, handle.queue_id)
        with self._pops.existing(key) as state:
            entry = None if state is None else state.inflight.get(handle.offset)
            if state is None or entry is None or entry.token != handle.token:
                raise _stale(handle)
            before = state.base
            record = self._read_one(topic, handle.queue_id, handle.offset)
            if record is not None:
                self._forward_to_dlq(group, record)
            state.drop(handle.offset)
            self._pops.record_acks(key, [handle.offset])
            self._commit(key, state, before)
        self._core.wake(topic, handle.queue_id)

    def release_client(
        self, client_id: str, delay_ms: int = RELEASE_DELAY_MS
    ) -> dict[tuple[str, int], int]:
        """A client left: its auto-renewed messages come back to the group ``delay_ms``
        from now. Returns how many per queue (topic, queue id); receives waiting on those
        queues are woken now, and must be woken again when ``delay_ms`` is over
        (:meth:`wake`)."""
        released: dict[tuple[str, int], int] = {}
        now = now_ms()
        for key in self._pops.queue_keys():
            with self._pops.queue(key, lambda: 0) as state:
                count = state.release_client(client_id, now, delay_ms)
                if count:
                    self._pops.record_snapshot(key, state)
            if count:
                queue = (key[1], key[2])
                released[queue] = released.get(queue, 0) + count
                self._core.wake(*queue)
        return released

    def wake(self, queues: Iterable[tuple[str, int]]) -> None:
        """Wake the receives waiting on ``queues`` (messages there became visible)."""
        for topic, queue_id in queues:
            self._core.wake(topic, queue_id)


def _token() -> int:
    return secrets.randbits(63)


def _stale(handle: Handle) -> V2Error:
    return V2Error(
        Code.INVALID_RECEIPT_HANDLE,
        f"receipt handle {handle.encode()} is not the latest delivery of queue "
        f"{handle.queue_id} offset {handle.offset}: it was acked already, expired and "
        "delivered again, or was never issued; use the handle of the latest delivery",
    )
