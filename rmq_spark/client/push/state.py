"""What the parts of a push consumer share: its owned queues, subscriptions and counters.

:class:`MemberState` is the one object the fetcher, the coordinator, the queue ownership
and the consume services read and change (each under the locks named below);
:class:`QueueState` is one owned queue; :class:`Timers` runs delayed callbacks.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import PendingCall
from rmq_spark.client.consumer import ReadFilter
from rmq_spark.client.groups import unlock_queues
from rmq_spark.client.process_queue import ProcessQueue
from rmq_spark.client.push.config import MessageModel, PushConsumerConfig
from rmq_spark.client.push.queue_phase import Event, Phase, next_phase, restart_after_release
from rmq_spark.errors import RocketliteError
from rmq_spark.offsets.store import OffsetStore
from rmq_spark.structs import MessageQueue

__all__ = ["MemberState", "QueueState", "Timers"]

log = logging.getLogger("rmq_spark.client.push")


class QueueState:
    """One owned queue: its ProcessQueue, pull position, lease and phase.

    The phase starts PENDING and changes only through :meth:`apply`.
    """

    def __init__(self, mq: MessageQueue, lease_deadline: float) -> None:
        self.mq = mq
        self.pq = ProcessQueue()
        self.next_offset = 0
        self.phase = Phase.PENDING
        # phase.released, kept by apply(): read before every listener call, where an enum
        # property (with its member lookups) costs many times a plain attribute
        self.released = False
        self.lease_deadline = lease_deadline  # monotonic seconds; inf without leases
        self.drain_deadline = 0.0  # while DRAINING
        self.release_give_up_at = 0.0  # while RELEASING: when to stop retrying the commit
        self.release_retry_at = 0.0  # while RELEASING: the next commit attempt
        self.call: PendingCall | None = None
        self.lock = threading.RLock()
        # orderly consumption
        self.pending: collections.deque = collections.deque()
        self.running = False
        self.attempts: dict[int, int] = {}
        self.base_reconsume: dict[int, int] = {}

    def apply(self, event: Event, *, only_from: Phase | None = None) -> bool:
        """Move the queue to the phase ``event`` leads to (:func:`next_phase`), under
        :attr:`lock`; the one place a phase changes.

        With ``only_from``, nothing happens and the answer is False unless the queue is in
        that phase: the caller decided on an earlier look, and another thread may have moved
        the queue on since. Raises
        :class:`~rmq_spark.client.push.queue_phase.IllegalTransitionError` for an event the
        phase has no transition for.
        """
        with self.lock:
            if only_from is not None and self.phase is not only_from:
                return False
            self.phase = next_phase(self.phase, event)
            self.released = self.phase.released
            return True

    def lease_valid(self) -> bool:
        return time.monotonic() < self.lease_deadline

    def cancel_pull(self) -> None:
        call = self.call
        if call is not None:
            call.cancel()


class Timers:
    """One thread that runs short callbacks when they are due."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn, args))
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                if self._stopped:
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except Exception:
                log.exception("push consumer timer callback %r failed", fn)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(5)


class MemberState:
    """A group member's shared state.

    ``lock`` guards ``states``, ``pending``, ``waiting_logged``, ``allocation`` and
    ``subscriptions``; each :class:`QueueState` has its own lock for its phase and pull
    position. ``wake`` wakes the housekeeping thread.
    """

    def __init__(
        self,
        group: str,
        client_id: str,
        message_model: MessageModel,
        config: PushConsumerConfig,
        cluster: Cluster,
        offsets: OffsetStore,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self.message_model: MessageModel = message_model
        self.config = config
        self.cluster = cluster
        self.offsets = offsets
        self.lock = threading.RLock()
        self.states: dict[MessageQueue, QueueState] = {}
        self.pending: set[MessageQueue] = set()  # allocated, lease not yet obtained
        self.waiting_logged: set[MessageQueue] = set()
        self.allocation: dict[str, frozenset[MessageQueue]] = {}
        #: topic -> what is read of it (tags or a SQL92 selector)
        self.subscriptions: dict[str, ReadFilter] = {}
        self.stopping = threading.Event()
        self.pool_closed = False
        self.wake = threading.Event()
        self.timers: Timers | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._count_lock = threading.Lock()

    # --- counters ------------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        if n:
            with self._count_lock:
                self._counts[name] += n

    def count_many(self, counts: dict[str, int]) -> None:
        with self._count_lock:
            for name, n in counts.items():
                if n:
                    self._counts[name] += n

    def stats(self) -> dict[str, int]:
        with self._count_lock:
            return dict(self._counts)

    # --- shared actions ------------------------------------------------------------------

    def later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the timer thread after ``delay_s`` (nothing once stopped)."""
        if self.timers is not None:
            self.timers.call_later(delay_s, fn, *args)

    def consumed(self, st: QueueState, offsets: Iterable[int]) -> None:
        """Messages of ``st`` are done: move the queue's offset to what is now committable."""
        committable = st.pq.remove_messages(offsets)
        if committable >= 0 and not st.released:
            self.offsets.update_offset(st.mq, committable)
        if st.phase is Phase.DRAINING:
            self.wake.set()

    def draining(self) -> list[QueueState]:
        """Queues being handed over, or released with their final commit still to do."""
        with self.lock:
            return [st for st in self.states.values() if st.phase.handing_over]

    def phases(self) -> dict[MessageQueue, Phase]:
        """The phase of each queue the member has state for (call with :attr:`lock` held
        for a view consistent with :attr:`pending`)."""
        with self.lock:
            return {mq: st.phase for mq, st in self.states.items()}

    def unlock_quietly(self, mqs: Iterable[MessageQueue]) -> None:
        """Release leases we may hold (a no-op on the broker for those we do not)."""
        mqs = sorted(mqs)
        if not mqs or self.message_model != "CLUSTERING":
            return
        try:
            unlock_queues(self.cluster, self.group, self.client_id, mqs)
        except RocketliteError as exc:
            log.warning("group %r: cannot release %d queues: %s", self.group, len(mqs), exc)

    def restart_if_allocated(self, mq: MessageQueue) -> bool:
        """Queue ``mq`` (whose state was just dropped) for a fresh start when the last
        rebalance gave it to this member; False when it went elsewhere."""
        with self.lock:
            restart = restart_after_release(mq, self.allocation, self.stopping.is_set())
            if restart:
                self.pending.add(mq)
        if restart:
            self.wake.set()
        return restart
