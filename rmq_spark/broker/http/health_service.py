"""The standard gRPC health service (``grpc.health.v1.Health``) on the broker's gRPC port,
answering from the same readiness as the HTTP port's ``/readyz``: SERVING once recovery is
done and the store takes writes, NOT_SERVING otherwise, for the whole server ("") and for
each service the port offers. Probes need no credentials (see the ACL interceptor)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

__all__ = ["HealthService"]

#: how often readiness is looked at again (a disk filling up, or freed)
CHECK_EVERY_S = 1.0

#: the services whose status is answered by name, besides the whole server ("")
SERVICES = (
    "",
    "rocketlite.v1.MessagingService",
    "apache.rocketmq.v2.MessagingService",
)


class HealthService:
    def __init__(self) -> None:
        self._servicer = health.aio.HealthServicer()
        self._task: asyncio.Task[None] | None = None
        self._ready: bool | None = None

    def add_to(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)

    async def start(self, ready: Callable[[], bool]) -> None:
        """Answer from ``ready()`` (looked at every second), on the event loop."""
        await self._update(ready())
        self._task = asyncio.get_running_loop().create_task(self._watch(ready))

    async def _watch(self, ready: Callable[[], bool]) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            await self._update(ready())

    async def _update(self, ready: bool) -> None:
        if ready == self._ready:
            return
        self._ready = ready
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in SERVICES:
            await self._servicer.set(service, status)

    async def stop(self) -> None:
        """NOT_SERVING from now on (the port closes soon after)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._servicer.enter_graceful_shutdown()
