"""The errors of the RocketMQ 5 service and of request signatures are rmq_spark.errors
classes, with the gRPC code of their meaning, while a RocketMQ 5 client still gets the same
status codes in its responses."""

from __future__ import annotations

import pytest

from rmq_spark.auth.signature import AuthenticationError, verify
from rmq_spark.broker.v2.codes import Code, V2Error, code_of, grpc_code_of
from rmq_spark.broker.v2.requests import failure_status
from rmq_spark.errors import (
    AlreadyExistsError,
    FlushTimeoutError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RocketliteError,
    StoreFailedError,
    UnauthenticatedError,
    error_from_status,
)


def test_a_signature_refusal_is_an_unauthenticated_error():
    with pytest.raises(UnauthenticatedError) as caught:
        verify([], lambda _user: None)
    assert type(caught.value) is AuthenticationError
    assert caught.value.grpc_code == "UNAUTHENTICATED" and not caught.value.retriable
    assert "no credentials" in str(caught.value)


@pytest.mark.parametrize(
    ("code", "grpc_code"),
    [
        (Code.BAD_REQUEST, "INVALID_ARGUMENT"),
        (Code.ILLEGAL_TOPIC, "INVALID_ARGUMENT"),
        (Code.CLIENT_ID_REQUIRED, "INVALID_ARGUMENT"),
        (Code.INVALID_RECEIPT_HANDLE, "INVALID_ARGUMENT"),
        (Code.UNAUTHORIZED, "UNAUTHENTICATED"),
        (Code.FORBIDDEN, "PERMISSION_DENIED"),
        (Code.NOT_FOUND, "NOT_FOUND"),
        (Code.TOPIC_NOT_FOUND, "NOT_FOUND"),
        (Code.OFFSET_NOT_FOUND, "NOT_FOUND"),
        (Code.MESSAGE_BODY_TOO_LARGE, "RESOURCE_EXHAUSTED"),
        (Code.TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"),
        (Code.MESSAGE_PROPERTIES_TOO_LARGE, "RESOURCE_EXHAUSTED"),
        (Code.INTERNAL_ERROR, "INTERNAL"),
        (Code.INTERNAL_SERVER_ERROR, "INTERNAL"),
        (Code.NOT_IMPLEMENTED, "UNIMPLEMENTED"),
        (Code.MASTER_PERSISTENCE_TIMEOUT, "DEADLINE_EXCEEDED"),
        (Code.UNSUPPORTED, "UNIMPLEMENTED"),
    ],
)
def test_a_v2_error_has_the_grpc_code_of_its_v2_code(code, grpc_code):
    error = V2Error(code, "topic t does not exist on this broker")
    assert isinstance(error, RocketliteError) and not error.retriable
    assert grpc_code_of(code) == grpc_code == error.grpc_code
    assert str(error) == error.message == "topic t does not exist on this broker"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (V2Error(Code.ILLEGAL_TOPIC, "topic name '' ..."), Code.ILLEGAL_TOPIC),
        (V2Error(Code.TOPIC_NOT_FOUND, "topic t does not exist"), Code.TOPIC_NOT_FOUND),
        (InvalidNameError("topic name '%x' ..."), Code.BAD_REQUEST),
        (InvalidArgumentError("batch_size=-1"), Code.BAD_REQUEST),
        (AlreadyExistsError("transaction t1 exists"), Code.BAD_REQUEST),
        (NotFoundError("transaction t1 is unknown"), Code.NOT_FOUND),
        (UnauthenticatedError("no credentials"), Code.UNAUTHORIZED),
        (PermissionDeniedError("topic 't' is not readable (perm 2)"), Code.FORBIDDEN),
        (ResourceExhaustedError("the disk is full"), Code.TOO_MANY_REQUESTS),
        (FlushTimeoutError("flush took 5 s"), Code.MASTER_PERSISTENCE_TIMEOUT),
        (StoreFailedError("fsync failed"), Code.INTERNAL_ERROR),
        (RocketliteError("something else"), Code.INTERNAL_SERVER_ERROR),
        (ValueError("a bug"), Code.INTERNAL_SERVER_ERROR),
    ],
)
def test_the_v2_code_a_client_gets_for_each_error(error, code):
    assert code_of(error) == code
    answer = failure_status(error, "SendMessage")
    assert answer.code == code
    if isinstance(error, RocketliteError):
        assert answer.message == str(error)
    else:
        assert answer.message == "internal broker error: ValueError: a bug"


def test_a_class_named_by_the_broker_that_takes_more_than_a_message_becomes_its_codes_class():
    # V2Error is built from a code and a message: the client cannot rebuild it from a status
    rebuilt = error_from_status("INTERNAL", "boom", "V2Error")
    assert type(rebuilt) is RocketliteError and str(rebuilt) == "boom"
    assert type(error_from_status("INVALID_ARGUMENT", "bad", "V2Error")) is InvalidArgumentError
