"""Which failures the client retries: one rule, ``RocketliteError.retriable``.

A call is sent again after UNAVAILABLE (the broker unreachable, stopping or failed) and
after its deadline passed without an answer; never after an answer that refuses it, nor
after a flush timeout (the messages are stored: sending them again would store them
twice). A round-robin send also moves to another broker after a refusal that a stale route
may explain. The calls below go over real gRPC to a loopback server that answers as a
broker would, and count what the server saw.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rmq_spark.client.connection import ClientConfig, Connection, RetryPolicy, error_from_rpc
from rmq_spark.client.producer import fails_over
from rmq_spark.errors import (
    ERROR_CLASS_METADATA,
    FlushTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RequestTimeoutError,
    ResourceExhaustedError,
    RocketliteError,
    StoreFailedError,
    UnauthenticatedError,
    UnavailableError,
)
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, admin_pb2_grpc


class RpcFailure(grpc.RpcError):
    def __init__(self, code, class_name=None):
        self._code = code
        self._trailers = ((ERROR_CLASS_METADATA, class_name),) if class_name else ()

    def code(self):
        return self._code

    def details(self):
        return "details"

    def trailing_metadata(self):
        return self._trailers


@pytest.mark.parametrize(
    ("code", "class_name", "cls", "retried", "moves_on"),
    [
        # the transport: no broker answered
        (grpc.StatusCode.UNAVAILABLE, None, UnavailableError, True, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, None, RequestTimeoutError, True, True),
        # the broker's own answers
        (grpc.StatusCode.UNAVAILABLE, "UnavailableError", UnavailableError, True, True),
        (grpc.StatusCode.UNAVAILABLE, "StoreFailedError", StoreFailedError, True, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "FlushTimeoutError", FlushTimeoutError, False,
         False),
        (grpc.StatusCode.NOT_FOUND, "NotFoundError", NotFoundError, False, True),
        (grpc.StatusCode.PERMISSION_DENIED, "PermissionDeniedError", PermissionDeniedError,
         False, True),
        (grpc.StatusCode.UNAUTHENTICATED, "UnauthenticatedError", UnauthenticatedError, False,
         False),
        (grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgumentError", InvalidArgumentError, False,
         False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "ResourceExhaustedError", ResourceExhaustedError,
         False, False),
        (grpc.StatusCode.INTERNAL, None, RocketliteError, False, False),
    ],
)  # fmt: skip
def test_which_failures_are_retried_and_which_move_a_send_to_another_broker(
    code, class_name, cls, retried, moves_on
):
    error = error_from_rpc(RpcFailure(code, class_name), "127.0.0.1:1", "SendMessages")
    assert type(error) is cls
    assert error.retriable is retried
    assert fails_over(error) is moves_on


class ScriptedBroker(admin_pb2_grpc.AdminServiceServicer):
    """Answers GetBrokerInfo by a script, one step per call: ``"answer"``, ``"silent"``
    (no answer before the client's deadline) or a (status code, error class) failure."""

    def __init__(self, steps) -> None:
        self.steps = list(steps)
        self.calls = 0
        self._lock = threading.Lock()

    def GetBrokerInfo(self, request, context):
        with self._lock:
            step = self.steps[min(self.calls, len(self.steps) - 1)]
            self.calls += 1
        if step == "silent":
            time.sleep(0.6)
        elif step != "answer":
            code, class_name = step
            context.set_trailing_metadata(((ERROR_CLASS_METADATA, class_name),))
            context.abort(code, f"scripted {class_name}")
        return admin_pb2.GetBrokerInfoResponse(broker_name="scripted")


@pytest.fixture
def scripted():
    servers = []

    def start(*steps):
        broker = ScriptedBroker(steps)
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        admin_pb2_grpc.add_AdminServiceServicer_to_server(broker, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        config = ClientConfig(
            request_timeout_ms=300, retry=RetryPolicy(attempts=3, backoff_ms=10, max_backoff_ms=20)
        )
        conn = Connection(f"127.0.0.1:{port}", config)
        servers.append((server, conn))
        return broker, conn

    yield start
    for server, conn in servers:
        conn.close()
        server.stop(grace=None)


UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, "UnavailableError")
STORE_FAILED = (grpc.StatusCode.UNAVAILABLE, "StoreFailedError")
NOT_FOUND = (grpc.StatusCode.NOT_FOUND, "NotFoundError")
FLUSH_TIMEOUT = (grpc.StatusCode.DEADLINE_EXCEEDED, "FlushTimeoutError")


@pytest.mark.parametrize(
    ("steps", "calls"),
    [
        (["answer"], 1),
        ([UNAVAILABLE, "answer"], 2),
        ([STORE_FAILED, UNAVAILABLE, "answer"], 3),
        (["silent", "answer"], 2),
    ],
)
def test_a_call_is_sent_again_after_retriable_failures(scripted, steps, calls):
    broker, conn = scripted(*steps)
    answer = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    assert answer.broker_name == "scripted"
    assert broker.calls == calls


@pytest.mark.parametrize(
    ("step", "cls"),
    [(NOT_FOUND, NotFoundError), (FLUSH_TIMEOUT, FlushTimeoutError)],
)
def test_a_call_the_broker_refused_is_sent_once(scripted, step, cls):
    broker, conn = scripted(step, "answer")
    with pytest.raises(cls, match=f"scripted {cls.__name__}"):
        conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    assert broker.calls == 1


def test_the_last_failure_keeps_its_class_and_says_every_attempt_failed(scripted):
    broker, conn = scripted(STORE_FAILED)
    with pytest.raises(StoreFailedError, match="gave up after 3 attempts") as caught:
        conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    assert broker.calls == 3
    assert caught.value.endpoint == conn.endpoint
