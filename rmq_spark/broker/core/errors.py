"""The one table from the broker core's errors to each protocol's codes.

The core raises :mod:`rmq_spark.errors` classes; each front-end answers with the code its
clients act on:

* rocketlite.v1 aborts the call with the class's own gRPC status (``grpc_code``, which
  rocketlite's clients map back to the same class) and the class name as metadata;
* RocketMQ 5 (``apache.rocketmq.v2``) answers with a ``Code`` in the response's status;
* RocketMQ's remoting protocol answers with a response code.

A front-end's own refusals (a v2 ``V2Error``, a remoting ``Refusal``) carry their code
themselves and never reach this table.

>>> codes = codes_of(NotFoundError("topic 'x' does not exist"))
>>> codes.v1, codes.v2, int(codes.remoting)
('NOT_FOUND', 40400, 17)
>>> codes_of(KeyError("x")) == UNEXPECTED
True
"""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.broker.membership.filters import FilterExpressionError
from rmq_spark.errors import (
    AlreadyExistsError,
    FilterNotSupportedError,
    FlushTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RocketliteError,
    UnauthenticatedError,
    UnavailableError,
)
from rmq_spark.filter import SelectorError
from rmq_spark.wire.remoting.codes import ResponseCode


class V2Code:
    """The values of ``apache.rocketmq.v2.Code`` this table answers with (RocketMQ 5's
    definition.proto; the RocketMQ 5 stubs are an optional install, the broker core is not)."""

    BAD_REQUEST = 40000
    ILLEGAL_FILTER_EXPRESSION = 40010
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    TOO_MANY_REQUESTS = 42900
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    NOT_IMPLEMENTED = 50100
    MASTER_PERSISTENCE_TIMEOUT = 50401


v2 = V2Code  # the column names below read as the protocol


@dataclass(frozen=True)
class Codes:
    """What one kind of error is called in each protocol."""

    #: the gRPC status name rocketlite.v1 answers with: the error class's own
    #: ``grpc_code``, the one rocketlite's clients map back to the class
    v1: str
    #: RocketMQ 5's ``apache.rocketmq.v2.Code``
    v2: int
    #: RocketMQ's remoting response code
    remoting: int


#: an error that is a bug, not a refusal
UNEXPECTED = Codes("INTERNAL", v2.INTERNAL_SERVER_ERROR, ResponseCode.SYSTEM_ERROR)

#: (v2 code, remoting code) by error class; the first row whose class matches wins, so
#: subclasses come before their bases
TABLE: tuple[tuple[type[RocketliteError], int, int], ...] = (
    (SelectorError, v2.ILLEGAL_FILTER_EXPRESSION, ResponseCode.SUBSCRIPTION_PARSE_FAILED),
    (FilterExpressionError, v2.ILLEGAL_FILTER_EXPRESSION, ResponseCode.SUBSCRIPTION_PARSE_FAILED),
    (InvalidArgumentError, v2.BAD_REQUEST, ResponseCode.INVALID_PARAMETER),
    (FilterNotSupportedError, v2.NOT_IMPLEMENTED, ResponseCode.SYSTEM_ERROR),
    (NotFoundError, v2.NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST),
    (AlreadyExistsError, v2.BAD_REQUEST, ResponseCode.SYSTEM_ERROR),
    (UnauthenticatedError, v2.UNAUTHORIZED, ResponseCode.NO_PERMISSION),
    (PermissionDeniedError, v2.FORBIDDEN, ResponseCode.NO_PERMISSION),
    (ResourceExhaustedError, v2.TOO_MANY_REQUESTS, ResponseCode.SYSTEM_BUSY),
    (FlushTimeoutError, v2.MASTER_PERSISTENCE_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT),
    (UnavailableError, v2.INTERNAL_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE),
)


def codes_of(error: BaseException) -> Codes:
    """The codes of ``error``: its class's row, else (another rocketlite error) the
    protocols' internal-error codes; :data:`UNEXPECTED` for anything else (a bug)."""
    if not isinstance(error, RocketliteError):
        return UNEXPECTED
    for cls, v2_code, remoting_code in TABLE:
        if isinstance(error, cls):
            return Codes(error.grpc_code, v2_code, remoting_code)
    return Codes(error.grpc_code, UNEXPECTED.v2, UNEXPECTED.remoting)
