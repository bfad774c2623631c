"""Admission of send requests by size: how many bytes of sends the broker works on at once.

A send request is received whole before its handler runs, but storing it costs several
times its size in Python objects (bodies, property blobs, per-message fields) for as long
as the append takes. :class:`ByteBudget` lets requests in while their sizes fit in the
budget and makes the rest wait, first come first served, on the event loop (a waiting send
holds no thread). A request larger than the whole budget waits until it is alone.

>>> import asyncio
>>> budget = ByteBudget(100)
>>> async def send(size):
...     async with budget.reserve(size):
...         return budget.in_use
>>> asyncio.run(send(60))
60
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ByteBudget:
    """A FIFO byte semaphore used from one event loop only (so it needs no lock)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    @asynccontextmanager
    async def reserve(self, size: int) -> AsyncIterator[None]:
        size = min(size, self.capacity)
        if self._waiting or self.in_use + size > self.capacity:
            turn = asyncio.get_running_loop().create_future()
            entry = (size, turn)
            self._waiting.append(entry)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # admitted, then cancelled
                    self._release(size)
                else:
                    self._waiting.remove(entry)
                    self._admit()  # those behind it may fit now
                raise
        else:
            self.in_use += size
        try:
            yield
        finally:
            self._release(size)

    def _release(self, size: int) -> None:
        self.in_use -= size
        self._admit()

    def _admit(self) -> None:
        while self._waiting:
            size, turn = self._waiting[0]
            if self.in_use + size > self.capacity:
                return
            self._waiting.popleft()
            self.in_use += size
            turn.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
