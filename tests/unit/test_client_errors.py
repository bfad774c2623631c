"""The client's one conversion from gRPC failures to rocketlite errors."""

from __future__ import annotations

import grpc
import pytest

from rmq_spark.client import ClientConfig, RetryPolicy, error_from_rpc
from rmq_spark.errors import (
    ERROR_CLASS_METADATA,
    InvalidArgumentError,
    NotFoundError,
    RequestTimeoutError,
    RocketliteError,
    StoreError,
    StoreLockedError,
    UnavailableError,
)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, class_name=None):
        self._code, self._details = code, details
        self._trailers = ((ERROR_CLASS_METADATA, class_name),) if class_name else ()

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


def test_the_broker_named_class_wins_and_keeps_the_broker_message():
    exc = FakeRpcError(
        grpc.StatusCode.FAILED_PRECONDITION, "store /x is locked", "StoreLockedError"
    )
    error = error_from_rpc(exc, "h:1", "SendMessages")
    assert type(error) is StoreLockedError
    assert str(error) == "store /x is locked"
    assert error.endpoint == "h:1"


def test_without_a_class_the_code_decides_and_the_message_names_call_and_endpoint():
    exc = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    error = error_from_rpc(exc, "10.0.0.1:10911", "PullMessages")
    assert type(error) is UnavailableError and error.retriable
    assert "PullMessages on broker 10.0.0.1:10911 failed: UNAVAILABLE" in str(error)


def test_a_class_name_of_another_code_falls_back_to_the_code():
    exc = FakeRpcError(grpc.StatusCode.NOT_FOUND, "no topic", "StoreLockedError")
    assert type(error_from_rpc(exc, "h:1", "x")) is NotFoundError
    unknown = FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "?", "SomeFutureError")
    assert type(error_from_rpc(unknown, "h:1", "x")) is StoreError


def test_deadline_says_how_long_was_waited():
    exc = FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    error = error_from_rpc(exc, "h:1", "GetTopicRoute", timeout_s=2.5)
    assert type(error) is RequestTimeoutError
    assert "GetTopicRoute on broker h:1 got no answer within 2.5 s" in str(error)


def test_unknown_codes_become_the_base_class():
    exc = FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    error = error_from_rpc(exc, "h:1", "ViewMessage")
    assert type(error) is RocketliteError and "UNIMPLEMENTED" in str(error)


def test_config_validation_names_the_option():
    with pytest.raises(InvalidArgumentError, match="request_timeout_ms=0"):
        ClientConfig(request_timeout_ms=0)
    with pytest.raises(InvalidArgumentError, match="attempts=0"):
        RetryPolicy(attempts=0)


def test_retry_delays_double_up_to_the_cap():
    delays = list(RetryPolicy(attempts=5, backoff_ms=100, max_backoff_ms=300).delays_s())
    assert len(delays) == 4
    for got, want in zip(delays, [0.1, 0.2, 0.3, 0.3], strict=True):
        assert want * 0.8 <= got <= want * 1.2
