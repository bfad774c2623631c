"""Fixtures of the unit tests of membership, leases and client liveness."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.membership_fakes import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A clock at 1,000,000 ms that moves only when the test advances it."""
    return FakeClock()


@pytest.fixture
def loop():
    """An event loop of the test's own, closed after it."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
