"""ByteBudget: sends are admitted by size, first come first served, and a cancelled waiter
gives its place (or its bytes) back."""

from __future__ import annotations

import asyncio

from rmq_spark.broker.v1.admission import ByteBudget


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
        await asyncio.sleep(0.01)
        assert log == ["a"]  # c would fit, but does not overtake b
        assert (budget.in_use, budget.waiting) == (60, 3)
        gates["a"].set()
        await asyncio.sleep(0.01)
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
        await asyncio.sleep(0)
        big = asyncio.create_task(hold(budget, 10_000, log, "big", asyncio.Event()))
        await asyncio.sleep(0.01)
        assert log == ["small"]
        gate.set()
        await first
        await asyncio.sleep(0.01)
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
        await asyncio.sleep(0)
        stuck = asyncio.create_task(hold(budget, 90, log, "stuck", gate))
        behind = asyncio.create_task(hold(budget, 20, log, "behind", gate))
        await asyncio.sleep(0.01)
        assert log == ["holder"]
        stuck.cancel()  # its client went away while it waited
        await asyncio.gather(stuck, return_exceptions=True)
        await asyncio.sleep(0.01)
        assert log == ["holder", "behind"]
        gate.set()
        await asyncio.gather(holder, behind)
        assert (budget.in_use, budget.waiting) == (0, 0)

    run(scenario())
