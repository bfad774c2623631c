"""The broker's HTTP port (``--http-port``): HTTP/1.1 over asyncio streams, parsed by h11
(a state machine that owns the protocol's rules, so this module only moves bytes), with
TLS from the same files as the other ports.

Requests are small: a request head is at most :data:`MAX_HEAD_BYTES`, a body at most
:data:`MAX_BODY_BYTES`; anything else, and anything h11 refuses, is answered 4xx and the
connection closed, as one rate-limited log line. A handler's own failure is answered 500
without its text; its traceback goes to the log (it is the broker's fault, not the
client's).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import h11

from rmq_spark.errors import UnavailableError
from rmq_spark.log_limit import LogLimiter, brief

__all__ = ["Handler", "HttpListener", "HttpRequest", "HttpResponse"]

log = logging.getLogger("rmq_spark.broker.http")

#: the largest request head (request line and headers)
MAX_HEAD_BYTES = 16 * 1024
#: the largest request body (the console's changes are small JSON objects)
MAX_BODY_BYTES = 64 * 1024
#: a connection with no complete request for this long is closed
IDLE_S = 60.0


@dataclass(frozen=True)
class HttpRequest:
    """One request, decoded once: method, path (percent-decoded), query, headers (lower
    case names), body, and the user and secret of its Basic credentials, if any."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: str
    credentials: tuple[str, str] | None

    def param(self, name: str, default: str = "") -> str:
        """The query parameter ``name``'s last value."""
        values = self.query.get(name)
        return values[-1] if values else default


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def text(cls, status: int, text: str) -> HttpResponse:
        return cls(status, text.encode() + (b"" if text.endswith("\n") else b"\n"))


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class HttpListener:
    """A bound HTTP port; ``handler`` answers every request."""

    def __init__(self, server: asyncio.Server, port: int, handler: Handler) -> None:
        self._server = server
        self.port = port
        self.handler = handler

    @classmethod
    async def bind(
        cls, host: str, port: int, handler: Handler, tls: ssl.SSLContext | None = None
    ) -> HttpListener:
        """Listen on ``host:port`` (0: a free port) and serve at once."""
        limiter = LogLimiter(log)
        holder: list[HttpListener] = []

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _serve_connection(reader, writer, holder[0].handler, limiter)

        try:
            server = await asyncio.start_server(
                on_connection, host, port, ssl=tls, limit=MAX_HEAD_BYTES * 2
            )
        except OSError as exc:
            raise UnavailableError(
                f"cannot listen on {host}:{port} for HTTP: {exc.strerror or exc}; is the "
                "port in use?"
            ) from None
        bound = server.sockets[0].getsockname()[1]
        listener = cls(server, bound, handler)
        holder.append(listener)
        return listener

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


async def _serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    limiter: LogLimiter,
) -> None:
    peername = writer.get_extra_info("peername")
    peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else "?"
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            try:
                request = await _next_request(conn, reader, peer)
            except _BadRequest as bad:
                limiter.warning(("bad", bad.status), "refused HTTP request from %s: %s", peer, bad)
                try:
                    _write(writer, conn, HttpResponse.text(bad.status, str(bad)), close=True)
                    await writer.drain()
                except h11.LocalProtocolError:
                    pass  # too late in the exchange to answer: the connection just closes
                return
            if request is None:
                return
            try:
                response = await handler(request)
            except Exception:
                log.exception("HTTP %s %s failed", request.method, brief(request.path, 80))
                response = HttpResponse.text(500, "internal broker error (see the broker's log)")
            if request.method == "HEAD":
                response = HttpResponse(
                    response.status, b"", response.content_type, response.headers
                )
            _write(writer, conn, response, close=False)
            await writer.drain()
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
        return
    finally:
        writer.close()


async def _next_request(
    conn: h11.Connection, reader: asyncio.StreamReader, peer: str
) -> HttpRequest | None:
    """The next whole request on the connection, or None when the client is done."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint or 400
            raise _BadRequest(status, f"malformed HTTP request: {exc}") from None
        if event is h11.NEED_DATA:
            try:
                data = await asyncio.wait_for(reader.read(65536), IDLE_S)
            except TimeoutError:
                return None
            try:
                conn.receive_data(data)
            except h11.RemoteProtocolError as exc:
                raise _BadRequest(400, f"malformed HTTP request: {exc}") from None
            if not data and head is None:
                return None
            continue
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _BadRequest(413, f"request body over {MAX_BODY_BYTES} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _decode(head, bytes(body), peer)
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _decode(head: h11.Request, body: bytes, peer: str) -> HttpRequest:
    try:
        target = head.target.decode("ascii")
        headers = {
            name.decode("ascii").lower(): value.decode("latin-1") for name, value in head.headers
        }
    except UnicodeDecodeError:
        raise _BadRequest(400, "the request target or a header name is not ASCII") from None
    parts = urlsplit(target)
    try:
        path = unquote(parts.path, errors="strict")
        query = parse_qs(parts.query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise _BadRequest(400, "the request path or query is not UTF-8") from None
    return HttpRequest(
        method=head.method.decode("ascii"),
        path=path,
        query=query,
        headers=headers,
        body=body,
        peer=peer,
        credentials=basic_credentials(headers.get("authorization", "")),
    )


def basic_credentials(header: str) -> tuple[str, str] | None:
    """(user, secret) of an ``Authorization: Basic ...`` header; None for no header or
    another scheme. Malformed Basic credentials are refused (400)."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise _BadRequest(400, "the Basic credentials are not base64 of UTF-8 text") from None
    user, colon, secret = text.partition(":")
    if not colon:
        raise _BadRequest(400, "the Basic credentials hold no ':' between user and secret")
    return user, secret


def _write(
    writer: asyncio.StreamWriter, conn: h11.Connection, response: HttpResponse, *, close: bool
) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        *response.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    out = conn.send(h11.Response(status_code=response.status, headers=headers))
    if response.body:
        out = (out or b"") + (conn.send(h11.Data(data=response.body)) or b"")
    out = (out or b"") + (conn.send(h11.EndOfMessage()) or b"")
    writer.write(out)
