"""The remoting listener: TCP connections carrying RocketMQ's remoting frames.

Runs on the broker's event loop beside gRPC. Each connection is an :class:`asyncio.Protocol`
that splits frames out of what arrives, hands each request to the service (which answers on
the loop or hands store work to the broker's workers) and matches responses to the requests
the broker itself sent and waits on (:meth:`Connection.request`: a consumer's running info,
a message it is asked to consume; NOTIFY_CONSUMER_IDS_CHANGED and the other notices are
oneway). A connection that sends a frame that cannot be read is closed, as RocketMQ does;
the broker keeps serving everyone else.

TLS shares the port: RocketMQ tells a TLS hello from a plaintext frame by the first byte
(0x16 is a TLS handshake record; a frame under 16 MiB starts with 0x00). A broker with TLS
files serves TLS only, as its gRPC port does, and closes plaintext connections.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from rmq_spark.errors import UnavailableError
from rmq_spark.log_limit import LogLimiter, brief, kind_of
from rmq_spark.wire.remoting.frame import (
    Buffer,
    Command,
    FrameError,
    decode,
    encode_parts,
    split_frames,
)

log = logging.getLogger("rmq_spark.broker.remoting")

TLS_HANDSHAKE = 0x16
#: how long a new connection may stay silent before its first byte (TLS sniffing)
FIRST_BYTE_TIMEOUT_S = 30.0
#: bytes a connection may have waiting to be sent before it stops reading requests
WRITE_HIGH_WATER = 8 << 20
#: the opaques of the requests the broker sends its clients (RocketMQ numbers them per
#: process, as its clients do theirs: each side matches only its own)
_opaques = itertools.count(1)


def next_opaque() -> int:
    """A new opaque for a request the broker sends (a positive int32)."""
    return next(_opaques) & 0x7FFFFFFF


class RequestHandler(Protocol):
    """What a connection hands its requests to (the remoting service's request table)."""

    def connection_opened(self, connection: Connection) -> None: ...

    def dispatch(self, connection: Connection, request: Command) -> None: ...

    def connection_closed(self, connection: Connection) -> None: ...

    def answered(self, request_code: int, response_code: int, took_ms: float) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection (a RocketMQ "channel")."""

    def __init__(
        self, service: RequestHandler, max_frame_bytes: int, log_limit: LogLimiter
    ) -> None:
        self.service = service
        self._log_limit = log_limit
        self.max_frame_bytes = max_frame_bytes
        self.peer = "127.0.0.1:0"
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._outgoing: list[Buffer] = []
        self._flush_scheduled = False
        #: when the peer last sent something (monotonic seconds): idle connections close
        self.last_active = time.monotonic()
        #: the client id it said in its heartbeats (empty before the first)
        self.client_id = ""
        #: what the last heartbeat said: language and version, for connection lists
        self.language = "JAVA"
        self.version = 0
        #: groups with a task watching membership for this connection, by group name
        self.watches: dict[str, asyncio.Task] = {}
        #: producer groups this connection said it belongs to
        self.producer_groups: set[str] = set()
        #: the broker's requests waiting for the client's answer, by opaque
        self._waiting: dict[int, asyncio.Future[Command]] = {}

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream's transport (TCP, or TLS over it), which writes too
        self.transport = stream = cast(asyncio.Transport, transport)
        stream.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple) and len(address) >= 2:
            host = address[0]
            self.peer = f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        self.service.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        buffer = self._buffer
        buffer += data
        try:
            frames, used = split_frames(buffer, self.max_frame_bytes)
            del buffer[:used]
            for frame in frames:
                self._received(decode(frame))
        except FrameError as exc:
            # rate-limited by the kind of defect, not its values (a client chooses those)
            self._log_limit.warning(
                ("frame", kind_of(str(exc))),
                "closing remoting connection from %s: %s",
                self.peer,
                brief(str(exc)),
            )
            self.close()
        except Exception as exc:  # a bug: one line, and only this connection ends
            self._log_limit.error(
                ("frame", type(exc).__name__),
                "closing remoting connection from %s: internal error %s: %s",
                self.peer,
                type(exc).__name__,
                brief(str(exc)),
            )
            log.debug("the internal error's traceback", exc_info=exc)
            self.close()

    def _received(self, command: Command) -> None:
        if self._closed:
            return
        if command.is_response:
            waiting = self._waiting.pop(command.opaque, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(command)
            return  # an answer nothing waits for (any more) is dropped, as RocketMQ does
        self.service.dispatch(self, command)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for task in list(self._tasks) + list(self.watches.values()):
            task.cancel()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(
                    UnavailableError(f"the client at {self.peer} closed its connection")
                )
        self._waiting.clear()
        self.service.connection_closed(self)

    def pause_writing(self) -> None:
        # A client that does not read its answers stops being read: its requests wait in
        # the socket instead of piling up answers in memory.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.resume_reading()

    # -- used by the service ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, command: Command) -> None:
        """Queue ``command`` for writing. Everything queued during one turn of the event
        loop goes out in one write: thirty-two answers ready together cost one system call,
        not thirty-two."""
        if self._closed or self.transport is None:
            return
        if command.received_s:
            took_ms = (time.perf_counter() - command.received_s) * 1000
            self.service.answered(command.request_code, command.code, took_ms)
        head, body = encode_parts(command)
        self._outgoing.append(head)
        if body:
            self._outgoing.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        outgoing, self._outgoing = self._outgoing, []
        if not self._closed and self.transport is not None:
            self.transport.writelines(outgoing)

    async def request(self, command: Command, timeout_s: float) -> Command:
        """Send ``command`` (a request of the broker's, given an opaque here) to the client
        and wait for its answer: TimeoutError after ``timeout_s``, UnavailableError when
        the connection closes first."""
        if self._closed:
            raise UnavailableError(f"the client at {self.peer} closed its connection")
        command.opaque = next_opaque()
        answer: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self._waiting[command.opaque] = answer
        try:
            self.send(command)
            return await asyncio.wait_for(answer, timeout_s)
        finally:
            self._waiting.pop(command.opaque, None)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coroutine`` as a task that ends with this connection."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def close(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()


class RemotingListener:
    """Accepts connections on one port and gives each a :class:`Connection`."""

    def __init__(self, sock: socket.socket, tls: ssl.SSLContext | None) -> None:
        self._socket = sock
        #: makes the protocol object of each accepted connection (set before start())
        self.make_connection: Callable[[], Connection] | None = None
        self._tls = tls
        self._accepting: asyncio.Task | None = None
        self._admitting: set[asyncio.Task] = set()
        #: a failed accept is retried every 0.1 s: said once a minute per errno
        self._accept_failures = LogLimiter(log)
        self.port: int = sock.getsockname()[1]

    @classmethod
    def bind(cls, host: str, port: int, tls: ssl.SSLContext | None = None) -> RemotingListener:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, port), family=family, backlog=1024)
        except OSError as exc:
            raise UnavailableError(
                f"cannot listen for the remoting protocol on {host}:{port}: {exc.strerror}; "
                "is the port in use? (choose another with --remoting-port, or 'off')"
            ) from None
        sock.setblocking(False)
        return cls(sock, tls)

    def start(self) -> None:
        """Start accepting (call on the event loop)."""
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(self._socket)
            except OSError as exc:  # e.g. out of file descriptors: wait, then go on
                self._accept_failures.warning(
                    exc.errno, "remoting accept failed: %s (retried every 0.1 s)", exc
                )
                await asyncio.sleep(0.1)
                continue
            admitting = loop.create_task(self._admit(sock))
            self._admitting.add(admitting)
            admitting.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = None
        if self._tls is not None:
            first = await _first_byte(loop, sock)
            if first != TLS_HANDSHAKE:
                log.warning(
                    "closed a plaintext remoting connection: this broker serves TLS only "
                    "(clients need useTLS / tls.enable=true)"
                )
                sock.close()
                return
            tls = self._tls
        try:
            assert self.make_connection is not None
            await loop.connect_accepted_socket(self.make_connection, sock, ssl=tls)
        except (OSError, ssl.SSLError) as exc:
            log.warning("remoting connection failed to start: %s", exc)
            sock.close()

    def close(self) -> None:
        """Stop accepting (on the event loop once started); open connections are the
        service's to close."""
        if self._accepting is not None:
            self._accepting.cancel()
        self._socket.close()


async def _first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The first byte the peer sent, left unread; None if it sent nothing in time."""
    readable = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(sock.fileno(), ready)
    try:
        await asyncio.wait_for(readable, FIRST_BYTE_TIMEOUT_S)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(sock.fileno())
    try:
        peeked = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return None
    return peeked[0] if peeked else None
