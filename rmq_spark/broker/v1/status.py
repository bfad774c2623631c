"""Where rocketlite.v1's exceptions become gRPC status codes (with the broker's one table,
:mod:`rmq_spark.broker.core.errors`), and where each servicer method is told where it runs.

The server is asynchronous (``grpc.aio``): its event loop only waits (held pulls, watch
streams, calls in flight) and never runs store work, which may block on disk. A servicer
method is written in one of three shapes:

- :func:`blocking`: a plain method, run whole on the broker's worker threads;
- :func:`waiting`: a coroutine on the event loop, which hands its store work to the
  workers with ``await self._workers.run(fn, ...)``;
- :func:`streaming`: an asynchronous generator on the event loop (server streams).

Each wrapper maps exceptions the same way: a RocketliteError aborts the call with its
class's ``grpc_code`` and message, plus the class name as trailing metadata so the client
can raise the same class; anything else is a bug, logged with its traceback and answered as
INTERNAL, and the broker keeps serving. A cancelled call (its client went away) is let go.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, NoReturn, Protocol, TypeVar

import grpc

from rmq_spark.broker.core.errors import codes_of
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import ERROR_CLASS_METADATA, RocketliteError

log = logging.getLogger("rmq_spark.broker")


class _Servicer(Protocol):
    """What the wrappers need of a servicer: its worker threads."""

    _workers: Workers


S = TypeVar("S", bound=_Servicer)
Req = TypeVar("Req")
Resp = TypeVar("Resp")

#: a servicer method as gRPC calls it: (servicer, request, context)
Unary = Callable[[S, Req, grpc.aio.ServicerContext], Coroutine[Any, Any, Resp]]
Streaming = Callable[[S, Req, grpc.aio.ServicerContext], AsyncIterator[Resp]]


def _status(exc: BaseException) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    if isinstance(exc, RocketliteError):
        code = getattr(grpc.StatusCode, codes_of(exc).v1, grpc.StatusCode.INTERNAL)
        return code, str(exc), ((ERROR_CLASS_METADATA, type(exc).__name__),)
    return grpc.StatusCode.INTERNAL, f"internal broker error: {type(exc).__name__}: {exc}", ()


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, rpc: str) -> NoReturn:
    if isinstance(exc, grpc.aio.AbortError):  # already aborted with its own status
        raise exc
    if not isinstance(exc, RocketliteError):
        log.error("internal error in %s", rpc, exc_info=exc)
    code, message, trailing = _status(exc)
    if trailing:
        context.set_trailing_metadata(trailing)
    await context.abort(code, message)
    raise AssertionError("ServicerContext.abort returned")  # it raises, always


def blocking(
    method: Callable[[S, Req, grpc.aio.ServicerContext], Resp],
) -> Unary[S, Req, Resp]:
    """A unary method whose whole body runs on a worker thread (``self._workers``)."""

    @functools.wraps(method)
    async def handler(self: S, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await self._workers.run(method, self, request, context)
        except Exception as exc:
            await _abort(context, exc, method.__qualname__)

    return handler


def waiting(method: Unary[S, Req, Resp]) -> Unary[S, Req, Resp]:
    """A unary coroutine run on the event loop (it awaits; store work goes to workers)."""

    @functools.wraps(method)
    async def handler(self: S, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await _abort(context, exc, method.__qualname__)

    return handler


def streaming(method: Streaming[S, Req, Resp]) -> Streaming[S, Req, Resp]:
    """A server-streaming asynchronous generator run on the event loop."""

    @functools.wraps(method)
    async def handler(
        self: S, request: Req, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Resp]:
        try:
            async for item in method(self, request, context):
                yield item
        except Exception as exc:
            await _abort(context, exc, method.__qualname__)

    return handler
