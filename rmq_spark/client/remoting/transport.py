"""One TCP connection speaking RocketMQ's remoting protocol, used from any thread.

Requests carry an ``opaque`` the answer echoes; a reader thread matches answers to the
waiting callers, so many threads share one connection as RocketMQ's clients share their
channel. Requests the broker sends on its own (NOTIFY_CONSUMER_IDS_CHANGED, and
CHECK_TRANSACTION_STATE to a producer group's connection) go to ``on_request``, on the
reader thread (a hook hands slow work to a thread of its own), or are dropped.
:meth:`RemotingConnection.submit` sends a request and returns at once, so one thread keeps
many requests in flight (a transactional producer's one-message sends). A connection that
broke fails every waiting call with UnavailableError and is opened again by the next call.

>>> conn = RemotingConnection("127.0.0.1:9876")                    # doctest: +SKIP
>>> conn.call(Command(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}), 3.0)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RequestTimeoutError,
    RocketliteError,
    UnavailableError,
)
from rmq_spark.wire.remoting.codes import FLAG_ONEWAY, OUR_VERSION, ResponseCode
from rmq_spark.wire.remoting.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    Command,
    FrameError,
    decode,
    encode,
    split_frames,
)

log = logging.getLogger("rmq_spark.client.remoting")

CONNECT_TIMEOUT_S = 3.0
_READ_CHUNK = 256 << 10
#: frames larger than this are received into a buffer of their own
_DIRECT_FRAME_BYTES = 64 << 10


class RemotingError(RocketliteError):
    """An answer other than success from a RocketMQ broker or name server, with its code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: response codes a caller may meet again on a retry, or on another broker
_RETRIABLE = {
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.GO_AWAY,
    ResponseCode.SYSTEM_ERROR,
}


def raise_for(answer: Command, what: str) -> None:
    """Raise the rocketlite error of a failed answer (nothing for SUCCESS)."""
    if answer.code == ResponseCode.SUCCESS:
        return
    remark = " ".join((answer.remark or "no remark").split())  # one line, as errors are
    text = f"{what}: {remark} (RocketMQ response code {answer.code})"
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        raise NotFoundError(text)
    if answer.code == ResponseCode.NO_PERMISSION:
        raise PermissionDeniedError(text)
    if answer.code in _RETRIABLE:
        raise UnavailableError(text)
    if answer.code == ResponseCode.INVALID_PARAMETER:
        raise InvalidArgumentError(text)
    raise RemotingError(answer.code, text)


class RemotingConnection:
    def __init__(
        self,
        address: str,
        *,
        tls: ssl.SSLContext | None = None,
        on_request: Callable[[Command], None] | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgumentError(f"address {address!r} is not host:port")
        self.address = address
        self._target = (host.strip("[]"), int(port))
        self._tls = tls
        self._on_request = on_request
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()  # guards the socket, sending and the pending table
        self._sock: socket.socket | None = None
        self._pending: dict[int, Future] = {}
        self._opaques = itertools.count(1)
        self._closed = False

    # -- calls --------------------------------------------------------------------------------

    def call(self, request: Command, timeout_s: float) -> Command:
        """Send ``request`` and wait for its answer (UnavailableError if the connection
        fails, RequestTimeoutError after ``timeout_s``)."""
        future: Future = Future()
        with self._lock:
            sock = self._ensure_open()
            request.opaque = next(self._opaques) & 0x7FFFFFFF
            self._pending[request.opaque] = future
            self._send_locked(sock, request)
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(request.opaque, None)
            raise RequestTimeoutError(
                f"{self.address} did not answer request {request.code} within {timeout_s:g} s"
            ) from None

    def submit(self, request: Command) -> Future[Command]:
        """Send ``request`` and return the future of its answer (it fails with
        UnavailableError when the connection breaks first). The caller bounds the wait:
        :meth:`forget` drops a request whose answer it no longer waits for."""
        future: Future[Command] = Future()
        with self._lock:
            sock = self._ensure_open()
            request.opaque = next(self._opaques) & 0x7FFFFFFF
            self._pending[request.opaque] = future
            self._send_locked(sock, request)
        return future

    def submit_many(self, requests: list[Command]) -> list[Future[Command]]:
        """:meth:`submit` of several requests, written to the socket at once."""
        futures: list[Future[Command]] = [Future() for _ in requests]
        with self._lock:
            sock = self._ensure_open()
            frames = []
            for request, future in zip(requests, futures, strict=True):
                request.opaque = next(self._opaques) & 0x7FFFFFFF
                request.version = request.version or OUR_VERSION
                request.language = "PYTHON"
                self._pending[request.opaque] = future
                frames.append(encode(request))
            try:
                sock.sendall(b"".join(frames))
            except OSError as exc:
                self._fail_locked(sock, f"sending to {self.address} failed: {exc}")
                raise UnavailableError(f"sending to {self.address} failed: {exc}") from None
        return futures

    def forget(self, request: Command) -> None:
        """Stop waiting for the answer to ``request`` (sent with :meth:`submit`)."""
        with self._lock:
            self._pending.pop(request.opaque, None)

    def oneway(self, request: Command) -> None:
        """Send ``request`` without waiting: the receiver answers none."""
        request.flag |= FLAG_ONEWAY
        with self._lock:
            sock = self._ensure_open()
            request.opaque = next(self._opaques) & 0x7FFFFFFF
            self._send_locked(sock, request)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
        if sock is not None:
            _close_socket(sock)

    # -- the socket ---------------------------------------------------------------------------

    def _ensure_open(self) -> socket.socket:
        if self._closed:
            raise UnavailableError(f"the connection to {self.address} is closed")
        if self._sock is not None:
            return self._sock
        try:
            sock = socket.create_connection(self._target, timeout=self._connect_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._target[0])
            sock.settimeout(None)
        except (OSError, ssl.SSLError) as exc:
            raise UnavailableError(
                f"cannot connect to {self.address}: {exc}; is the name server or broker "
                "running there?"
            ) from None
        self._sock = sock
        reader = threading.Thread(
            target=self._read_loop, args=(sock,), name=f"rmq-remoting-{self.address}", daemon=True
        )
        reader.start()
        return sock

    def _send_locked(self, sock: socket.socket, request: Command) -> None:
        request.version = request.version or OUR_VERSION
        request.language = "PYTHON"
        try:
            sock.sendall(encode(request))
        except OSError as exc:
            self._fail_locked(sock, f"sending to {self.address} failed: {exc}")
            raise UnavailableError(f"sending to {self.address} failed: {exc}") from None

    def _read_loop(self, sock: socket.socket) -> None:
        reason = f"{self.address} closed the connection"
        try:
            for frame in _frames(sock):
                self._received(decode(frame, copy_body=False))
        except (OSError, FrameError) as exc:
            reason = f"the connection to {self.address} failed: {exc}"
        with self._lock:
            self._fail_locked(sock, reason)

    def _received(self, command: Command) -> None:
        if command.is_response:
            with self._lock:
                future = self._pending.pop(command.opaque, None)
            if future is not None:
                future.set_result(command)
            return
        if self._on_request is not None:
            try:
                self._on_request(command)
            except Exception:  # a hook's bug must not end the connection
                log.exception("handling request %d from %s failed", command.code, self.address)

    def _fail_locked(self, sock: socket.socket, reason: str) -> None:
        if self._sock is sock:
            self._sock = None
        _close_socket(sock)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(UnavailableError(reason))


def _frames(sock: socket.socket) -> Iterator[bytes | bytearray]:
    """Every frame the peer sends (without its length prefix), until it closes. Small frames
    are split out of what arrives together; a large one (a pull's answer) is received
    straight into a buffer of its own size, so its megabytes are copied once, by the
    kernel."""
    buffer = bytearray()
    while True:
        frames, used = split_frames(buffer, DEFAULT_MAX_FRAME_BYTES)
        del buffer[:used]
        yield from frames
        if len(buffer) >= 4:
            length = int.from_bytes(buffer[:4], "big", signed=True)
            if length > _DIRECT_FRAME_BYTES:  # checked against the limit by split_frames
                frame = bytearray(length)
                have = len(buffer) - 4
                frame[:have] = buffer[4:]
                buffer.clear()
                _receive_into(sock, memoryview(frame)[have:])
                yield frame
                continue
        data = sock.recv(_READ_CHUNK)
        if not data:
            return
        buffer += data


def _receive_into(sock: socket.socket, view: memoryview) -> None:
    while len(view):
        got = sock.recv_into(view)
        if not got:
            raise OSError("the peer closed the connection in the middle of a frame")
        view = view[got:]


def _close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
