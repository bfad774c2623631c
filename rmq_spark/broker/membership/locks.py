"""Queue locks: leases that give one client of a group a queue for a while.

The broker side of RocketMQ's LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (RebalanceLockManager):
orderly consumers lock their queues so that two members never process one queue at the same
time, and renew the locks well before they expire. A lease ends when its holder unlocks it
or when it is not renewed in time; then any client may take the queue. Leases do not depend
on group membership, so readers that are not members (Spark tasks) can hold them too; but
when a member leaves its group without unregistering (it crashed: its connection closed, or
its session timed out), the broker ends its leases in that group at once
(:meth:`QueueLockManager.end_leases`), so its queues move to the others without waiting
for the leases to run out.

Expiry is timed with a monotonic clock (milliseconds), so a change of the wall clock cannot
end a lease early and let two clients hold one queue.

>>> locks = QueueLockManager(lease_ms=60_000)
>>> mq = MessageQueue("TopicA", "broker-a", 0)
>>> locks.lock("GroupA", "client-1", [mq])[0]
[MessageQueue(topic='TopicA', broker_name='broker-a', queue_id=0)]
>>> locks.lock("GroupA", "client-2", [mq])[0]
[]
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from rmq_spark.clock import monotonic_ms
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.broker")


class Lease(NamedTuple):
    client_id: str
    expire_ms: int


def leases_of(
    leases: Mapping[MessageQueue, Lease], client_id: str, now_ms: int
) -> list[MessageQueue]:
    """The queues of a group's lease table ``client_id`` holds at ``now_ms``, sorted (what it
    loses when it leaves the group without unlocking)."""
    return sorted(
        mq
        for mq, lease in leases.items()
        if lease.client_id == client_id and lease.expire_ms > now_ms
    )


class QueueLockManager:
    """Queue leases per consumer group; thread-safe.

    ``lease_ms`` is both the default lease and the longest one a caller may ask for.
    ``clock`` returns milliseconds (monotonic by default; inject a fake one in tests).
    """

    def __init__(self, lease_ms: int, *, clock: Callable[[], int] = monotonic_ms) -> None:
        if lease_ms <= 0:
            raise InvalidArgumentError(f"queue lock lease_ms={lease_ms!r} must be > 0")
        self.lease_ms = lease_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, dict[MessageQueue, Lease]] = {}

    def now(self) -> int:
        """The manager's clock, in the time base of the returned expiry times."""
        return self._clock()

    def effective_lease_ms(self, lease_ms: int | None = None) -> int:
        """The lease a request gets: the default for None or 0, never more than the default."""
        if lease_ms is None or lease_ms == 0:
            return self.lease_ms
        if lease_ms < 0:
            raise InvalidArgumentError(
                f"lease_ms={lease_ms} must be > 0 (or 0 for the broker's {self.lease_ms} ms)"
            )
        return min(lease_ms, self.lease_ms)

    def lock(
        self,
        group: str,
        client_id: str,
        queues: Iterable[MessageQueue],
        lease_ms: int | None = None,
    ) -> tuple[list[MessageQueue], int]:
        """Lock or renew ``queues`` for ``client_id``; returns the queues it now holds
        (sorted) and when their leases expire (manager clock). Queues held by another
        client whose lease has not expired are left out: an outcome, not an error."""
        lease = self.effective_lease_ms(lease_ms)
        wanted = sorted(set(queues))
        with self._lock:
            now = self._clock()
            expire = now + lease
            held = self._live_locked(group, now)
            locked = []
            for mq in wanted:
                current = held.get(mq)
                if current is None or current.client_id == client_id:
                    held[mq] = Lease(client_id, expire)
                    locked.append(mq)
            if held:
                self._groups[group] = held
            return locked, expire

    def unlock(
        self, group: str, client_id: str, queues: Iterable[MessageQueue]
    ) -> list[MessageQueue]:
        """Release the queues ``client_id`` holds among ``queues``; others' locks stay.
        Returns the queues released, sorted."""
        with self._lock:
            held = self._live_locked(group, self._clock())
            released = sorted(
                mq for mq in set(queues) if mq in held and held[mq].client_id == client_id
            )
            for mq in released:
                del held[mq]
            if not held:
                self._groups.pop(group, None)
            return released

    def end_leases(self, group: str, client_id: str) -> list[MessageQueue]:
        """End every lease ``client_id`` holds for ``group`` now, as if it had unlocked them
        (its holder left the group without unlocking); returns the queues freed, sorted."""
        with self._lock:
            now = self._clock()
            held = self._live_locked(group, now)
            ended = leases_of(held, client_id, now)
            for mq in ended:
                del held[mq]
            if not held:
                self._groups.pop(group, None)
        if ended:
            log.info(
                "queue leases of %s in group %s ended: it left the group; %s",
                client_id,
                group,
                ", ".join(f"{mq.topic}/{mq.broker_name}/{mq.queue_id}" for mq in ended),
            )
        return ended

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding ``mq`` for ``group`` now, or None."""
        with self._lock:
            lease = self._groups.get(group, {}).get(mq)
            if lease is None or lease.expire_ms <= self._clock():
                return None
            return lease.client_id

    def held_by(self, group: str, client_id: str) -> list[MessageQueue]:
        """The queues ``client_id`` holds for ``group`` now, sorted."""
        with self._lock:
            return leases_of(self._groups.get(group, {}), client_id, self._clock())

    def _live_locked(self, group: str, now: int) -> dict[MessageQueue, Lease]:
        """The group's lease table with expired leases dropped (so it only holds queues in
        use); the caller stores it back when it was empty and gets entries."""
        held = self._groups.get(group)
        if held is None:
            return {}
        for mq in [mq for mq, lease in held.items() if lease.expire_ms <= now]:
            del held[mq]
        if not held:
            del self._groups[group]
        return held
