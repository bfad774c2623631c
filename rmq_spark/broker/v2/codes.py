"""RocketMQ 5 status codes: the error the v2 service raises, and how rocketlite's own
errors read in that protocol.

A RocketMQ 5 server answers business errors inside the response (``status {code,
message}``, the call itself OK); clients act on the code (a producer retries everything but
TOO_MANY_REQUESTS, a push consumer gives up an ack answered INVALID_RECEIPT_HANDLE, ...).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.errors import (
    AlreadyExistsError,
    FlushTimeoutError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RocketliteError,
    UnavailableError,
)


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


class V2Error(Exception):
    """A request the v2 service answers with ``code`` and ``message`` in its status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def code_of(exc: BaseException) -> int:
    """The v2 code for an exception raised while serving a request."""
    if isinstance(exc, V2Error):
        return exc.code
    if isinstance(exc, InvalidNameError):
        return Code.BAD_REQUEST
    if isinstance(exc, NotFoundError):
        return Code.NOT_FOUND
    if isinstance(exc, PermissionDeniedError):
        return Code.FORBIDDEN
    if isinstance(exc, ResourceExhaustedError):
        return Code.TOO_MANY_REQUESTS
    if isinstance(exc, FlushTimeoutError):
        return Code.MASTER_PERSISTENCE_TIMEOUT
    if isinstance(exc, InvalidArgumentError | AlreadyExistsError):
        return Code.BAD_REQUEST
    if isinstance(exc, UnavailableError):
        return Code.INTERNAL_ERROR
    if isinstance(exc, RocketliteError):
        return Code.INTERNAL_SERVER_ERROR
    return Code.INTERNAL_SERVER_ERROR


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)
