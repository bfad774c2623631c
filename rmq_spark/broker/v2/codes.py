"""RocketMQ 5 status codes: the error the v2 service raises (a rocketlite error like any
other), and how rocketlite's own errors read in that protocol.

A RocketMQ 5 server answers business errors inside the response (``status {code,
message}``, the call itself OK); clients act on the code (a producer retries everything but
TOO_MANY_REQUESTS, a push consumer gives up an ack answered INVALID_RECEIPT_HANDLE, ...).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.core.errors import codes_of
from rmq_spark.errors import RocketliteError


class Code:
    """The codes rocketlite answers with (values of ``apache.rocketmq.v2.Code``)."""

    OK = pb.OK
    MULTIPLE_RESULTS = pb.MULTIPLE_RESULTS
    BAD_REQUEST = pb.BAD_REQUEST
    ILLEGAL_TOPIC = pb.ILLEGAL_TOPIC
    ILLEGAL_CONSUMER_GROUP = pb.ILLEGAL_CONSUMER_GROUP
    ILLEGAL_MESSAGE_TAG = pb.ILLEGAL_MESSAGE_TAG
    ILLEGAL_MESSAGE_KEY = pb.ILLEGAL_MESSAGE_KEY
    ILLEGAL_MESSAGE_GROUP = pb.ILLEGAL_MESSAGE_GROUP
    ILLEGAL_MESSAGE_PROPERTY_KEY = pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    INVALID_TRANSACTION_ID = pb.INVALID_TRANSACTION_ID
    ILLEGAL_MESSAGE_ID = pb.ILLEGAL_MESSAGE_ID
    ILLEGAL_FILTER_EXPRESSION = pb.ILLEGAL_FILTER_EXPRESSION
    ILLEGAL_INVISIBLE_TIME = pb.ILLEGAL_INVISIBLE_TIME
    ILLEGAL_DELIVERY_TIME = pb.ILLEGAL_DELIVERY_TIME
    INVALID_RECEIPT_HANDLE = pb.INVALID_RECEIPT_HANDLE
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    UNRECOGNIZED_CLIENT_TYPE = pb.UNRECOGNIZED_CLIENT_TYPE
    CLIENT_ID_REQUIRED = pb.CLIENT_ID_REQUIRED
    ILLEGAL_POLLING_TIME = pb.ILLEGAL_POLLING_TIME
    ILLEGAL_OFFSET = pb.ILLEGAL_OFFSET
    UNAUTHORIZED = pb.UNAUTHORIZED
    FORBIDDEN = pb.FORBIDDEN
    NOT_FOUND = pb.NOT_FOUND
    MESSAGE_NOT_FOUND = pb.MESSAGE_NOT_FOUND
    TOPIC_NOT_FOUND = pb.TOPIC_NOT_FOUND
    CONSUMER_GROUP_NOT_FOUND = pb.CONSUMER_GROUP_NOT_FOUND
    OFFSET_NOT_FOUND = pb.OFFSET_NOT_FOUND
    PAYLOAD_TOO_LARGE = pb.PAYLOAD_TOO_LARGE
    MESSAGE_BODY_TOO_LARGE = pb.MESSAGE_BODY_TOO_LARGE
    MESSAGE_BODY_EMPTY = pb.MESSAGE_BODY_EMPTY
    TOO_MANY_REQUESTS = pb.TOO_MANY_REQUESTS
    MESSAGE_PROPERTIES_TOO_LARGE = pb.MESSAGE_PROPERTIES_TOO_LARGE
    INTERNAL_ERROR = pb.INTERNAL_ERROR
    INTERNAL_SERVER_ERROR = pb.INTERNAL_SERVER_ERROR
    MASTER_PERSISTENCE_TIMEOUT = pb.MASTER_PERSISTENCE_TIMEOUT
    NOT_IMPLEMENTED = pb.NOT_IMPLEMENTED
    UNSUPPORTED = pb.UNSUPPORTED


#: the gRPC status code of each family of v2 codes (the family is the HTTP status the
#: code starts with: 40402 TOPIC_NOT_FOUND is a 404); other families are INTERNAL
_GRPC_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "RESOURCE_EXHAUSTED",
    428: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    431: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED",
    504: "DEADLINE_EXCEEDED",
    505: "UNIMPLEMENTED",
}


def grpc_code_of(code: int) -> str:
    """The gRPC status code name that means what v2 ``code`` means.

    >>> grpc_code_of(Code.TOPIC_NOT_FOUND), grpc_code_of(Code.INTERNAL_ERROR)
    ('NOT_FOUND', 'INTERNAL')
    """
    return _GRPC_CODES.get(code // 100, RocketliteError.grpc_code)


class V2Error(RocketliteError):
    """A request the v2 service answers with ``code`` and ``message`` in its status (the
    call itself succeeds); ``grpc_code`` is the gRPC code of the same meaning."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.grpc_code = grpc_code_of(code)


def code_of(exc: BaseException) -> int:
    """The v2 code for an exception raised while serving a request: a V2Error's own,
    else its class's in the broker's one table (:mod:`rmq_spark.broker.core.errors`)."""
    if isinstance(exc, V2Error):
        return exc.code
    return codes_of(exc).v2


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)
