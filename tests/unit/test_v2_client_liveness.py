"""When a RocketMQ 5 client counts as alive: its auto-renewed (push) deliveries stay
invisible exactly that long. An open Telemetry stream keeps it alive; a stream that closed
keeps it alive for the reconnect grace; a client that never had a stream (or was heard from
after its stream closed) is alive while heard from within the timeout."""

from __future__ import annotations

import asyncio

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.membership.groups import RECONNECT_GRACE_MS
from rmq_spark.broker.v2.clients import CLIENT_TIMEOUT_MS, ClientRegistry, client_alive
from tests.support.membership_fakes import FakeClock

GRACE = 1_000
TIMEOUT = 60_000


@pytest.mark.parametrize(
    ("open_streams", "last_seen", "closed", "now", "alive"),
    [
        # a stream open: alive, however long ago it was heard from
        (1, 0, None, 500_000, True),
        (2, 0, 10_000, 500_000, True),
        # its last stream closed at 10 000 and nothing heard since: the grace only
        (0, 9_000, 10_000, 10_000, True),
        (0, 9_000, 10_000, 10_999, True),
        (0, 9_000, 10_000, 11_000, False),
        (0, 10_000, 10_000, 11_000, False),  # heard in the same ms as the close
        (0, 9_000, 10_000, 30_000, False),  # well within the 60 s timeout, still gone
        # heard from (a heartbeat) after the close: the timeout counts from then
        (0, 10_500, 10_000, 12_000, True),
        (0, 10_500, 10_000, 70_499, True),
        (0, 10_500, 10_000, 70_500, False),
        # never had a stream: heard from within the timeout
        (0, 10_000, None, 69_999, True),
        (0, 10_000, None, 70_000, False),
    ],
)
def test_client_alive(open_streams, last_seen, closed, now, alive):
    assert client_alive(open_streams, last_seen, closed, now, TIMEOUT, GRACE) is alive


def test_the_registry_uses_the_v1_reconnect_grace_and_a_60_s_timeout():
    registry = ClientRegistry()
    assert registry.grace_ms == RECONNECT_GRACE_MS == 1_000
    assert CLIENT_TIMEOUT_MS == 60_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock) -> ClientRegistry:
    return ClientRegistry(timeout_ms=TIMEOUT, grace_ms=GRACE, clock=clock)


def outbox() -> asyncio.Queue:
    return asyncio.Queue()


def test_a_client_whose_stream_closed_is_gone_after_the_grace(registry, clock):
    stream = outbox()
    registry.stream_opened("c1", stream)
    clock.ms += 600_000  # no heartbeat for 10 min: the open stream is enough
    assert registry.alive("c1")
    assert registry.stream_closed("c1", stream) is True
    clock.ms += GRACE - 1
    assert registry.alive("c1") and not registry.departed("c1")
    clock.ms += 1
    assert not registry.alive("c1") and registry.departed("c1")


def test_a_stream_reopened_within_the_grace_keeps_the_client(registry, clock):
    first, second = outbox(), outbox()
    registry.stream_opened("c1", first)
    registry.stream_closed("c1", first)
    clock.ms += 500
    registry.stream_opened("c1", second)
    clock.ms += 10 * GRACE
    assert registry.alive("c1") and not registry.departed("c1")
    # and when the new stream closes, a new grace starts from that close
    assert registry.stream_closed("c1", second) is True
    clock.ms += GRACE - 1
    assert registry.alive("c1")
    clock.ms += 1
    assert registry.departed("c1")


def test_only_the_last_open_stream_starts_the_grace(registry, clock):
    first, second = outbox(), outbox()
    registry.stream_opened("c1", first)
    registry.stream_opened("c1", second)
    assert registry.stream_closed("c1", first) is False
    clock.ms += 10 * GRACE
    assert registry.alive("c1")
    assert registry.stream_closed("c1", second) is True
    assert registry.stream_closed("c1", second) is False  # closed already


def test_a_heartbeat_after_the_close_keeps_the_client_for_the_timeout(registry, clock):
    stream = outbox()
    registry.stream_opened("c1", stream)
    registry.stream_closed("c1", stream)
    clock.ms += 500
    assert registry.seen("c1")
    clock.ms += TIMEOUT - 1
    assert registry.alive("c1")
    clock.ms += 1
    assert registry.departed("c1")


def test_a_client_without_a_stream_lives_by_its_heartbeats(registry, clock):
    assert not registry.seen("c1")  # unknown: it never sent its settings
    registry.put_settings("c1", pb.Settings())
    clock.ms += TIMEOUT - 1
    assert registry.seen("c1")
    clock.ms += TIMEOUT - 1
    assert registry.alive("c1")
    clock.ms += 1
    assert registry.departed("c1")


def test_a_client_that_said_it_was_leaving_is_not_reported_as_departed(registry, clock):
    stream = outbox()
    registry.stream_opened("c1", stream)
    registry.remove("c1")  # NotifyClientTermination, then its stream closes
    assert registry.stream_closed("c1", stream) is False
    clock.ms += 10 * GRACE
    assert not registry.alive("c1") and not registry.departed("c1")
    assert not registry.departed("never-seen")
