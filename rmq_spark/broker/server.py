"""Build and run the gRPC server: ``create_server(config) -> (server, port)`` and ``serve``.

The server is ``grpc.aio`` on an event loop of its own thread, so a caller (a test, an
example, the CLI) drives it with plain blocking calls: ``start()``, ``stop()``, ``wait()``.
Waiting calls (held pulls, watch streams) live on that loop and hold no thread; store work
runs on a bounded pool of worker threads (``BrokerConfig.worker_threads``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import signal
import threading
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Sequence,
)
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from rmq_spark.broker import v2
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.http.health import Phase, readiness
from rmq_spark.broker.http.health_service import HealthService
from rmq_spark.broker.stats import BrokerStats
from rmq_spark.broker.v1 import messaging
from rmq_spark.broker.v1.admin import AdminServicer
from rmq_spark.broker.v1.groups import GroupServicer
from rmq_spark.broker.v1.messaging import MessagingServicer
from rmq_spark.broker.v1.offsets import OffsetServicer
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import InvalidArgumentError, StoreFailedError, UnavailableError
from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2_grpc,
    groups_pb2_grpc,
    offsets_pb2_grpc,
)

if TYPE_CHECKING:
    # loaded only when configured (the ACL, HTTP, remoting, short-circuit reads) or installed
    # (RocketMQ 5's package)
    import ssl

    from rmq_spark.auth.acl_file import AclFile
    from rmq_spark.auth.interceptor import Authorizer
    from rmq_spark.broker.http.app import HttpApp, Member
    from rmq_spark.broker.http.server import HttpListener
    from rmq_spark.broker.remoting.server import RemotingListener
    from rmq_spark.broker.remoting.service import RemotingService
    from rmq_spark.broker.v1.short_circuit import ShortCircuitServer
    from rmq_spark.broker.v2.service import MessagingServiceV2

T = TypeVar("T")
#: a request's deserializer (a message class's FromString), and what it makes of the bytes
Deserializer = Callable[[bytes], object]

log = logging.getLogger("rmq_spark.broker")

#: calls that may wait to be picked up by the event loop (gRPC's default is 1,000)
MAX_PENDING_CALLS = 100_000
#: the longest a signal waits for serve() to act on it (see there)
SIGNAL_CHECK_S = 0.1


#: a malformed request is logged at most this often per method (one line, no traceback)
MALFORMED_LOG_EVERY_S = 60.0


class _Malformed:
    """What a request's bytes became when they do not parse as the method's message."""

    __slots__ = ("error", "expected")

    def __init__(self, error: Exception, expected: str) -> None:
        self.error = error
        self.expected = expected

    def __str__(self) -> str:
        return (
            f"the request is not a valid {self.expected} message "
            f"({type(self.error).__name__}: {str(self.error)[:200]}); send the method's "
            "protobuf request message"
        )


def _tolerant(deserializer: Deserializer | None) -> Deserializer | None:
    """``deserializer`` that gives a :class:`_Malformed` instead of raising: an exception
    from a deserializer makes grpc.aio answer UNKNOWN and log a traceback."""
    if deserializer is None:
        return None
    cls = getattr(deserializer, "__self__", None)
    descriptor = getattr(cls, "DESCRIPTOR", None)
    expected = getattr(descriptor, "full_name", None) or "request"

    def deserialize(data: bytes) -> object:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or whatever the parser makes of the bytes
            return _Malformed(exc, expected)

    return deserialize


async def _results(
    result: AsyncIterable[object] | Awaitable[object] | Iterable[object] | None,
) -> AsyncIterator[object]:
    """The items of a server-streaming behavior: an async generator, a coroutine that
    writes with ``context.write``, or a plain iterator."""
    if result is None:
        return
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    elif inspect.isawaitable(result):
        await result
    else:
        for item in result:
            yield item


class MalformedRequests(grpc.aio.ServerInterceptor):
    """Every call of both gRPC protocols: a request whose bytes do not parse as the
    method's message is answered INVALID_ARGUMENT, saying so, before anything else sees it
    (access control included), and logged as one line at most once a minute per method.
    Each call is timed into ``stats`` (once the broker is up) by protocol, method and
    status.

    Installed first, so it wraps every other interceptor: each request is decoded once,
    here, and the access check and the handler read that same message."""

    def __init__(self) -> None:
        self._logged: dict[str, tuple[float, int]] = {}
        #: where calls are timed (the broker's counters), None until the broker is open
        self.stats: BrokerStats | None = None

    def _timed(self, method: str, context: grpc.aio.ServicerContext, began: float) -> None:
        if self.stats is None:
            return
        service, _, name = method.rpartition("/")
        protocol = "grpc_v2" if service.startswith("/apache.rocketmq.v2") else "grpc_v1"
        try:
            code = context.code()
        except Exception:  # a context that cannot say: counted as unknown
            code = grpc.StatusCode.UNKNOWN
        status = "OK" if code is None else getattr(code, "name", str(code))
        self.stats.request(protocol, name, status, (time.perf_counter() - began) * 1000)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self._wrap(handler, handler_call_details.method)

    def _note(self, method: str, bad: _Malformed, peer: str | None) -> None:
        now = time.monotonic()
        last, skipped = self._logged.get(method, (-1e9, 0))
        if now - last < MALFORMED_LOG_EVERY_S:
            self._logged[method] = (last, skipped + 1)
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged[method] = (now, 0)
        more = f" ({skipped} more since the last report)" if skipped else ""
        log.warning("malformed request to %s from %s: %s%s", method, peer, bad, more)

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        note, timed = self._note, self._timed
        deserializer = _tolerant(handler.request_deserializer)

        async def refuse(bad: _Malformed, context: grpc.aio.ServicerContext) -> None:
            note(method, bad, context.peer())
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(bad))

        def checked(
            requests: AsyncIterable[object], bad: list[_Malformed]
        ) -> AsyncIterator[object]:
            async def messages() -> AsyncIterator[object]:
                async for message in requests:
                    if isinstance(message, _Malformed):
                        bad.append(message)  # ends the request stream; refused after
                        return
                    yield message

            return messages()

        if not handler.request_streaming and not handler.response_streaming:
            unary = handler.unary_unary

            async def unary_unary(request: object, context: grpc.aio.ServicerContext) -> object:
                began = time.perf_counter()
                try:
                    if isinstance(request, _Malformed):
                        await refuse(request, context)  # aborts the call
                        return None
                    answer = unary(request, context)
                    return await answer if inspect.isawaitable(answer) else answer
                finally:
                    timed(method, context, began)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, deserializer, handler.response_serializer
            )
        if not handler.request_streaming:
            unary_stream_inner = handler.unary_stream

            async def unary_stream(
                request: object, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[object]:
                began = time.perf_counter()
                try:
                    if isinstance(request, _Malformed):
                        await refuse(request, context)
                        return
                    async for item in _results(unary_stream_inner(request, context)):
                        yield item
                finally:
                    timed(method, context, began)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, deserializer, handler.response_serializer
            )
        if not handler.response_streaming:
            stream_unary_inner = handler.stream_unary

            async def stream_unary(
                requests: AsyncIterable[object], context: grpc.aio.ServicerContext
            ) -> object:
                bad: list[_Malformed] = []
                began = time.perf_counter()
                try:
                    answer = stream_unary_inner(checked(requests, bad), context)
                    answer = await answer if inspect.isawaitable(answer) else answer
                    if bad:
                        await refuse(bad[0], context)  # aborts the call
                        return None
                    return answer
                finally:
                    timed(method, context, began)

            return grpc.stream_unary_rpc_method_handler(
                stream_unary, deserializer, handler.response_serializer
            )
        stream_stream_inner = handler.stream_stream

        async def stream_stream(
            requests: AsyncIterable[object], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[object]:
            bad: list[_Malformed] = []
            began = time.perf_counter()
            try:
                async for item in _results(stream_stream_inner(checked(requests, bad), context)):
                    yield item
                if bad:
                    await refuse(bad[0], context)
            finally:
                timed(method, context, began)

        return grpc.stream_stream_rpc_method_handler(
            stream_stream, deserializer, handler.response_serializer
        )


class _LoopThread:
    """An asyncio event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result here."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BrokerServer:
    """A bound, not yet started broker. ``start()``, then ``stop()`` (or use ``with``)."""

    def __init__(
        self,
        broker: Broker,
        server: grpc.aio.Server,
        port: int,
        loop_thread: _LoopThread,
        workers: Workers,
        v2_service: MessagingServiceV2 | None = None,
        acl: AclFile | None = None,
        remoting: tuple[RemotingListener, RemotingService] | None = None,
        short_circuit: ShortCircuitServer | None = None,
        http: tuple[HttpListener, HttpApp] | None = None,
        health: HealthService | None = None,
    ) -> None:
        self.broker = broker
        #: the HTTP port's (listener, answers), or None when it is off
        self._http = http
        #: the gRPC health service (answers once started)
        self._health = health or HealthService()
        #: the task sampling the broker's totals for rates (once started)
        self._sampler: asyncio.Task[None] | None = None
        #: the short-circuit read socket's server, or None when it is off
        self.short_circuit = short_circuit
        #: the ACL file in force, or None
        self.acl = acl
        #: the RocketMQ 5 service (None when its package is not installed)
        self.v2 = v2_service
        #: the remoting protocol's (listener, service), or None when it is off
        self._remoting = remoting
        self.port = port
        self._server = server
        self._loop_thread = loop_thread
        self._workers = workers
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return self.broker.endpoint

    @property
    def remoting_port(self) -> int | None:
        """The bound port of the remoting protocol, or None when it is off."""
        return None if self._remoting is None else self._remoting[0].port

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (metrics, health, console), or None when it is off."""
        return None if self._http is None else self._http[0].port

    @property
    def remoting_address(self) -> str | None:
        """``host:port`` RocketMQ clients use as ``namesrvAddr``, or None when off."""
        return None if self._remoting is None else self._remoting[1].address

    def start(self) -> BrokerServer:
        # Not while stop() runs (a failed store stops the broker from a thread of its own):
        # it closes the event loop, and a start queued on a closed loop never ends.
        with self._stop_lock:
            if self._stopped.is_set():
                return self
            self._loop_thread.call(self._server.start())
            if self._remoting is not None:
                self._loop_thread.call(_start_remoting(*self._remoting))
            if self.short_circuit is not None:
                self.short_circuit.start()
            if self._http is not None:
                self._http[1].serving(self.broker, self._workers.run)
                self._http[1].connections = self._connections
                self._http[1].members = self._rocketmq5_members
                if self._remoting is not None:
                    calls = self._remoting[1].client_calls
                    self._http[1].tell_reset = functools.partial(calls.tell_reset, force=True)
            self._loop_thread.call(self._health.start(self._ready))
            self._sampler = self._loop_thread.call(_start_sampling(self.broker))
        config = self.broker.config
        log.info(
            "broker %s listening on %s, %s (store %s, flush %s)",
            self.broker.name,
            self.broker.endpoint,
            transport_name(config),
            config.store_dir,
            config.flush_mode,
        )
        missing = config.missing_protection()
        if config.exposed and missing:
            log.warning(
                "broker %s listens on %s:%d, which other machines may reach, WITHOUT %s "
                "(--insecure): %s",
                self.broker.name,
                config.host,
                self.port,
                " and WITHOUT ".join(missing),
                _exposure(missing),
            )
        return self

    def _ready(self) -> bool:
        storage = self.broker.messaging.storage()
        return readiness(Phase.SERVING, failure=storage.failure, disk_full=storage.disk_full).ready

    def _connections(self) -> dict[str, int]:
        """Open client connections per protocol (the gRPC ports' are not counted)."""
        if self._remoting is None:
            return {}
        return {"remoting": len(self._remoting[1].connections)}

    def _rocketmq5_members(self) -> list[Member]:
        """The live RocketMQ 5 consumers, as the HTTP port shows group members."""
        from rmq_spark.broker.http.app import Member

        if self.v2 is None:
            return []
        return [
            Member(group, client_id, "RocketMQ 5", kind, subscriptions)
            for group, client_id, kind, subscriptions in self.v2.clients.consumers()
        ]

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop serving (in-flight calls get ``grace_s``), then close the store cleanly."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            if self._http is not None:
                self._http[1].stopping()
            self._loop_thread.call(self._health.stop())
            if self._sampler is not None:
                self._loop_thread.loop.call_soon_threadsafe(self._sampler.cancel)
            if self.v2 is not None:
                self._loop_thread.call(self.v2.stop())
            if self._remoting is not None:
                self._loop_thread.call(_stop_remoting(*self._remoting))
            if self.short_circuit is not None:
                self.short_circuit.stop()
            self._loop_thread.call(self.broker.transaction_checks.stop())
            self.broker.notifier.close()  # release held pulls so the grace period is short
            self.broker.consumers.close()  # end watch streams
            self._loop_thread.call(self._server.stop(grace_s))
            if self._http is not None:
                self._loop_thread.call(self._http[0].close())
            if self.acl is not None:
                self.acl.stop()
            self._workers.shutdown()
            self._loop_thread.close()
            if self.v2 is not None:
                self.v2.close()
            self.broker.close()
            self._stopped.set()
        log.info("broker %s stopped", self.broker.name)

    def stop_after_failure(self, error: BaseException) -> None:
        """The store failed (fail-stop): stop serving, from a thread of its own (this runs
        on the store's flush thread, which stop() waits for)."""
        log.critical("broker %s stops: its store failed (%s)", self.broker.name, error)
        threading.Thread(target=self.stop, name="rmq-failstop", daemon=True).start()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stopped (or ``timeout_s`` passed); whether it is stopped."""
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def transport_name(config: BrokerConfig) -> str:
    if not config.tls:
        return "plaintext"
    return "mutual TLS" if config.tls_client_ca_file is not None else "TLS"


def _exposure(missing: list[str]) -> str:
    what = []
    if "access control" in missing:
        what.append("anyone who can connect may read, write and delete every topic and group")
    if "TLS" in missing:
        what.append("messages and offsets cross the network unencrypted")
    return "; ".join(what)


def server_options(config: BrokerConfig) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", config.max_request_bytes),
        ("grpc.max_send_message_length", config.max_response_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
        # Calls that arrived but the loop has not picked up yet: a burst of thousands of
        # long polls (consumers reconnecting after a restart) must queue, not be cancelled.
        ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),
        ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_CALLS),
    ]


def create_server(config: BrokerConfig) -> tuple[BrokerServer, int]:
    """Bind the port, open (and recover) the store and register the services.

    Refuses (InvalidArgumentError) a non-loopback address without TLS and access control
    unless ``config.insecure``, and TLS files that cannot be used."""
    config.check_exposure()
    credentials = server_credentials(config)
    acl = None
    authorizer = None
    front_door = MalformedRequests()
    interceptors: list[grpc.aio.ServerInterceptor] = [front_door]
    if config.acl_file:
        # Imported only when configured: a broker without an ACL runs no interceptor.
        from rmq_spark.auth.acl_file import AclFile
        from rmq_spark.auth.interceptor import AuthInterceptor, Authorizer

        acl = AclFile(config.acl_file)  # a bad file stops the broker here
        authorizer = Authorizer(lambda: acl.current)
        interceptors.append(AuthInterceptor(authorizer))
    loop_thread = _LoopThread(f"rmq-loop-{config.name}")
    try:
        server, port = loop_thread.call(_bind(config, credentials, interceptors))
    except BaseException:
        loop_thread.close()
        raise
    workers = Workers(config.worker_threads)
    listener = None
    http = None
    try:
        # the HTTP port answers while the store recovers: alive, not ready
        http = _bind_http(config, loop_thread, authorizer)
        listener = _bind_remoting(config)
        broker = Broker(config, port, None if listener is None else listener.port)
    except BaseException:
        if listener is not None:
            listener.close()
        if http is not None:
            loop_thread.call(http[0].close())
        workers.shutdown()
        loop_thread.call(server.stop(None))
        loop_thread.close()
        raise
    front_door.stats = broker.stats
    health = HealthService()
    health.add_to(server)
    messaging.add_to_server(MessagingServicer(broker, workers), server)
    offsets_pb2_grpc.add_OffsetServiceServicer_to_server(OffsetServicer(broker, workers), server)
    groups_pb2_grpc.add_GroupServiceServicer_to_server(GroupServicer(broker, workers), server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(broker, workers, acl), server)
    try:
        v2_service = v2.add_to_server(server, broker, workers)
        remoting = None
        if listener is not None:
            service = _remoting_service(config, broker, workers, listener, authorizer)
            remoting = (listener, service)
    except BaseException:
        if listener is not None:
            listener.close()
        if http is not None:
            loop_thread.call(http[0].close())
        workers.shutdown()
        loop_thread.call(server.stop(None))
        loop_thread.close()
        broker.close()
        raise
    short_circuit = _short_circuit(config, broker, port, authorizer)
    broker_server = BrokerServer(
        broker, server, port, loop_thread, workers, v2_service, acl, remoting, short_circuit,
        http, health,
    )  # fmt: skip
    if acl is not None:
        acl.start()
        log.info("access control on: ACL file %s (reloaded when it changes)", config.acl_file)
    broker.store.add_failure_listener(broker_server.stop_after_failure)
    return broker_server, port


def _short_circuit(
    config: BrokerConfig, broker: Broker, port: int, authorizer: Authorizer | None
) -> ShortCircuitServer | None:
    """The short-circuit read socket, bound (None when off, or when it cannot be made:
    readers then pull, as they do from another host)."""
    if config.short_circuit_socket is None:
        return None
    from rmq_spark.broker.v1.short_circuit import ShortCircuitServer, default_socket_path

    path = Path(config.short_circuit_socket or default_socket_path(port))
    try:
        server = ShortCircuitServer(broker, path, authorizer)
    except (OSError, InvalidArgumentError) as exc:
        log.warning("short-circuit reads are off: cannot listen on %s (%s)", path, exc)
        return None
    broker.short_circuit_socket = str(path)
    return server


async def _start_sampling(broker: Broker) -> asyncio.Task[None]:
    """Sample the broker's totals now and every ``broker.rates.step_s`` (rates of the
    console, RocketMQ's stats calls)."""

    async def sample() -> None:
        while True:
            broker.rates.take(broker.stats.totals())
            await asyncio.sleep(broker.rates.step_s)

    return asyncio.get_running_loop().create_task(sample())


def _bind_http(
    config: BrokerConfig, loop_thread: _LoopThread, authorizer: Authorizer | None
) -> tuple[HttpListener, HttpApp] | None:
    """Bind the HTTP port when configured, answering at once (None when off)."""
    if config.http_port is None:
        return None
    # Imported only when configured: a broker without it loads none of it.
    from rmq_spark.broker.http.app import HttpApp
    from rmq_spark.broker.http.console import mount_console
    from rmq_spark.broker.http.server import HttpListener

    app = HttpApp(authorizer)
    mount_console(app)
    listener = loop_thread.call(
        HttpListener.bind(config.host, config.http_port, app, remoting_tls(config))
    )
    return listener, app


def _bind_remoting(config: BrokerConfig) -> RemotingListener | None:
    """Bind the remoting port when configured (its listener), else None."""
    if config.remoting_port is None:
        return None
    # Imported only when configured: a broker without it loads none of it.
    from rmq_spark.broker.remoting.server import RemotingListener

    return RemotingListener.bind(config.host, config.remoting_port, remoting_tls(config))


def _remoting_service(
    config: BrokerConfig,
    broker: Broker,
    workers: Workers,
    listener: RemotingListener,
    authorizer: Authorizer | None,
) -> RemotingService:
    from rmq_spark.broker.remoting.service import RemotingService

    host = (config.advertised_endpoint or config.host).rsplit(":", 1)[0]
    if config.advertised_endpoint is None and host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    service = RemotingService(broker, workers, f"{host}:{listener.port}", authorizer)
    listener.make_connection = service.make_connection
    return service


async def _start_remoting(listener: RemotingListener, service: RemotingService) -> None:
    listener.start()
    service.start()
    await service.start_registration()


async def _stop_remoting(listener: RemotingListener, service: RemotingService) -> None:
    await service.stop_registration()  # clients stop being sent here before the port closes
    listener.close()
    service.close()


def remoting_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """An SSLContext for the remoting port from the same files as the gRPC port, or None."""
    material = config.tls_material()
    if material is None:
        return None
    import ssl
    import tempfile

    cert, key, client_ca = material
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # ssl loads certificates from files only: the checked PEM bytes go through a private
    # temporary file that is gone once loaded.
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as pem:
        pem.write(cert + b"\n" + key)
        pem.flush()
        context.load_cert_chain(pem.name)
    if client_ca is not None:
        context.load_verify_locations(cadata=client_ca.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_credentials(config: BrokerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from the config's PEM files (checked), or None for plaintext. Every
    service on the port (rocketlite.v1 and apache.rocketmq.v2) is served through them."""
    material = config.tls_material()
    if material is None:
        return None
    cert, key, client_ca = material
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


async def _bind(
    config: BrokerConfig,
    credentials: grpc.ServerCredentials | None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> tuple[grpc.aio.Server, int]:
    # Created on the loop that will run it: grpc.aio ties a server to its event loop.
    server = grpc.aio.server(
        options=server_options(config), interceptors=list(interceptors) or None
    )
    address = f"{config.host}:{config.port}"
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise UnavailableError(f"cannot listen on {address}: {exc}; is the port in use?") from exc
    if port == 0:
        raise UnavailableError(f"cannot listen on {address}; is the port in use?")
    return server, port


def serve(config: BrokerConfig, on_started: Callable[[BrokerServer], None] | None = None) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT, then shut down cleanly.

    ``on_started`` runs once the broker serves (e.g. to announce the bound port). A signal
    that arrives while the broker opens its store stops it once the store is open, without
    serving.
    """
    signals: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # Only note it. The handler runs between two bytecodes of the main thread, wherever
        # that was: taking a lock the main thread holds (a threading.Event's) would deadlock,
        # and a log line could land inside one being written. The main thread does the rest.
        signals.append(signum)

    # Before the store is opened: from then on a signal must get a clean shutdown (the
    # default action would leave the store to crash recovery).
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    broker_server, _ = create_server(config)
    try:
        if not signals:
            broker_server.start()
            if on_started is not None:
                on_started(broker_server)
        # Wait in short slices, never in one unbounded wait: the kernel may hand SIGTERM to
        # any thread of the process, and CPython then only flags it for the main thread, so a
        # main thread blocked on a lock would never run the handler and the broker would
        # ignore the signal. Waking up every slice runs the flagged handler.
        while not signals and not broker_server.wait(SIGNAL_CHECK_S):
            pass
        if signals:
            log.info("received %s, shutting down", signal.Signals(signals[0]).name)
    finally:
        broker_server.stop()
    failure = broker_server.broker.store.failure
    if failure is not None:
        raise StoreFailedError(
            f"the store failed ({failure}); restart the broker to recover from the commit log"
        )
