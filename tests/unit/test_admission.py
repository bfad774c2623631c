"""ByteBudget: sends are admitted by size, first come first served, and a cancelled waiter
gives its place (or its bytes) back."""

from __future__ import annotations

import asyncio

from rmq_spark.broker.v1.admission import ByteBudget
from tests.support.eventually import eventually_async


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 5))


async def hold(budget: ByteBudget, size: int, log: list, name: str, release: asyncio.Event):
    async with budget.reserve(size):
        log.append(name)
        await release.wait()


def test_requests_wait_in_arrival_order_until_their_size_fits():
    async def scenario():
        budget, log = ByteBudget(100), []
        gates = {name: asyncio.Event() for name in "abcd"}
        tasks = [
            asyncio.create_task(hold(budget, size, log, name, gates[name]))
            for name, size in (("a", 60), ("b", 50), ("c", 10), ("d", 40))
        ]
        await eventually_async(
            lambda: len(log) + budget.waiting == 4, what="every request admitted or waiting"
        )
        assert log == ["a"]  # c would fit, but does not overtake b
        assert (budget.in_use, budget.waiting) == (60, 3)
        gates["a"].set()
        await eventually_async(lambda: len(log) == 4, what="the waiters admitted")
        assert log == ["a", "b", "c", "d"]  # 50 + 10 + 40 = 100
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        assert (budget.in_use, budget.waiting) == (0, 0)

    run(scenario())


def test_a_request_larger_than_the_budget_runs_alone():
    async def scenario():
        budget, log = ByteBudget(100), []
        gate = asyncio.Event()
        first = asyncio.create_task(hold(budget, 30, log, "small", gate))
        await eventually_async(lambda: log == ["small"], what="the small request admitted")
        big = asyncio.create_task(hold(budget, 10_000, log, "big", asyncio.Event()))
        await eventually_async(lambda: budget.waiting == 1, what="the big request waiting")
        assert log == ["small"]
        gate.set()
        await first
        await eventually_async(lambda: len(log) == 2, what="the big request admitted")
        assert log == ["small", "big"] and budget.in_use == 100
        big.cancel()
        await asyncio.gather(big, return_exceptions=True)
        assert budget.in_use == 0

    run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_in():
    async def scenario():
        budget, log = ByteBudget(100), []
        gate = asyncio.Event()
        holder = asyncio.create_task(hold(budget, 80, log, "holder", gate))
        await eventually_async(lambda: log == ["holder"], what="the holder admitted")
        stuck = asyncio.create_task(hold(budget, 90, log, "stuck", gate))
        behind = asyncio.create_task(hold(budget, 20, log, "behind", gate))
        await eventually_async(lambda: budget.waiting == 2, what="two requests waiting")
        assert log == ["holder"]
        stuck.cancel()  # its client went away while it waited
        await asyncio.gather(stuck, return_exceptions=True)
        await eventually_async(lambda: len(log) == 2, what="the one behind admitted")
        assert log == ["holder", "behind"]
        gate.set()
        await asyncio.gather(holder, behind)
        assert (budget.in_use, budget.waiting) == (0, 0)

    run(scenario())
