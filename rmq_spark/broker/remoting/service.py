"""The remoting protocol's facade: one table from request code to handler, for both roles
this port plays (name server and broker), and the boundary where errors become response
codes.

Each request code has an :class:`~.endpoint.Endpoint`: the request is authenticated,
decoded once into the values the broker acts on, authorized over those values, then
served by a coroutine on the broker's event loop (store work goes to the broker's workers).
Endpoints live by job: the name-server role in :mod:`.namesrv`, sends in :mod:`.produce`,
pulls and offsets in :mod:`.consume`, group membership and queue locks in
:mod:`.membership`, ``mqadmin``'s calls in :mod:`.admin`, the broker's and groups' settings
in :mod:`.configs`, and what ``mqadmin`` asks of a group's consumers through the broker in
:mod:`.client_calls`. A request the table does not know
gets REQUEST_CODE_NOT_SUPPORTED, as RocketMQ answers it.

Client input never puts a traceback in the log: a refused or malformed request is logged
as one line, at most once a minute for each kind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rmq_spark.auth.acl import User
from rmq_spark.auth.interceptor import Authorizer, Refused
from rmq_spark.auth.remoting_check import authenticate, authorize
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting.admin import Administration
from rmq_spark.broker.remoting.answers import failure_reply
from rmq_spark.broker.remoting.client_calls import ClientCalls
from rmq_spark.broker.remoting.configs import Configs
from rmq_spark.broker.remoting.consume import Consuming
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.membership import Membership
from rmq_spark.broker.remoting.namesrv import NameServerRole
from rmq_spark.broker.remoting.produce import Producing
from rmq_spark.broker.remoting.registration import Registrar
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.workers import Workers
from rmq_spark.log_limit import LogLimiter, brief
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import DEFAULT_MAX_FRAME_BYTES, Command

log = logging.getLogger("rmq_spark.broker.remoting")

#: RocketMQ's serverChannelMaxIdleTimeSeconds, and how often it is looked at
IDLE_S = 120
IDLE_CHECK_S = 10


class RemotingService:
    def __init__(
        self,
        broker: Broker,
        workers: Workers,
        address: str,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.broker = broker
        self._workers = workers
        #: checks each request's signature and rights when the broker has an ACL
        self._authorizer = authorizer
        #: the ip:port clients are told to dial for this broker (routes, message ids)
        self.address = address
        self.connections: set[Connection] = set()
        self.membership = Membership(broker, workers)
        self.name_server = NameServerRole(broker, address)
        #: keeps the broker registered with --namesrv-addr's name servers (None without)
        self.registrar = (
            Registrar(broker, workers, address, broker.config.namesrv_addrs)
            if broker.config.namesrv_addrs
            else None
        )
        #: the calls the broker makes to a group's clients (resets reach them through it)
        self.client_calls = ClientCalls(broker, workers, self.membership)
        parts = (
            self.name_server,
            Producing(broker, workers),
            Consuming(broker, workers),
            self.membership,
            Administration(broker, workers, address, self.membership),
            Configs(broker, workers, address),
            self.client_calls,
        )
        self._endpoints: dict[int, Endpoint] = {}
        self._log_limit = LogLimiter(log)
        self._reaper: asyncio.Task | None = None
        for part in parts:
            for code, endpoint in part.endpoints().items():
                assert code not in self._endpoints, f"two endpoints for {RequestCode(code).name}"
                self._endpoints[code] = endpoint

    def start(self) -> None:
        """Start closing idle connections (on the event loop)."""
        self._reaper = asyncio.get_running_loop().create_task(self._close_idle())

    async def start_registration(self) -> None:
        """Register with the name servers (the first time waited for, briefly), then keep
        registering; nothing without --namesrv-addr."""
        if self.registrar is not None:
            await self.registrar.start()

    async def stop_registration(self) -> None:
        """Unregister from the name servers (a clean stop), before the port closes."""
        if self.registrar is not None:
            await self.registrar.stop()

    async def _close_idle(self) -> None:
        """Close connections silent for IDLE_S, as RocketMQ's broker does: a client that
        vanished without closing its socket does not hold it (and its group membership)
        for ever. RocketMQ's clients heartbeat every 30 s, so a live one never idles out."""
        while True:
            await asyncio.sleep(IDLE_CHECK_S)
            cutoff = time.monotonic() - IDLE_S
            for connection in [c for c in self.connections if c.last_active < cutoff]:
                log.info("closing remoting connection from %s: idle %d s", connection.peer, IDLE_S)
                connection.close()

    def make_connection(self) -> Connection:
        # RocketMQ's frame limit, which its clients apply to answers too, or less: no
        # request is over --max-request-bytes, on any port
        limit = min(DEFAULT_MAX_FRAME_BYTES, self.broker.config.max_request_bytes)
        return Connection(self, limit, self._log_limit)

    def connection_opened(self, connection: Connection) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.membership.forget(connection)
        self.name_server.connection_closed(connection)

    def answered(self, request_code: int, response_code: int, took_ms: float) -> None:
        """A request was answered ``took_ms`` after it was taken up."""
        self.broker.stats.request("remoting", request_code, response_code, took_ms)

    def dispatch(self, connection: Connection, request: Command) -> None:
        """Serve one request: authenticate, decode once, authorize the decoded value, then
        serve it (see :mod:`.endpoint`). Nothing a client sends escapes as an exception."""
        request.received_s = time.perf_counter()  # its answer is timed (Connection.send)
        endpoint = self._endpoints.get(request.code)
        if endpoint is None:  # nothing of it will be read: RocketMQ's answer, to anyone
            if not request.is_oneway:
                connection.send(
                    request.reply(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f" request type {request.code} not supported",
                    )
                )
            return
        if request.bad_text is not None:
            # before the signature: one kind of line whatever field (a client names it)
            self._refuse(
                connection,
                request,
                ResponseCode.INVALID_PARAMETER,
                f"the header field {brief(request.bad_text, 64)} is not valid Unicode text "
                "(invalid UTF-8 or a lone surrogate); send it as UTF-8 text",
                kind="not text",
            )
            return
        user = None
        if self._authorizer is not None:
            try:
                user = authenticate(
                    self._authorizer, request.ext, request.body, version=request.version
                )
            except Refused as exc:
                self._refuse(connection, request, ResponseCode.NO_PERMISSION, str(exc))
                return
        try:
            value = endpoint.decode(request)
            if endpoint.resolve is None:
                self._authorize(connection, user, endpoint, value)
        except Exception as exc:  # answered here: nothing may escape into the transport
            self._failed(connection, request, exc)
            return
        if endpoint.fast is not None:
            try:
                endpoint.fast(connection, request, value)
            except Exception as exc:
                self._failed(connection, request, exc)
            return
        connection.spawn(self._serve(connection, request, endpoint, value, user))

    def _authorize(
        self, connection: Connection, user: User | None, endpoint: Endpoint, value: Any
    ) -> None:
        if user is not None:
            assert self._authorizer is not None  # it authenticated the user
            authorize(self._authorizer, user, endpoint.rule, value, peer=connection.peer)

    async def _serve(
        self,
        connection: Connection,
        request: Command,
        endpoint: Endpoint,
        value: Any,
        user: User | None,
    ) -> None:
        try:
            if endpoint.resolve is not None:
                value = await self._workers.run(endpoint.resolve, value)
                self._authorize(connection, user, endpoint, value)
            assert endpoint.serve is not None
            response = await endpoint.serve(connection, request, value)
        except Exception as exc:
            self._failed(connection, request, exc)
            return
        if response is not None and not request.is_oneway:
            connection.send(response)

    def _failed(self, connection: Connection, request: Command, error: BaseException) -> None:
        if isinstance(error, Refused):
            self._refuse(connection, request, ResponseCode.NO_PERMISSION, str(error))
            return
        response = failure_reply(request, error, self._log_limit)
        if not request.is_oneway:
            connection.send(response)

    def _refuse(
        self,
        connection: Connection,
        request: Command,
        code: int,
        reason: str,
        kind: str | None = None,
    ) -> None:
        """Answer a refusal, and log it as one line at most once a minute per (request
        code, ``kind``, by default the reason)."""
        self._log_limit.warning(
            (request.code, reason if kind is None else kind),
            "refused remoting request %d: %s",
            request.code,
            brief(reason),
        )
        if not request.is_oneway:
            connection.send(request.reply(code, reason))

    def close(self) -> None:
        """Close every connection (on the event loop)."""
        if self._reaper is not None:
            self._reaper.cancel()
        for connection in list(self.connections):
            connection.close()
