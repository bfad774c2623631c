"""One gRPC channel per broker endpoint, and the single call path of the client.

Every RPC the client makes goes through :meth:`Connection.call` (or :meth:`Connection.start`
for calls issued in parallel), so a ``grpc.RpcError`` becomes an :mod:`rmq_spark.errors`
class in exactly one place (:func:`error_from_rpc`), and only retriable errors are retried
(``RocketliteError.retriable``: the broker was unreachable or stopping, or did not answer in
time).
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from rmq_spark import tls as tls_files
from rmq_spark.errors import (
    ERROR_CLASS_METADATA,
    InvalidArgumentError,
    RocketliteError,
    UnavailableError,
    check_whole_numbers,
    error_from_status,
)
from rmq_spark.retry import backoff_delays
from rmq_spark.units import MiB
from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    groups_pb2_grpc,
    messaging_pb2_grpc,
    offsets_pb2_grpc,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger("rmq_spark.client")

#: after the connection came back: a breath before retrying, so a broker that is still
#: opening its store is not hit by every client at the same instant
RECONNECTED_PAUSE_S = 0.05
#: how soon wait_ready looks again after the broker refused the probe
WAIT_READY_RECHECK_S = 0.05


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one endpoint is retried after a retriable error
    (``RocketliteError.retriable``: UNAVAILABLE, or no answer within the deadline).

    The delay doubles after each failed attempt (with +-20 % jitter so many clients do not
    retry in step), from ``backoff_ms`` up to ``max_backoff_ms``.
    """

    attempts: int = 3
    backoff_ms: int = 100
    max_backoff_ms: int = 1_000

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidArgumentError(f"retry attempts={self.attempts!r} must be >= 1")
        if self.backoff_ms < 0 or self.max_backoff_ms < self.backoff_ms:
            raise InvalidArgumentError(
                f"retry backoff_ms={self.backoff_ms!r}, max_backoff_ms={self.max_backoff_ms!r}: "
                "need 0 <= backoff_ms <= max_backoff_ms"
            )

    def delays_s(self) -> Iterator[float]:
        """Sleep before attempt 2, 3, ...: one value per retry."""
        delays_ms = backoff_delays(self.backoff_ms, self.max_backoff_ms)
        for delay_ms in itertools.islice(delays_ms, self.attempts - 1):
            yield delay_ms * random.uniform(0.8, 1.2) / 1000


NO_RETRY = RetryPolicy(attempts=1)


@dataclass
class ClientConfig:
    """Settings every client (producer, consumer, admin) shares. Units are in the names."""

    #: deadline of one ordinary call (long polls add their suspend time to it)
    request_timeout_ms: int = 10_000
    #: retries of one endpoint after a retriable error (UNAVAILABLE, a deadline)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: how long a merged topic route is trusted before it is fetched again
    route_ttl_ms: int = 30_000
    #: gRPC message limit both ways; the broker's default is 64 MiB (a send batch, a pull)
    max_grpc_message_bytes: int = 64 * MiB
    #: HTTP/2 keepalive ping interval, so dead connections are noticed between calls
    keepalive_time_ms: int = 30_000
    #: reconnect backoff cap after a broker went away (gRPC's default is 120 s): a restarted
    #: broker is found again within about this long
    max_reconnect_backoff_ms: int = 1_000
    #: connect with TLS (the broker runs with --tls-cert/--tls-key)
    tls: bool = False
    #: PEM CA certificate(s) that signed the brokers' certificates (default: the system's)
    tls_ca_file: str | None = None
    #: PEM client certificate and its key, for brokers that require one (mutual TLS)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: access key (user name) for brokers with access control; every call is then signed.
    #: Default: the ROCKETLITE_ACCESS_KEY environment variable
    access_key: str | None = field(
        default_factory=lambda: os.environ.get("ROCKETLITE_ACCESS_KEY") or None
    )
    #: its secret (default: ROCKETLITE_SECRET_KEY); never shown in repr or logs
    secret_key: str | None = field(
        default_factory=lambda: os.environ.get("ROCKETLITE_SECRET_KEY") or None, repr=False
    )

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise InvalidArgumentError(
                "give both access_key and secret_key (or ROCKETLITE_ACCESS_KEY and "
                "ROCKETLITE_SECRET_KEY), or neither"
            )
        check_whole_numbers(
            self,
            (
                "request_timeout_ms",
                "route_ttl_ms",
                "max_grpc_message_bytes",
                "keepalive_time_ms",
                "max_reconnect_backoff_ms",
            ),
            1,
        )
        given = [
            name
            for name in ("tls_ca_file", "tls_cert_file", "tls_key_file")
            if getattr(self, name) is not None
        ]
        if given and not self.tls:
            raise InvalidArgumentError(f"{given[0]} is set but tls is False; set tls=True")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise InvalidArgumentError(
                "tls_cert_file and tls_key_file go together (a client certificate and its key)"
            )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials from the PEM files (read and checked now), or None (plaintext).
        InvalidArgumentError names the setting and the file of a problem."""
        if not self.tls:
            return None
        ca = None
        if self.tls_ca_file is not None:
            ca = tls_files.check_ca(tls_files.Setting("tls_ca_file", self.tls_ca_file))
        cert = key = None
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            cert, key = tls_files.check_key_pair(
                tls_files.Setting("tls_cert_file", self.tls_cert_file),
                tls_files.Setting("tls_key_file", self.tls_key_file),
            )
        return grpc.ssl_channel_credentials(ca, key, cert)

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

    def channel_options(self) -> list[tuple[str, Any]]:
        return [
            ("grpc.max_send_message_length", self.max_grpc_message_bytes),
            ("grpc.max_receive_message_length", self.max_grpc_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", self.max_reconnect_backoff_ms),
        ]


class _Signing(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the RocketMQ 5 signature (x-mq-date-time, authorization) to every call."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        self._access_key = access_key
        self._secret_key = secret_key

    def __repr__(self) -> str:
        return f"_Signing(access_key={self._access_key!r})"

    def _signed(self, details: grpc.ClientCallDetails) -> _CallDetails:
        from rmq_spark.auth.signature import signed_metadata

        metadata = [
            (k, v)
            for k, v in (details.metadata or ())
            if k not in ("authorization", "x-mq-date-time")
        ]
        metadata += signed_metadata(self._access_key, self._secret_key)
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    # The calls ``continuation`` makes: a Future of the response for a unary response, an
    # iterator of the responses for a stream (both also a grpc.Call).

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Message], grpc.Future],
        details: grpc.ClientCallDetails,
        request: Message,
    ) -> grpc.Future:
        return continuation(self._signed(details), request)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Message], Iterator[Message]],
        details: grpc.ClientCallDetails,
        request: Message,
    ) -> Iterator[Message]:
        return continuation(self._signed(details), request)

    def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Iterator[Message]], grpc.Future],
        details: grpc.ClientCallDetails,
        request_iterator: Iterator[Message],
    ) -> grpc.Future:
        return continuation(self._signed(details), request_iterator)

    def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Iterator[Message]], Iterator[Message]],
        details: grpc.ClientCallDetails,
        request_iterator: Iterator[Message],
    ) -> Iterator[Message]:
        return continuation(self._signed(details), request_iterator)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(
        self,
        method: str,
        timeout: float | None,
        metadata: list[tuple[str, str | bytes]],
        credentials: grpc.CallCredentials | None,
        wait_for_ready: bool | None,
        compression: grpc.Compression | None,
    ) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


def error_from_rpc(
    exc: grpc.RpcError,
    endpoint: str,
    method: str,
    timeout_s: float | None = None,
    tls: bool = False,
) -> RocketliteError:
    """The rocketlite exception for a failed call: the broker's class when it named one.

    Errors raised by the broker keep the broker's message (it names the bad value); errors
    of the transport (connection refused, deadline) say which call to which endpoint failed,
    and what a failed TLS handshake most likely means (``tls``: the client used TLS). The
    endpoint is also kept as the ``endpoint`` attribute.
    """
    code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    trailers = exc.trailing_metadata() if callable(getattr(exc, "trailing_metadata", None)) else ()
    class_name = next((v for k, v in trailers or () if k == ERROR_CLASS_METADATA), None)
    code_name = code.name if code is not None else "UNKNOWN"
    if class_name is not None:
        message = details or code_name
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout_s is not None:
        message = (
            f"{method} on broker {endpoint} got no answer within {timeout_s:g} s; the broker "
            "may be overloaded or unreachable (raise request_timeout_ms to wait longer)"
        )
    else:
        message = f"{method} on broker {endpoint} failed: {code_name}: {details}"
        hint = (
            tls_files.describe_handshake_failure(details or "", tls)
            if code == grpc.StatusCode.UNAVAILABLE
            else None
        )
        if hint is not None:
            message = f"{method} on broker {endpoint} failed: {hint} ({details})"
    error = error_from_status(code_name, message, class_name)
    error.endpoint = endpoint  # type: ignore[attr-defined]
    # No class named: the transport failed (no connection), not the broker's own answer.
    error.from_broker = class_name is not None  # type: ignore[attr-defined]
    return error


def _gave_up(error: RocketliteError, attempts: int) -> RocketliteError:
    """``error`` (same class, endpoint and origin) saying that every attempt failed."""
    final = type(error)(f"{error} (gave up after {attempts} attempts)")
    final.__dict__.update(error.__dict__)  # endpoint, from_broker
    return final


class PendingCall:
    """A call started with :meth:`Connection.start`; ``result()`` raises rocketlite errors."""

    def __init__(
        self, future: grpc.Future, endpoint: str, method: str, timeout_s: float, tls: bool = False
    ):
        self.future = future
        self._where = (endpoint, method, timeout_s, tls)

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> None:
        self.future.cancel()

    def cancelled(self) -> bool:
        return self.future.cancelled()

    def result(self) -> Any:
        try:
            return self.future.result()
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, *self._where) from exc


class Connection:
    """The channel to one broker endpoint and a stub for each service.

    >>> conn = Connection("127.0.0.1:10911", ClientConfig())  # doctest: +SKIP
    >>> conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())  # doctest: +SKIP
    """

    def __init__(self, endpoint: str, config: ClientConfig) -> None:
        self.endpoint = endpoint
        self.config = config
        credentials = config.channel_credentials()
        if credentials is None:
            self.channel = grpc.insecure_channel(endpoint, options=config.channel_options())
        else:
            self.channel = grpc.secure_channel(
                endpoint, credentials, options=config.channel_options()
            )
        if config.access_key and config.secret_key:
            self.channel = grpc.intercept_channel(
                self.channel, _Signing(config.access_key, config.secret_key)
            )
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(self.channel)
        self.groups = groups_pb2_grpc.GroupServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        # Method names for messages, keyed by the identity of each stub's callables.
        self._method_names: dict[int, str] = {
            id(method): name
            for stub in (self.messaging, self.offsets, self.groups, self.admin)
            for name, method in vars(stub).items()
        }
        self._closed = False

    def method_name(self, method: Any) -> str:
        return self._method_names.get(id(method), "call")

    def call(
        self,
        method: Any,
        request: Any,
        *,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Call ``method`` (a stub attribute of this connection) and return its response.

        Retries the errors that are ``retriable`` (UNAVAILABLE, no answer in time) as
        ``retry`` says (the config's policy by default; pass :data:`NO_RETRY` when the
        caller fails over elsewhere itself), and no others. Raises rocketlite errors.
        """
        name = self.method_name(method)
        timeout = self.config.request_timeout_s if timeout_s is None else timeout_s
        policy = self.config.retry if retry is None else retry
        delays = policy.delays_s()
        for attempt in range(1, policy.attempts + 1):
            self._check_open(name)
            try:
                return method(request, timeout=timeout)
            except grpc.RpcError as exc:
                error = error_from_rpc(exc, self.endpoint, name, timeout, self.config.tls)
                cause: BaseException = exc
            if not error.retriable or attempt == policy.attempts:
                break
            pause = next(delays)
            log.debug(
                "%s on %s failed (%s); retry within %.2f s", name, self.endpoint, error, pause
            )
            self.pause_before_retry(error, pause)
        if error.retriable and policy.attempts > 1:
            error = _gave_up(error, policy.attempts)
        raise error from cause

    def start(self, method: Any, request: Any, *, timeout_s: float) -> PendingCall:
        """Start ``method`` without waiting (no retries): for calls made in parallel."""
        name = self.method_name(method)
        self._check_open(name)
        return PendingCall(
            method.future(request, timeout=timeout_s),
            self.endpoint,
            name,
            timeout_s,
            self.config.tls,
        )

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the broker to be reachable; True as soon as it is.

        A restarted broker is reached again within ``max_reconnect_backoff_ms`` of its
        coming back, rather than at the next retry of a fixed schedule. The probe is one
        small call that waits for the connection (``wait_for_ready``), which leaves no
        connectivity-watching thread behind.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                self.admin.GetBrokerInfo(
                    admin_pb2.GetBrokerInfoRequest(), timeout=remaining, wait_for_ready=True
                )
                return True
            except grpc.RpcError as exc:
                if getattr(
                    error_from_rpc(exc, self.endpoint, "GetBrokerInfo"), "from_broker", False
                ):
                    return True  # the broker itself answered: it is there
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return False
            except ValueError:  # the channel was closed meanwhile (the client shuts down)
                return False
            # Refused by a broker that is still stopping, or the connection broke: the
            # broker is not back yet. Look again shortly, within the same pause.
            time.sleep(min(WAIT_READY_RECHECK_S, max(0.0, deadline - time.monotonic())))

    def pause_before_retry(self, error: RocketliteError, pause_s: float) -> None:
        """Wait before retrying after ``error``: no longer than ``pause_s``, and only until the
        connection is back when the broker was unreachable. Anything else (an error the
        broker answered with, a deadline) waits the whole pause."""
        unreachable = isinstance(error, UnavailableError) and not getattr(
            error, "from_broker", True
        )
        if not unreachable:
            time.sleep(pause_s)
        elif self.wait_ready(pause_s):
            time.sleep(min(pause_s, RECONNECTED_PAUSE_S))

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise RocketliteError(
                f"cannot call {name} on {self.endpoint}: the client was closed; create a new one"
            )

    def close(self) -> None:
        self._closed = True
        self.channel.close()
