"""The one place where exceptions become gRPC status codes (broker side).

Every servicer method is wrapped with :func:`grpc_boundary`: a RocketliteError aborts the
call with its class's ``grpc_code`` and message, plus the class name as trailing metadata so
the client can raise the same class; anything else is a bug, logged with its traceback and
answered as INTERNAL, and the broker keeps serving.
"""

from __future__ import annotations

import functools
import inspect
import logging

import grpc

from rmq_spark.errors import ERROR_CLASS_METADATA, RocketliteError

log = logging.getLogger("rmq_spark.broker")


def _abort(context: grpc.ServicerContext, exc: BaseException, rpc: str) -> None:
    if isinstance(exc, RocketliteError):
        code = getattr(grpc.StatusCode, exc.grpc_code, grpc.StatusCode.INTERNAL)
        context.set_trailing_metadata(((ERROR_CLASS_METADATA, type(exc).__name__),))
        context.abort(code, str(exc))
    log.exception("internal error in %s", rpc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal broker error: {type(exc).__name__}: {exc}")


def grpc_boundary(method):
    """Map exceptions of a unary or server-streaming servicer method to gRPC statuses."""
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def stream(self, request, context):
            try:
                yield from method(self, request, context)
            except Exception as exc:
                if _is_abort(exc, context):
                    raise
                if context.is_active() or isinstance(exc, RocketliteError):
                    _abort(context, exc, method.__qualname__)
                raise

        return stream

    @functools.wraps(method)
    def unary(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:
            if _is_abort(exc, context):
                raise
            _abort(context, exc, method.__qualname__)

    return unary


def _is_abort(exc: BaseException, context: grpc.ServicerContext) -> bool:
    # context.abort() records the status on the context and raises a bare ``Exception()``
    # (grpc 1.x); let it through, or the status it set would be overwritten with INTERNAL.
    return type(exc) is Exception and not exc.args and context.code() is not None
