"""What the membership and lease tests share: a clock the test moves, and a watch stream
driven from synchronous test code."""

from __future__ import annotations

import asyncio

from rmq_spark.broker.membership.groups import MembershipEvent


class FakeClock:
    """Milliseconds that move only when the test says (``advance``)."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class Stream:
    """A registry's watch stream (an asynchronous generator) driven from synchronous test
    code, on one event loop per test, as the broker's loop drives it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, registry, group: str, cid: str) -> None:
        self.loop = loop
        self.generator = registry.watch(group, cid)

    def __iter__(self):
        return self

    def __next__(self) -> MembershipEvent:
        try:
            return self.loop.run_until_complete(asyncio.wait_for(anext(self.generator), 5))
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self.loop.run_until_complete(self.generator.aclose())
