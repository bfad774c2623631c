"""The broker's worker threads: the event loop of every front-end waits, and hands store work,
which may block on disk, to this bounded pool."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Args = TypeVarTuple("Args")


class Workers:
    """The bounded pool of threads that runs store work for the event loop."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="rmq-worker")

    async def run(self, fn: Callable[[*Args], T], *args: *Args) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
