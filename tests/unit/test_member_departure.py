"""Members that leave without unregistering: when they leave, and which queue leases end.

The registry reports such a departure to ``on_departure`` (the broker ends the member's
leases there) before the group hears of it; an unregistered member keeps its leases (it
unlocks them itself after committing), and a client with a stream still open keeps them.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rmq_spark.broker.membership.groups import ConsumerRegistry, MembershipEvent, ends_leases
from rmq_spark.broker.membership.locks import Lease, QueueLockManager, leases_of
from rmq_spark.structs import MessageQueue
from tests.support.membership_fakes import FakeClock, Stream

GRACE_MS = 1000
TIMEOUT_MS = 10_000
Q0, Q1, Q2 = (MessageQueue("TopicA", "broker-a", i) for i in range(3))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def departed() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def registry(clock, departed):
    registry = ConsumerRegistry(
        TIMEOUT_MS,
        clock=clock,
        sweep_interval_ms=0,
        reconnect_grace_ms=GRACE_MS,
        on_departure=lambda group, cid: departed.append((group, cid)),
    )
    yield registry
    registry.close()


@pytest.fixture
def watch(loop):
    def open_stream(registry, cid: str = "", group: str = "GroupA") -> Stream:
        return Stream(loop, registry, group, cid)

    return open_stream


def ids(event: MembershipEvent) -> list[str]:
    return list(event.consumer_ids)


@pytest.mark.parametrize(
    ("reason", "live_streams", "ends"),
    [
        ("stream_closed", 0, True),
        ("session_expired", 0, True),
        ("session_expired", 1, False),  # its connection is alive: it may be consuming
        ("stream_closed", 2, False),
        ("unregistered", 0, False),  # an orderly leaver commits, then unlocks itself
        ("unregistered", 1, False),
    ],
)
def test_which_departures_end_leases(reason, live_streams, ends) -> None:
    assert ends_leases(reason, live_streams) is ends


@pytest.mark.parametrize(
    ("table", "client_id", "now_ms", "lost"),
    [
        ({Q1: Lease("c1", 500), Q0: Lease("c1", 500)}, "c1", 100, [Q0, Q1]),
        ({Q0: Lease("c1", 500), Q1: Lease("c2", 500)}, "c1", 100, [Q0]),
        ({Q0: Lease("c1", 100), Q1: Lease("c1", 101)}, "c1", 100, [Q1]),  # Q0 has run out
        ({Q0: Lease("c2", 500)}, "c1", 100, []),
        ({}, "c1", 100, []),
    ],
)
def test_the_queues_a_departed_client_loses(table, client_id, now_ms, lost) -> None:
    assert leases_of(table, client_id, now_ms) == lost


def test_end_leases_frees_one_clients_queues_in_one_group_only() -> None:
    locks = QueueLockManager(lease_ms=60_000)
    locks.lock("GroupA", "c1", [Q0, Q1])
    locks.lock("GroupA", "c2", [Q2])
    locks.lock("GroupB", "c1", [Q0])

    assert locks.end_leases("GroupA", "c1") == [Q0, Q1]

    assert locks.lock("GroupA", "c3", [Q0, Q1, Q2])[0] == [Q0, Q1]
    assert locks.holder("GroupA", Q2) == "c2"
    assert locks.holder("GroupB", Q0) == "c1"
    assert locks.end_leases("GroupA", "nobody") == []


def test_a_closed_stream_leaves_after_the_grace_and_its_leases_end_first(watch, clock) -> None:
    locks = QueueLockManager(lease_ms=60_000)
    seen: list[tuple[str, str, str | None]] = []

    def on_departure(group: str, cid: str) -> None:
        locks.end_leases(group, cid)
        seen.append((group, cid, locks.holder(group, Q0)))

    registry = ConsumerRegistry(
        TIMEOUT_MS,
        clock=clock,
        sweep_interval_ms=0,
        reconnect_grace_ms=GRACE_MS,
        on_departure=on_departure,
    )
    registry.heartbeat("c1", "GroupA")
    registry.heartbeat("c2", "GroupA")
    locks.lock("GroupA", "c1", [Q0])
    observer = watch(registry)
    assert ids(next(observer)) == ["c1", "c2"]
    c1 = watch(registry, "c1")
    next(c1)

    c1.close()
    clock.advance(GRACE_MS - 1)
    assert registry.expire_silent() == []
    assert registry.members("GroupA") == ["c1", "c2"]
    assert locks.holder("GroupA", Q0) == "c1"

    clock.advance(1)
    assert registry.expire_silent() == [("GroupA", "c1")]
    assert seen == [("GroupA", "c1", None)]
    assert ids(next(observer)) == ["c2"]  # one event, after the leases ended
    assert locks.lock("GroupA", "c2", [Q0])[0] == [Q0]
    observer.close()
    registry.close()


def test_reopening_the_stream_within_the_grace_keeps_the_member(
    watch, registry, clock, departed
) -> None:
    registry.heartbeat("c1", "GroupA")
    observer = watch(registry)
    first = next(observer)
    old = watch(registry, "c1")
    next(old)

    old.close()  # a network blip: the client reconnects
    clock.advance(GRACE_MS - 100)
    new = watch(registry, "c1")
    next(new)
    clock.advance(GRACE_MS)

    assert registry.expire_silent() == []
    assert registry.members("GroupA") == ["c1"]
    assert registry.snapshot("GroupA").version == first.version  # the group saw no change
    assert departed == []
    new.close()
    observer.close()


def test_a_new_stream_opened_before_the_old_one_closes_keeps_the_member(
    watch, registry, clock, departed
) -> None:
    registry.heartbeat("c1", "GroupA")
    old = watch(registry, "c1")
    next(old)
    new = watch(registry, "c1")
    next(new)

    old.close()
    clock.advance(GRACE_MS * 5)

    assert registry.expire_silent() == []
    assert registry.members("GroupA") == ["c1"]
    assert departed == []
    new.close()


def test_unregistering_after_closing_the_stream_keeps_the_leases(
    watch, registry, clock, departed
) -> None:
    # An orderly shutdown that closes its stream first: it commits, then unlocks itself.
    registry.heartbeat("c1", "GroupA")
    stream = watch(registry, "c1")
    next(stream)

    stream.close()
    clock.advance(10)
    assert registry.unregister("c1", "GroupA")
    clock.advance(GRACE_MS)

    assert registry.expire_silent() == []
    assert registry.members("GroupA") == []
    assert departed == []


def test_a_heartbeat_does_not_stand_in_for_the_closed_stream(
    watch, registry, clock, departed
) -> None:
    # A heartbeat already on its way when the client died must not keep it in the group.
    registry.heartbeat("c1", "GroupA")
    stream = watch(registry, "c1")
    next(stream)
    stream.close()
    clock.advance(GRACE_MS // 2)
    registry.heartbeat("c1", "GroupA")
    clock.advance(GRACE_MS // 2)

    assert registry.members("GroupA") == []  # a read drops departed members too
    assert departed == [("GroupA", "c1")]


def test_session_expiry_ends_leases_only_without_a_live_stream(
    watch, registry, clock, departed
) -> None:
    registry.heartbeat("silent", "GroupA")
    registry.heartbeat("streaming", "GroupA")
    stream = watch(registry, "streaming")
    next(stream)

    clock.advance(TIMEOUT_MS)
    expired = registry.expire_silent()

    assert sorted(expired) == [("GroupA", "silent"), ("GroupA", "streaming")]
    assert departed == [("GroupA", "silent")]
    stream.close()
    assert departed == [("GroupA", "silent")]  # no longer a member: nothing more to end


def test_without_a_grace_a_closed_stream_leaves_at_once(watch, clock) -> None:
    departed: list[tuple[str, str]] = []
    registry = ConsumerRegistry(
        TIMEOUT_MS,
        clock=clock,
        sweep_interval_ms=0,
        on_departure=lambda group, cid: departed.append((group, cid)),
    )
    registry.heartbeat("c1", "GroupA")
    stream = watch(registry, "c1")
    next(stream)

    stream.close()

    assert registry.members("GroupA") == []
    assert departed == [("GroupA", "c1")]
    registry.close()


def test_the_background_sweep_ends_a_departure_on_time(loop) -> None:
    # Sweeps run every second here; the departure is due after 100 ms and must not wait.
    registry = ConsumerRegistry(60_000, reconnect_grace_ms=100, sweep_interval_ms=1000)
    try:
        registry.heartbeat("c1", "GroupA")
        registry.heartbeat("c2", "GroupA")

        async def scenario() -> float:
            observer = registry.watch("GroupA")
            assert ids(await anext(observer)) == ["c1", "c2"]
            c1 = registry.watch("GroupA", "c1")
            await anext(c1)
            await c1.aclose()
            closed = time.monotonic()
            assert ids(await asyncio.wait_for(anext(observer), 5)) == ["c2"]
            await observer.aclose()
            return time.monotonic() - closed

        waited = loop.run_until_complete(scenario())
    finally:
        registry.close()
    assert 0.09 < waited < 0.6
