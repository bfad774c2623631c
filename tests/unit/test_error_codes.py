"""The broker's one table from errors to each protocol's codes."""

from __future__ import annotations

import pytest

from rmq_spark.broker.core.errors import UNEXPECTED, V2Code, codes_of
from rmq_spark.errors import (
    AlreadyExistsError,
    CorruptDataError,
    FlushTimeoutError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    ReservedTopicError,
    ResourceExhaustedError,
    StoreFailedError,
    UnauthenticatedError,
)
from rmq_spark.wire.remoting.codes import ResponseCode as RC


@pytest.mark.parametrize(
    ("error", "v1", "v2", "remoting"),
    [
        (InvalidArgumentError("x"), "INVALID_ARGUMENT", V2Code.BAD_REQUEST, RC.INVALID_PARAMETER),
        (InvalidNameError("x"), "INVALID_ARGUMENT", V2Code.BAD_REQUEST, RC.INVALID_PARAMETER),
        (NotFoundError("x"), "NOT_FOUND", V2Code.NOT_FOUND, RC.TOPIC_NOT_EXIST),
        (AlreadyExistsError("x"), "ALREADY_EXISTS", V2Code.BAD_REQUEST, RC.SYSTEM_ERROR),
        (UnauthenticatedError("x"), "UNAUTHENTICATED", V2Code.UNAUTHORIZED, RC.NO_PERMISSION),
        (PermissionDeniedError("x"), "PERMISSION_DENIED", V2Code.FORBIDDEN, RC.NO_PERMISSION),
        (ReservedTopicError("x"), "PERMISSION_DENIED", V2Code.FORBIDDEN, RC.NO_PERMISSION),
        (
            ResourceExhaustedError("x"),
            "RESOURCE_EXHAUSTED",
            V2Code.TOO_MANY_REQUESTS,
            RC.SYSTEM_BUSY,
        ),
        (
            FlushTimeoutError("x"),
            "DEADLINE_EXCEEDED",
            V2Code.MASTER_PERSISTENCE_TIMEOUT,
            RC.FLUSH_DISK_TIMEOUT,
        ),
        (StoreFailedError("x"), "UNAVAILABLE", V2Code.INTERNAL_ERROR, RC.SERVICE_NOT_AVAILABLE),
        # a rocketlite error without a row: its own gRPC code, internal elsewhere
        (CorruptDataError("x"), "DATA_LOSS", V2Code.INTERNAL_SERVER_ERROR, RC.SYSTEM_ERROR),
        # not a rocketlite error: a bug
        (KeyError("x"), "INTERNAL", V2Code.INTERNAL_SERVER_ERROR, RC.SYSTEM_ERROR),
    ],
)
def test_each_protocol_names_an_error_by_the_table(error, v1, v2, remoting):
    codes = codes_of(error)
    assert (codes.v1, codes.v2, codes.remoting) == (v1, v2, remoting)


def test_unexpected_errors_are_internal_everywhere():
    assert codes_of(ValueError("bug")) == UNEXPECTED


def test_v2_numbers_are_rocketmq5s():
    pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
    names = [n for n in vars(V2Code) if n.isupper()]
    assert names
    for name in names:
        assert getattr(V2Code, name) == getattr(pb, name), name
