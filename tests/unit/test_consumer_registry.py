"""Consumer-group membership: joins, leaves, expiry and the change events watchers see."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rmq_spark.broker.membership.groups import ConsumerRegistry, MembershipEvent
from tests.support.membership_fakes import FakeClock, Stream

TIMEOUT_MS = 10_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def watch(loop):
    def open_stream(registry, group: str, cid: str = "") -> Stream:
        return Stream(loop, registry, group, cid)

    return open_stream


@pytest.fixture
def registry(clock: FakeClock):
    registry = ConsumerRegistry(TIMEOUT_MS, clock=clock, sweep_interval_ms=0)
    yield registry
    registry.close()


def ids(event: MembershipEvent) -> list[str]:
    return list(event.consumer_ids)


def test_members_are_sorted_client_ids(registry: ConsumerRegistry) -> None:
    for cid in ("10.0.0.3@9", "10.0.0.1@5", "10.0.0.2@7"):
        assert registry.heartbeat(cid, "GroupA", [("TopicA", "*")]) is True
    assert registry.members("GroupA") == ["10.0.0.1@5", "10.0.0.2@7", "10.0.0.3@9"]
    assert registry.members("GroupB") == []
    assert registry.groups() == ["GroupA"]


def test_repeated_heartbeat_is_not_a_change(registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA", [("TopicA", "*")])
    version = registry.snapshot("GroupA").version
    assert registry.heartbeat("c1", "GroupA", [("TopicA", "*")]) is False
    assert registry.snapshot("GroupA").version == version


def test_subscription_change_is_a_change(registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA", [("TopicA", "*")])
    version = registry.snapshot("GroupA").version
    assert registry.heartbeat("c1", "GroupA", [("TopicA", "*"), ("TopicB", "TagA")]) is True
    assert registry.snapshot("GroupA").version > version
    info = registry.consumer_info("GroupA", "c1")
    assert info is not None and info.subscriptions == (("TopicA", "*"), ("TopicB", "TagA"))


def test_watch_sees_current_membership_then_each_join_and_leave(
    watch,
    registry: ConsumerRegistry,
) -> None:
    registry.heartbeat("c2", "GroupA")
    stream = watch(registry, "GroupA")
    first = next(stream)
    assert ids(first) == ["c2"]

    registry.heartbeat("c1", "GroupA")
    joined = next(stream)
    registry.unregister("c2", "GroupA")
    left = next(stream)

    assert ids(joined) == ["c1", "c2"]
    assert ids(left) == ["c1"]
    assert first.version < joined.version < left.version
    assert left.version == registry.snapshot("GroupA").version
    stream.close()


def test_unregister_of_a_non_member_changes_nothing(registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA")
    version = registry.snapshot("GroupA").version
    assert registry.unregister("ghost", "GroupA") is False
    assert registry.unregister("c1", "OtherGroup") is False
    assert registry.snapshot("GroupA").version == version


def test_silent_members_expire_with_an_event(watch, registry: ConsumerRegistry, clock) -> None:
    registry.heartbeat("c1", "GroupA")
    registry.heartbeat("c2", "GroupA")
    stream = watch(registry, "GroupA")
    assert ids(next(stream)) == ["c1", "c2"]

    clock.advance(TIMEOUT_MS - 1)
    registry.heartbeat("c2", "GroupA")  # c2 stays alive, c1 stays silent
    assert registry.expire_silent() == []
    clock.advance(1)
    assert registry.expire_silent() == [("GroupA", "c1")]

    assert ids(next(stream)) == ["c2"]
    assert registry.members("GroupA") == ["c2"]
    stream.close()


def test_reads_drop_silent_members_without_a_sweep(registry: ConsumerRegistry, clock) -> None:
    registry.heartbeat("c1", "GroupA")
    clock.advance(TIMEOUT_MS)
    assert registry.members("GroupA") == []


def test_background_sweep_expires_members_and_notifies(
    watch,
) -> None:
    registry = ConsumerRegistry(200, sweep_interval_ms=20)
    try:
        registry.heartbeat("c1", "GroupA")
        stream = watch(registry, "GroupA")
        assert ids(next(stream)) == ["c1"]
        started = time.monotonic()
        assert ids(next(stream)) == []
        elapsed = time.monotonic() - started
        assert 0.1 < elapsed < 1.0
        stream.close()
    finally:
        registry.close()


def test_closing_a_members_stream_drops_it_and_tells_the_others(
    watch,
    registry: ConsumerRegistry,
) -> None:
    registry.heartbeat("c1", "GroupA")
    registry.heartbeat("c2", "GroupA")
    observer = watch(registry, "GroupA")
    assert ids(next(observer)) == ["c1", "c2"]
    c1_stream = watch(registry, "GroupA", "c1")
    next(c1_stream)

    c1_stream.close()

    assert ids(next(observer)) == ["c2"]
    assert registry.members("GroupA") == ["c2"]
    observer.close()
    assert registry.members("GroupA") == ["c2"]  # an observer stands for nobody


def test_cancelled_call_ends_the_stream_and_drops_the_member(
    loop, registry: ConsumerRegistry
) -> None:
    registry.heartbeat("c1", "GroupA")
    got: list = []
    first_event = asyncio.Event()

    async def read_stream() -> None:
        async for event in registry.watch("GroupA", "c1"):
            got.append(event)
            first_event.set()

    async def cancel_after_the_first_event() -> None:
        task = asyncio.create_task(read_stream())
        await first_event.wait()
        task.cancel()  # what grpc.aio does when the client goes away
        await asyncio.gather(task, return_exceptions=True)

    loop.run_until_complete(asyncio.wait_for(cancel_after_the_first_event(), 5))

    assert [ids(event) for event in got] == [["c1"]]
    assert registry.members("GroupA") == []


def test_member_with_a_second_stream_stays(watch, registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA")
    old = watch(registry, "GroupA", "c1")
    next(old)
    new = watch(registry, "GroupA", "c1")  # e.g. it reconnected before the old one ended
    next(new)
    old.close()
    assert registry.members("GroupA") == ["c1"]
    new.close()
    assert registry.members("GroupA") == []


def test_close_ends_blocked_streams_promptly(watch, loop, clock) -> None:
    registry = ConsumerRegistry(TIMEOUT_MS, clock=clock, sweep_interval_ms=0)
    registry.heartbeat("c1", "GroupA")
    stream = watch(registry, "GroupA", "c1")
    next(stream)
    closer = threading.Timer(0.05, registry.close)  # from another thread, as at shutdown
    closer.start()
    started = time.monotonic()

    assert list(stream) == []  # blocked until close() ended it

    assert 0.04 < time.monotonic() - started < 0.5
    closer.join()
    assert list(watch(registry, "GroupA")) == []  # a closed registry serves no new streams


def test_version_never_goes_back_when_a_group_empties(registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA")
    joined = registry.snapshot("GroupA").version
    registry.unregister("c1", "GroupA")
    emptied = registry.snapshot("GroupA").version
    registry.heartbeat("c1", "GroupB")  # other groups' changes move the shared counter
    assert joined < emptied <= registry.snapshot("GroupA").version
    registry.heartbeat("c1", "GroupA")
    assert registry.snapshot("GroupA").version > emptied


def test_groups_are_independent(watch, registry: ConsumerRegistry) -> None:
    registry.heartbeat("c1", "GroupA")
    stream = watch(registry, "GroupB")
    assert ids(next(stream)) == []
    registry.heartbeat("c2", "GroupB")
    assert ids(next(stream)) == ["c2"]
    assert registry.members("GroupA") == ["c1"]
    stream.close()


def test_concurrent_heartbeats_are_all_counted(registry: ConsumerRegistry) -> None:
    def join(start: int) -> None:
        for i in range(start, start + 50):
            registry.heartbeat(f"c{i:04d}", "GroupA")

    threads = [threading.Thread(target=join, args=(n * 50,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.members("GroupA") == [f"c{i:04d}" for i in range(400)]
