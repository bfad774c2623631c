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

import logging
from collections.abc import Awaitable, Callable

from rmq_spark.broker.core import Broker
from rmq_spark.broker.remoting.admin import Administration
from rmq_spark.broker.remoting.answers import response_code
from rmq_spark.broker.remoting.consume import Consuming
from rmq_spark.broker.remoting.membership import Membership
from rmq_spark.broker.remoting.namesrv import NameServerRole
from rmq_spark.broker.remoting.produce import Producing
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.status import Workers
from rmq_spark.errors import RocketliteError
from rmq_spark.remoting.codes import RequestCode, ResponseCode
from rmq_spark.remoting.frame import DEFAULT_MAX_FRAME_BYTES, Command

log = logging.getLogger("rmq_spark.broker.remoting")

Handler = Callable[[Connection, Command], Awaitable[Command | None]]


class RemotingService:
    def __init__(self, broker: Broker, workers: Workers, address: str) -> None:
        self.broker = broker
        #: the ip:port clients are told to dial for this broker (routes, message ids)
        self.address = address
        self.connections: set[Connection] = set()
        self.membership = Membership(broker, workers)
        parts = (
            NameServerRole(broker, address),
            Producing(broker, workers),
            Consuming(broker, workers, self.membership),
            self.membership,
            Administration(broker, workers, address, self.membership),
        )
        self._handlers: dict[int, Handler] = {}
        for part in parts:
            for code, handler in part.handlers().items():
                assert code not in self._handlers, f"two handlers for {RequestCode(code).name}"
                self._handlers[code] = handler

    def make_connection(self) -> Connection:
        # RocketMQ's frame limit, which its clients apply to answers too
        return Connection(self, DEFAULT_MAX_FRAME_BYTES)

    def connection_opened(self, connection: Connection) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.membership.forget(connection)

    def dispatch(self, connection: Connection, request: Command) -> None:
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

    async def _serve(self, connection: Connection, request: Command, handler: Handler) -> None:
        try:
            response = await handler(connection, request)
        except RocketliteError as exc:
            response = request.reply(response_code(exc), str(exc))
        except Exception as exc:
            log.error("internal error serving remoting request %d", request.code, exc_info=exc)
            response = request.reply(
                ResponseCode.SYSTEM_ERROR, f"internal broker error: {type(exc).__name__}: {exc}"
            )
        if response is not None and not request.is_oneway:
            connection.send(response)

    def close(self) -> None:
        """Close every connection (on the event loop)."""
        for connection in list(self.connections):
            connection.close()
