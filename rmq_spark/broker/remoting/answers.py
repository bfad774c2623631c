"""How a remoting request fails: RocketMQ's response codes for rocketlite's errors.

A handler raises :class:`Refusal` for an answer with a specific code (TOPIC_NOT_EXIST,
QUERY_NOT_FOUND, ...), or any :mod:`rmq_spark.errors` class, which :func:`response_code`
maps once for every handler. Anything else is a bug: it is logged and answered as
SYSTEM_ERROR, and the broker keeps serving.
"""

from __future__ import annotations

import logging

from rmq_spark.broker.core.errors import codes_of
from rmq_spark.errors import RocketliteError
from rmq_spark.log_limit import LogLimiter
from rmq_spark.wire.remoting.codes import ResponseCode
from rmq_spark.wire.remoting.frame import Command

log = logging.getLogger("rmq_spark.broker.remoting")


class Refusal(RocketliteError):
    """An answer other than SUCCESS with RocketMQ's ``code`` and ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def response_code(error: RocketliteError) -> int:
    """The response code a RocketMQ client expects for ``error``.

    >>> from rmq_spark.errors import NotFoundError
    >>> response_code(NotFoundError("topic 'x' does not exist"))
    17
    >>> response_code(Refusal(22, "no offset"))
    22
    """
    if isinstance(error, Refusal):
        return error.code
    return int(codes_of(error).remoting)


def failure_reply(
    request: Command, error: BaseException, log_limit: LogLimiter | None = None
) -> Command:
    """The answer to ``request`` that failed with ``error``: its response code and message.
    Anything not a rocketlite error is a bug: answered SYSTEM_ERROR and logged as one line
    (rate-limited when ``log_limit`` is given; the traceback only at debug level, since
    what triggered it came from a client)."""
    if isinstance(error, RocketliteError):
        return request.reply(response_code(error), str(error))
    kind = type(error).__name__
    if log_limit is None or log_limit.allow((request.code, kind)):
        log.error("internal error serving remoting request %d: %s: %s", request.code, kind, error)
    log.debug("the internal error's traceback", exc_info=error)
    return request.reply(
        ResponseCode.SYSTEM_ERROR, f"internal broker error: {type(error).__name__}: {error}"
    )
