"""Queue locks: leases that one client holds at a time, renewed or expiring."""

from __future__ import annotations

import pytest

from rmq_spark.broker.membership.locks import QueueLockManager
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

LEASE_MS = 60_000
Q0, Q1, Q2 = (MessageQueue("TopicA", "broker-a", i) for i in range(3))


class FakeClock:
    def __init__(self) -> None:
        self.ms = 5_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def locks(clock: FakeClock) -> QueueLockManager:
    return QueueLockManager(LEASE_MS, clock=clock)


def test_lock_grants_free_queues_sorted_with_their_expiry(locks, clock) -> None:
    locked, expire = locks.lock("GroupA", "c1", [Q2, Q0, Q2])
    assert locked == [Q0, Q2]
    assert expire == clock.ms + LEASE_MS
    assert locks.holder("GroupA", Q0) == "c1"
    assert locks.holder("GroupA", Q1) is None
    assert locks.held_by("GroupA", "c1") == [Q0, Q2]


def test_queue_held_by_another_client_is_not_granted(locks) -> None:
    locks.lock("GroupA", "c1", [Q0, Q1])
    locked, _ = locks.lock("GroupA", "c2", [Q0, Q1, Q2])
    assert locked == [Q2]
    assert locks.holder("GroupA", Q0) == "c1"


def test_renewal_extends_the_lease(locks, clock) -> None:
    locks.lock("GroupA", "c1", [Q0])
    clock.ms += LEASE_MS - 1
    locked, expire = locks.lock("GroupA", "c1", [Q0])  # renew just in time
    assert locked == [Q0]
    clock.ms += LEASE_MS - 1
    assert locks.lock("GroupA", "c2", [Q0])[0] == []
    assert locks.holder("GroupA", Q0) == "c1"
    assert expire == clock.ms + 1


def test_expired_lease_can_be_taken_over(locks, clock) -> None:
    locks.lock("GroupA", "c1", [Q0, Q1])
    clock.ms += LEASE_MS
    assert locks.holder("GroupA", Q0) is None
    assert locks.lock("GroupA", "c2", [Q0])[0] == [Q0]
    assert locks.holder("GroupA", Q0) == "c2"
    assert locks.lock("GroupA", "c1", [Q0, Q1])[0] == [Q1]  # the old holder lost Q0


def test_unlock_by_a_non_holder_is_ignored(locks) -> None:
    locks.lock("GroupA", "c1", [Q0])
    assert locks.unlock("GroupA", "c2", [Q0]) == []
    assert locks.holder("GroupA", Q0) == "c1"
    assert locks.unlock("GroupA", "c1", [Q0, Q1]) == [Q0]
    assert locks.holder("GroupA", Q0) is None
    assert locks.lock("GroupA", "c2", [Q0])[0] == [Q0]


def test_groups_lock_independently(locks) -> None:
    locks.lock("GroupA", "c1", [Q0])
    assert locks.lock("GroupB", "c2", [Q0])[0] == [Q0]


def test_requested_lease_is_capped_and_zero_means_default(locks, clock) -> None:
    assert locks.lock("GroupA", "c1", [Q0], lease_ms=1_000)[1] == clock.ms + 1_000
    assert locks.lock("GroupA", "c1", [Q0], lease_ms=10 * LEASE_MS)[1] == clock.ms + LEASE_MS
    assert locks.lock("GroupA", "c1", [Q0], lease_ms=0)[1] == clock.ms + LEASE_MS
    with pytest.raises(InvalidArgumentError, match="lease_ms=-1"):
        locks.lock("GroupA", "c1", [Q0], lease_ms=-1)


def test_short_lease_expires_on_its_own_time(locks, clock) -> None:
    locks.lock("GroupA", "c1", [Q0], lease_ms=1_000)
    clock.ms += 1_000
    assert locks.lock("GroupA", "c2", [Q0])[0] == [Q0]
