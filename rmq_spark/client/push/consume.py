"""The two ways a push consumer runs its listener: concurrently and orderly.

Both take messages the pull side put into a queue's :class:`ProcessQueue` and report the
offsets that are done back to the consumer (:meth:`MemberState.consumed`), which turns
them into the queue's committable offset.

Concurrent (RocketMQ's ConsumeMessageConcurrentlyService): batches of up to
``consume_message_batch_max_size`` go to a thread pool. Failed messages are given back to the
broker (``%RETRY%{group}``, redelivered after a delay, ``%DLQ%{group}`` at
``max_reconsume_times``); when that fails (broker unreachable, writes off) they are consumed
again locally after ``send_back_retry_delay_ms`` and stay in flight meanwhile, so the
queue's offset cannot pass them.

Orderly (ConsumeMessageOrderlyService): one task per queue at a time, messages in queue
order; SUSPEND_CURRENT_QUEUE_A_MOMENT retries the same messages after a pause while the
queue waits; a message that keeps failing goes to the DLQ after ``max_reconsume_times``
local retries.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

from rmq_spark.client.groups import send_back
from rmq_spark.client.push.listener import (
    ConcurrentListener,
    ConsumeContext,
    ConsumeStatus,
    OrderlyContext,
    OrderlyListener,
    OrderlyStatus,
)
from rmq_spark.client.push.message import ReceivedMessage
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError

if TYPE_CHECKING:
    from rmq_spark.client.push.state import MemberState, QueueState

log = logging.getLogger("rmq_spark.client.push")

#: an orderly task gives its thread to other queues after this long (RocketMQ: 60 s)
ORDERLY_SLICE_S = 60.0
#: pause before looking again at a queue whose lease is being renewed
LEASE_WAIT_S = 0.5
#: a task running many listener batches reports finished offsets at least this often
REPORT_EVERY_S = 0.02
#: a listener call longer than this is slow: a pull's batches are spread over idle threads
#: (a thread hand-off costs tens of microseconds; a fast listener runs a whole pull in one)
SPREAD_ABOVE_S = 0.001


_Listener = TypeVar("_Listener", ConcurrentListener, OrderlyListener)


class _ConsumeService(Generic[_Listener]):
    def __init__(self, member: MemberState, listener: _Listener) -> None:
        self.member: MemberState = member
        self.config = member.config
        self.listener: _Listener = listener
        self.pool = ThreadPoolExecutor(
            self.config.consume_thread_count, thread_name_prefix=f"rmq-consume-{member.group}"
        )

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        if self.member.pool_closed:
            return
        try:
            self.pool.submit(fn, *args)
        except RuntimeError:  # the pool shut down between the check and the submit
            pass

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _give_back(
        self, st: QueueState, msg: ReceivedMessage, delay_level: int, dead_letter_now: bool
    ) -> bool:
        """Send ``msg`` to the retry topic (or the DLQ); False when it must be retried here.

        A broker that cannot be reached or takes no writes may come back: the message is
        retried locally for as long as that lasts (it stays in flight, so the queue's offset
        does not pass it). A record the broker no longer has (deleted by retention) cannot be
        given back at all: it is retried locally up to ``max_reconsume_times``, then
        dropped with an error naming it, instead of holding the queue forever.
        """
        member = self.member
        try:
            result = send_back(
                member.cluster,
                member.group,
                msg.message_queue.broker_name,
                msg.commit_log_offset,
                msg.topic,
                delay_level=delay_level,
                max_reconsume_times=self.config.max_reconsume_times,
                dead_letter_now=dead_letter_now,
                reconsume_times=msg.reconsume_times,
            )
        except RocketliteError as exc:
            permanent = isinstance(exc, (NotFoundError, InvalidArgumentError))
            if permanent and msg.reconsume_times >= self.config.max_reconsume_times:
                log.error(
                    "group %r: message %s (offset %d of %s) failed %d times and cannot be "
                    "given back to the broker (%s); it is dropped",
                    member.group,
                    msg.msg_id,
                    msg.queue_offset,
                    st.mq,
                    msg.reconsume_times + 1,
                    exc,
                )
                member.count("dropped")
                return True
            log.warning(
                "group %r: cannot give message %s (offset %d of %s) back to the broker: %s; "
                "consuming it again here in %d ms",
                member.group,
                msg.msg_id,
                msg.queue_offset,
                st.mq,
                exc,
                self.config.send_back_retry_delay_ms,
            )
            member.count("send_back_failed")
            return False
        if result.dead_lettered:
            log.warning(
                "group %r: message %s went to the dead-letter queue %s after %d deliveries",
                member.group,
                msg.msg_id,
                result.queue.topic,
                msg.reconsume_times + 1,
            )
            member.count("dead_lettered")
        else:
            member.count("sent_back")
        return True


class ConcurrentService(_ConsumeService[ConcurrentListener]):
    """Runs a concurrent listener on a thread pool."""

    def __init__(self, member: MemberState, listener: ConcurrentListener) -> None:
        super().__init__(member, listener)
        self._tasks = 0  # submitted, not finished
        self._tasks_lock = threading.Lock()
        #: how long the latest listener call took (written without a lock: a hint)
        self._call_s = 0.0

    def dispatch(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        """Hand a pull's messages (``offsets`` are their queue offsets) to the pool.

        A pool task costs a thread hand-off (tens of microseconds), more than a fast
        listener's work, so a whole pull is one task that calls the listener batch after
        batch. When the listener is slow (a call over ``SPREAD_ABOVE_S``), the batches are
        spread over the idle threads instead, here or as soon as a task notices.
        """
        if self._call_s > SPREAD_ABOVE_S:
            self._spread(st, messages, offsets)
        else:
            self._submit(st, messages, offsets)

    def _spread(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        """One task per idle thread (one at least), each a run of whole listener batches."""
        size = self.config.consume_message_batch_max_size
        batches = -(-len(messages) // size)
        with self._tasks_lock:
            idle = self.config.consume_thread_count - self._tasks
        tasks = max(1, min(batches, idle))
        per_task = -(-batches // tasks) * size
        for start in range(0, len(messages), per_task):
            stop = start + per_task
            self._submit(st, messages[start:stop], offsets[start:stop])

    def _submit(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        with self._tasks_lock:
            self._tasks += 1
        self.submit(self._run_batches, st, messages, offsets)

    def _run_batches(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        """Call the listener on each batch in turn; report what is done now and then.

        Done offsets and counters are reported once per task (or every
        ``REPORT_EVERY_S`` with a slow listener), not once per listener call: the process
        queue, the offset store and the counters each take a lock. Batches that fully
        succeed (the usual case) cost no work here beyond the call: their offsets are
        reported as one slice of ``offsets``.
        """
        size = self.config.consume_message_batch_max_size
        total = len(messages)
        listener, mq, clock = self.listener, st.mq, time.monotonic
        success, context_of = ConsumeStatus.CONSUME_SUCCESS, ConsumeContext
        done: list[np.ndarray] = []
        counts = {"consumed_ok": 0, "consumed_failed": 0}
        reported = end = 0  # offsets[reported:end] are done and not reported yet
        last_report = clock()
        try:
            for start in range(0, total, size):
                stop = start + size
                batch = messages[start:stop]
                began = clock()
                if st.released:
                    return  # the queue went to another member; it redelivers these
                if began >= st.lease_deadline:  # the housekeeping thread renews or drops it
                    self.member.later(
                        LEASE_WAIT_S, self._retry, st, messages[start:], offsets[start:]
                    )
                    return
                context = context_of(mq)
                try:
                    status = listener(batch, context)
                except Exception:
                    log.exception(
                        "group %r: the listener raised on %d messages of %s; they will be retried",
                        self.member.group,
                        len(batch),
                        mq,
                    )
                    status, context.ack_index = ConsumeStatus.RECONSUME_LATER, None
                if status is success and context.ack_index is None:
                    counts["consumed_ok"] += len(batch)
                else:
                    partly = self._settle(st, batch, offsets[start:stop], status, context, counts)
                    done += [offsets[reported:start], partly]
                    reported = stop
                end = stop
                now = clock()
                self._call_s = now - began
                if stop < total and now - began > SPREAD_ABOVE_S:
                    self._spread(st, messages[stop:], offsets[stop:])  # the rest in parallel
                    return
                if now - last_report > REPORT_EVERY_S:
                    done.append(offsets[reported:end])
                    reported = end
                    self._report(st, done)
                    done = []
                    last_report = now
        finally:
            if end > reported:
                done.append(offsets[reported:end])
            if done:
                self._report(st, done)
            self.member.count_many(counts)
            with self._tasks_lock:
                self._tasks -= 1

    def _report(self, st: QueueState, done: list[np.ndarray]) -> None:
        done = [part for part in done if len(part)]
        if done:
            self.member.consumed(st, done[0] if len(done) == 1 else np.concatenate(done))

    def _retry(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        self._submit(st, messages, offsets)

    def _settle(
        self,
        st: QueueState,
        messages: Sequence[ReceivedMessage],
        offsets: np.ndarray,
        status: object,
        context: ConsumeContext,
        counts: dict[str, int],
    ) -> np.ndarray:
        """A listener call that did not plainly succeed: give failed messages back (or keep
        them for a local retry); returns the offsets that are finished."""
        member = self.member
        last = len(messages) - 1
        if status is ConsumeStatus.CONSUME_SUCCESS:
            if context.ack_index is None or context.ack_index >= last:
                counts["consumed_ok"] += len(messages)
                return offsets
            ack = context.ack_index
        elif not isinstance(status, ConsumeStatus):
            log.error(
                "group %r: the listener returned %r for %d messages of %s; return "
                "ConsumeStatus.CONSUME_SUCCESS or ConsumeStatus.RECONSUME_LATER. Retrying them.",
                member.group,
                status,
                len(messages),
                st.mq,
            )
            ack = -1
        elif context.ack_index is None or self.config.retry_whole_batch_on_failure:
            ack = -1
        else:
            ack = min(context.ack_index, last)
        failed = messages[ack + 1 :]
        counts["consumed_ok"] += ack + 1
        counts["consumed_failed"] += len(failed)
        keep: list[ReceivedMessage] = []
        if not failed:
            pass
        elif member.message_model == "BROADCASTING":
            log.warning(
                "group %r (broadcasting): %d messages of %s failed and are dropped (broadcast "
                "messages are not retried), first offset %d",
                member.group,
                len(failed),
                st.mq,
                offsets[ack + 1],
            )
        else:
            level = context.delay_level_when_next_consume
            keep = [m for m in failed if not self._give_back(st, m, level, False)]
        if not keep:
            return offsets
        kept = {id(m) for m in keep}
        retried = np.fromiter((id(m) in kept for m in messages), dtype=bool, count=len(messages))
        for m in keep:
            m.reconsume_times += 1
        member.count("local_retries", len(keep))
        delay_s = self.config.send_back_retry_delay_ms / 1000
        member.later(delay_s, self._retry, st, keep, offsets[retried])
        return offsets[~retried]


class OrderlyService(_ConsumeService[OrderlyListener]):
    """Runs an orderly listener: one task per queue at a time, in queue order."""

    def dispatch(
        self, st: QueueState, messages: Sequence[ReceivedMessage], offsets: np.ndarray
    ) -> None:
        with st.lock:
            st.pending.extend(messages)
            if st.running:
                return
            st.running = True
        self.submit(self._run, st)

    def _resume(self, st: QueueState) -> None:
        self.submit(self._run, st)

    def _run(self, st: QueueState) -> None:
        member = self.member
        size = self.config.consume_message_batch_max_size
        slice_end = time.monotonic() + ORDERLY_SLICE_S
        while True:
            with st.lock:
                if st.released or not st.pending or member.pool_closed:
                    st.running = False
                    return
                batch = list(itertools.islice(st.pending, size))
            if not st.lease_valid():
                member.later(LEASE_WAIT_S, self._resume, st)
                return
            for m in batch:
                m.reconsume_times = st.base_reconsume.setdefault(
                    m.queue_offset, m.reconsume_times
                ) + st.attempts.get(m.queue_offset, 0)
            context = OrderlyContext(st.mq, self.config.suspend_current_queue_time_ms)
            try:
                status = self.listener(batch, context)
            except Exception:
                log.exception(
                    "group %r: the orderly listener raised on %d messages of %s (first offset "
                    "%d); the queue waits and retries them",
                    member.group,
                    len(batch),
                    st.mq,
                    batch[0].queue_offset,
                )
                status = OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if not isinstance(status, OrderlyStatus):
                log.error(
                    "group %r: the orderly listener returned %r; return OrderlyStatus.SUCCESS or "
                    "OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT. Retrying the messages.",
                    member.group,
                    status,
                )
                status = OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if status is OrderlyStatus.SUCCESS:
                member.count("consumed_ok", len(batch))
                self._done(st, batch)
            else:
                member.count("consumed_failed", len(batch))
                if self._suspend(st, batch):
                    pause_s = max(0, context.suspend_current_queue_time_ms) / 1000
                    member.later(pause_s, self._resume, st)
                    return
            if time.monotonic() >= slice_end:
                member.later(0, self._resume, st)
                return

    def _done(self, st: QueueState, batch: list[ReceivedMessage]) -> None:
        offsets = {m.queue_offset for m in batch}
        with st.lock:
            head = list(itertools.islice(st.pending, len(batch)))
            if [m.queue_offset for m in head] == [m.queue_offset for m in batch]:
                for _ in batch:
                    st.pending.popleft()
            else:
                st.pending = type(st.pending)(
                    m for m in st.pending if m.queue_offset not in offsets
                )
            for offset in offsets:
                st.attempts.pop(offset, None)
                st.base_reconsume.pop(offset, None)
        self.member.consumed(st, sorted(offsets))

    def _suspend(self, st: QueueState, batch: list[ReceivedMessage]) -> bool:
        """Count a failed attempt; messages out of attempts go to the DLQ. True when the
        queue must wait and retry (some message is still to be consumed)."""
        limit = self.config.max_reconsume_times
        finished: list[ReceivedMessage] = []
        retry = False
        for m in batch:
            attempts = st.attempts.get(m.queue_offset, 0)
            if attempts < limit:
                st.attempts[m.queue_offset] = attempts + 1
                retry = True
            elif self.member.message_model == "BROADCASTING":
                log.warning(
                    "group %r (broadcasting): message %s of %s failed %d times and is skipped",
                    self.member.group,
                    m.msg_id,
                    st.mq,
                    attempts + 1,
                )
                finished.append(m)
            elif self._give_back(st, m, 0, True):
                finished.append(m)
            else:
                retry = True
        if finished:
            self._done(st, finished)
        return retry
