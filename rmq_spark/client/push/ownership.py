"""Queue ownership of a push consumer: leases, start offsets, hand-over and release.

A queue's life in one member, in the phases of :mod:`~rmq_spark.client.push.queue_phase`:
PENDING (allocated, lease not yet granted) -> ACTIVE (lease held, pulled and consumed) ->
DRAINING (allocated elsewhere, or the member shuts down: no more pulls, what was pulled is
still consumed, for up to ``drain_timeout_ms``; allocated back meanwhile, it is ACTIVE
again) -> RELEASING (nothing more is consumed: the committable offset is committed
synchronously, retried every second while it fails, for up to ``drain_timeout_ms``) ->
RELEASED (the lease is given up; a queue allocated back meanwhile starts over as pending).
The next owner cannot get the lease before that and reads the committed offset after it,
so a graceful hand-over delivers nothing twice. A queue whose lease renewal is refused
(another member holds it) is RELEASED at once, from any phase that holds the lease.
"""

from __future__ import annotations

import logging
import time

from rmq_spark.client import offsets as offset_rpc
from rmq_spark.client.groups import lock_queues
from rmq_spark.client.push.fetcher import Fetcher
from rmq_spark.client.push.queue_phase import (
    Event,
    Phase,
    RebalancePlan,
    commit_event,
    drain_event,
)
from rmq_spark.client.push.state import MemberState, QueueState
from rmq_spark.errors import RocketliteError
from rmq_spark.names import RETRY_PREFIX
from rmq_spark.offsets.store import ReadOffsetType
from rmq_spark.structs import MessageQueue

__all__ = ["Ownership"]

log = logging.getLogger("rmq_spark.client.push")


class Ownership:
    """Takes, keeps and gives back the queues the rebalance allocates to ``member``."""

    def __init__(self, member: MemberState, fetcher: Fetcher) -> None:
        self.member = member
        self.fetcher = fetcher

    def acquire(self) -> None:
        """Start the pending queues whose lease we get (all of them in BROADCASTING)."""
        member = self.member
        with member.lock:
            pending = sorted(member.pending)
        if not pending:
            return
        if member.message_model == "BROADCASTING":
            for mq in pending:
                self._start_queue(mq, float("inf"))
            return
        sent = time.monotonic()
        leases = lock_queues(
            member.cluster, member.group, member.client_id, pending, member.config.queue_lease_ms
        )
        locked: set[MessageQueue] = set()
        for broker, lease in leases.items():
            if isinstance(lease, RocketliteError):
                log.warning(
                    "group %r: cannot lock queues on broker %r: %s", member.group, broker, lease
                )
                continue
            for mq in sorted(lease.queues):
                locked.add(mq)
                self._start_queue(mq, sent + lease.lease_ms / 1000)
        for mq in pending:
            if mq not in locked and mq not in member.waiting_logged:
                member.waiting_logged.add(mq)
                log.info(
                    "group %r: waiting for the previous owner of %s to release it",
                    member.group,
                    mq,
                )

    def _start_queue(self, mq: MessageQueue, lease_deadline: float) -> None:
        member = self.member
        with member.lock:
            if mq not in member.pending or member.stopping.is_set():
                return
        try:
            offset = self._start_offset(mq)
        except RocketliteError as exc:
            log.warning("group %r: cannot find where to start %s: %s", member.group, mq, exc)
            return
        with member.lock:
            st = QueueState(mq, lease_deadline)
            st.apply(Event.LEASE_GRANTED)
            st.next_offset = offset
            member.offsets.update_offset(mq, offset, increase_only=False)
            member.states[mq] = st
            member.pending.discard(mq)
            member.waiting_logged.discard(mq)
        log.info(
            "group %r: %s consuming %s from offset %d", member.group, member.client_id, mq, offset
        )
        self.fetcher.schedule_pull(st)

    def _start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else the ConsumeFromWhere start (facts sheet section 6)."""
        member = self.member
        read = (
            ReadOffsetType.READ_FROM_STORE
            if member.message_model == "CLUSTERING"
            else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        )
        committed = member.offsets.read_offset(mq, read)
        if committed >= 0:
            return committed
        config = member.config
        stamp = config.consume_timestamp_ms if config.consume_from == "TIMESTAMP" else None
        answer = offset_rpc.query_queue_offsets(member.cluster, [mq], stamp)[mq]
        if mq.topic.startswith(RETRY_PREFIX) or config.consume_from == "FIRST_OFFSET":
            return answer.min_offset
        if config.consume_from == "TIMESTAMP" and answer.timestamp_offset is not None:
            return answer.timestamp_offset
        return answer.max_offset

    def renew_leases(self) -> None:
        member = self.member
        if member.message_model != "CLUSTERING":
            return
        with member.lock:
            held = [mq for mq, st in member.states.items() if st.phase.lease_held]
        if not held:
            return
        sent = time.monotonic()
        leases = lock_queues(
            member.cluster, member.group, member.client_id, held, member.config.queue_lease_ms
        )
        for broker, lease in leases.items():
            if isinstance(lease, RocketliteError):
                log.warning(
                    "group %r: cannot renew queue leases on broker %r: %s; its queues pause "
                    "when the leases run out",
                    member.group,
                    broker,
                    lease,
                )
                continue
            for mq in held:
                if mq.broker_name != broker:
                    continue
                st = member.states.get(mq)
                if st is None:
                    continue
                if mq in lease.queues:
                    st.lease_deadline = sent + lease.lease_ms / 1000
                else:
                    self._lose(st)

    def _lose(self, st: QueueState) -> None:
        """Our lease on ``st`` ran out and another member holds the queue: stop at once."""
        member = self.member
        with st.lock:
            if not st.phase.lease_held:
                return  # released meanwhile (an illegal offset on the pull thread)
            st.apply(Event.LEASE_LOST)
        log.warning(
            "group %r: the lease on %s expired and another member took the queue; stopping it "
            "(messages in flight may be delivered twice)",
            member.group,
            st.mq,
        )
        st.cancel_pull()
        with member.lock:
            member.states.pop(st.mq, None)
        member.offsets.remove_offset(st.mq)

    def carry_out(self, plan: RebalancePlan) -> None:
        """Start the drains, reactivations and pending changes of ``plan`` (call with
        ``member.lock`` held; the caller then releases the leases of ``plan.pending_drop``).
        A queue whose phase changed since the plan was made is left as it is."""
        member = self.member
        for mq in sorted(plan.to_drain):
            st = member.states.get(mq)
            if st is not None:
                self.start_drain(st)
        for mq in sorted(plan.to_reactivate):
            st = member.states.get(mq)
            if st is not None:
                self.reactivate(st)
        member.pending -= plan.pending_drop
        member.pending |= plan.pending_add

    def _drain(self, st: QueueState, event: Event, now: float) -> bool:
        """ACTIVE -> DRAINING on ``event``: no more pulls, a deadline for what is in flight.
        False when ``st`` was no longer ACTIVE."""
        with st.lock:
            if not st.apply(event, only_from=Phase.ACTIVE):
                return False
            st.drain_deadline = now + self.member.config.drain_timeout_ms / 1000
        st.cancel_pull()
        return True

    def start_drain(self, st: QueueState) -> None:
        """``st`` is allocated elsewhere (or its topic unsubscribed): hand it over."""
        member = self.member
        if not self._drain(st, Event.ALLOCATED_ELSEWHERE, time.monotonic()):
            return
        log.info(
            "group %r: handing %s over; %d messages still in flight",
            member.group,
            st.mq,
            st.pq.msg_count,
        )
        member.wake.set()

    def drain_for_shutdown(self, st: QueueState, now: float) -> None:
        """The member is leaving its group: stop pulling ``st`` and let it drain."""
        self._drain(st, Event.SHUTDOWN, now)

    def reactivate(self, st: QueueState) -> None:
        """``st`` was given back to us before its hand-over finished: pull it again."""
        if st.apply(Event.ALLOCATED_AGAIN, only_from=Phase.DRAINING):
            self.fetcher.schedule_pull(st)

    def finish_drains(self, now: float) -> None:
        """Release the draining queues that are done (or timed out), and retry the final
        commits that failed."""
        member = self.member
        for st in member.draining():
            phase = st.phase
            if phase is Phase.DRAINING:
                in_flight = st.pq.msg_count
                event = drain_event(in_flight, now, st.drain_deadline)
                if event is None:
                    continue
                if event is Event.DRAIN_TIMED_OUT:
                    log.warning(
                        "group %r: %d messages of %s were still being consumed after %d ms; "
                        "committing what is done, the rest may be delivered again",
                        member.group,
                        in_flight,
                        st.mq,
                        member.config.drain_timeout_ms,
                    )
                if not self._start_release(st, event, now):
                    continue
            elif phase is not Phase.RELEASING or now < st.release_retry_at:
                continue
            self._release(st, now)

    def _start_release(self, st: QueueState, event: Event, now: float) -> bool:
        """DRAINING -> RELEASING: nothing more is consumed, so the committable offset is
        final; it goes to the offset store. False when ``st`` was no longer DRAINING."""
        if not st.apply(event, only_from=Phase.DRAINING):
            return False
        offset = st.pq.committable_offset()
        if offset >= 0:
            self.member.offsets.update_offset(st.mq, offset)
        st.release_give_up_at = now + self.member.config.drain_timeout_ms / 1000
        return True

    def _release(self, st: QueueState, now: float) -> None:
        """Commit the offset of the RELEASING ``st`` synchronously, then give up its lease.

        The lease is kept while the commit fails (retried every second, for up to
        ``drain_timeout_ms``): releasing it first would let the next owner start from an
        older offset and deliver messages twice.
        """
        member = self.member
        offsets = member.offsets
        try:
            offsets.persist(st.mq)
            error: RocketliteError | None = None
        except RocketliteError as exc:
            error = exc
        event = commit_event(error is None, now, st.release_give_up_at)
        if event is Event.COMMIT_FAILED:
            st.apply(event)
            st.release_retry_at = now + 1.0
            log.warning(
                "group %r: cannot commit the offset of %s before handing it over (%s); "
                "keeping its lease and trying again",
                member.group,
                st.mq,
                error,
            )
            return
        if event is Event.GAVE_UP:
            log.warning(
                "group %r: gave up committing the offset of %s (%s); releasing it anyway, so "
                "the next owner may deliver some messages again",
                member.group,
                st.mq,
                error,
            )
        if not st.apply(event, only_from=Phase.RELEASING):
            return  # its lease was lost meanwhile: already dropped
        committed = offsets.read_offset(st.mq, ReadOffsetType.READ_FROM_MEMORY)
        offsets.remove_offset(st.mq)
        with member.lock:
            member.states.pop(st.mq, None)
        member.unlock_quietly([st.mq])
        log.info("group %r: released %s at offset %d", member.group, st.mq, committed)
        # given back to us while its commit was being retried: start it again
        member.restart_if_allocated(st.mq)

    def persist_all(self) -> None:
        member = self.member
        with member.lock:
            owned = [mq for mq, st in member.states.items() if not st.released]
        if not owned:
            return
        try:
            member.offsets.persist_all(owned)
        except RocketliteError as exc:
            log.warning("group %r: persisting offsets failed: %s", member.group, exc)
