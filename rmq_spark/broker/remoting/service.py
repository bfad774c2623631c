"""The remoting protocol's facade: one table from request code to handler, for both roles
this port plays (name server and broker), and the boundary where errors become response
codes.

Handlers are coroutines on the broker's event loop, ``handler(connection, request) ->
response``; store work goes to the broker's workers. They live by job: the name-server role
in :mod:`.namesrv`, sends in :mod:`.produce`, pulls and offsets in :mod:`.consume`, group
membership and queue locks in :mod:`.membership`, ``mqadmin``'s calls in :mod:`.admin`.
A request the table does not know gets REQUEST_CODE_NOT_SUPPORTED, as RocketMQ answers it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from rmq_spark.auth.interceptor import Refused
from rmq_spark.auth.remoting_check import check_request
from rmq_spark.broker.core import Broker
from rmq_spark.broker.remoting.admin import Administration
from rmq_spark.broker.remoting.answers import failure_reply
from rmq_spark.broker.remoting.consume import Consuming
from rmq_spark.broker.remoting.membership import Membership
from rmq_spark.broker.remoting.namesrv import NameServerRole
from rmq_spark.broker.remoting.produce import Producing
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.status import Workers
from rmq_spark.remoting.codes import RequestCode, ResponseCode
from rmq_spark.remoting.frame import DEFAULT_MAX_FRAME_BYTES, Command

log = logging.getLogger("rmq_spark.broker.remoting")

Handler = Callable[[Connection, Command], Awaitable[Command | None]]
#: RocketMQ's serverChannelMaxIdleTimeSeconds, and how often it is looked at
IDLE_S = 120
IDLE_CHECK_S = 10


class RemotingService:
    def __init__(self, broker: Broker, workers: Workers, address: str, authorizer=None) -> None:
        self.broker = broker
        #: checks each request's signature and rights when the broker has an ACL
        self._authorizer = authorizer
        #: the ip:port clients are told to dial for this broker (routes, message ids)
        self.address = address
        self.connections: set[Connection] = set()
        self.membership = Membership(broker, workers)
        producing = Producing(broker, workers)
        parts = (
            NameServerRole(broker, address),
            producing,
            Consuming(broker, workers, self.membership),
            self.membership,
            Administration(broker, workers, address, self.membership),
        )
        self._handlers: dict[int, Handler] = {}
        #: requests served without a task when they can be (sends): True when taken
        self._fast: dict[int, Callable[[Connection, Command], bool]] = producing.fast_handlers()
        self._refusals_logged: dict[tuple[int, str], float] = {}
        self._reaper: asyncio.Task | None = None
        for part in parts:
            for code, handler in part.handlers().items():
                assert code not in self._handlers, f"two handlers for {RequestCode(code).name}"
                self._handlers[code] = handler

    def start(self) -> None:
        """Start closing idle connections (on the event loop)."""
        self._reaper = asyncio.get_running_loop().create_task(self._close_idle())

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
        # RocketMQ's frame limit, which its clients apply to answers too
        return Connection(self, DEFAULT_MAX_FRAME_BYTES)

    def connection_opened(self, connection: Connection) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.membership.forget(connection)

    def dispatch(self, connection: Connection, request: Command) -> None:
        if self._authorizer is not None and not self._allowed(connection, request):
            return
        fast = self._fast.get(request.code)
        if fast is not None and fast(connection, request):
            return  # taken without a task of its own; it answers when done
        handler = self._handlers.get(request.code)
        if handler is None:
            if not request.is_oneway:
                connection.send(
                    request.reply(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f" request type {request.code} not supported",
                    )
                )
            return
        connection.spawn(self._serve(connection, request, handler))

    def _allowed(self, connection: Connection, request: Command) -> bool:
        try:
            check_request(
                self._authorizer,
                request.code,
                request.ext,
                request.body,
                version=request.version,
                peer=connection.peer,
            )
        except Refused as exc:
            self._note_refusal(request.code, str(exc))
            if not request.is_oneway:
                connection.send(request.reply(ResponseCode.NO_PERMISSION, str(exc)))
            return False
        return True

    def _note_refusal(self, code: int, reason: str) -> None:
        """Log refusals, each (request code, reason) at most once a minute."""
        now = time.monotonic()
        key = (code, reason)
        if now - self._refusals_logged.get(key, -1e9) >= 60:
            if len(self._refusals_logged) > 10_000:
                self._refusals_logged.clear()
            self._refusals_logged[key] = now
            log.warning("refused remoting request %d: %s", code, reason)

    async def _serve(self, connection: Connection, request: Command, handler: Handler) -> None:
        try:
            response = await handler(connection, request)
        except Exception as exc:
            response = failure_reply(request, exc)
        if response is not None and not request.is_oneway:
            connection.send(response)

    def close(self) -> None:
        """Close every connection (on the event loop)."""
        if self._reaper is not None:
            self._reaper.cancel()
        for connection in list(self.connections):
            connection.close()
