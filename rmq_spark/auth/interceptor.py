"""The server side of access control: authenticate each call from its metadata, then
authorize it with the permission table (:mod:`.permissions`) and the current ACL.

:class:`Authorizer` holds the decisions (no gRPC); :class:`AuthInterceptor` is the
``grpc.aio`` server interceptor that wraps every handler so the check sees the request
message: before a unary call or a server stream, at the opening of a client stream and on
each of its messages (RocketMQ's Telemetry settings).

Refusals: rocketlite.v1 calls fail with UNAUTHENTICATED or PERMISSION_DENIED (the error
class in the trailing metadata, as every rocketlite error). RocketMQ 5 calls answer in the
response's status, as a RocketMQ proxy does: UNAUTHORIZED (40100) when the caller is not
authenticated, FORBIDDEN (40300) when it lacks a permission.

Signatures are checked for freshness when a call starts: every unary call, and a stream
once when it opens (a Telemetry stream lives for days on its opening headers).
"""

from __future__ import annotations

import functools
import inspect
import ipaddress
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import grpc

from rmq_spark.auth import signature
from rmq_spark.auth.acl import AccessControl, User
from rmq_spark.auth.permissions import V2, Need, Rule, rule_for
from rmq_spark.errors import (
    ERROR_CLASS_METADATA,
    PermissionDeniedError,
    RocketliteError,
    UnauthenticatedError,
)
from rmq_spark.log_limit import LogLimiter, brief

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from rmq_spark.auth.remoting_rules import RemotingRule

log = logging.getLogger("rmq_spark.auth")

CLIENT_ID_HEADER = "x-mq-client-id"
#: RocketMQ 5 status codes (apache.rocketmq.v2.Code)
V2_UNAUTHORIZED = 40100
V2_FORBIDDEN = 40300
#: every refusal's message starts with this
REFUSED_PREFIX = "access control: "
#: a client id is bound to its user until unused this long
CLIENT_ID_TTL_S = 3600.0
MAX_CLIENT_IDS = 200_000


class Refused(RocketliteError):
    """A call refused by access control: one of :class:`NotAuthenticated` (who the caller
    is is unknown) and :class:`AccessDenied` (the caller lacks a permission); catch this
    class for both. The message starts with ``access control: ``."""

    #: False when who the caller is is unknown
    authenticated: bool

    def __init__(self, message: str) -> None:
        if not message.startswith(REFUSED_PREFIX):
            message = REFUSED_PREFIX + message
        super().__init__(message)


class NotAuthenticated(Refused, UnauthenticatedError):
    """No, wrong or stale credentials, or a user that is gone or disabled: UNAUTHENTICATED
    (rocketlite.v1), UNAUTHORIZED (RocketMQ 5), NO_PERMISSION (remoting)."""

    authenticated = False


class AccessDenied(Refused, PermissionDeniedError):
    """A known user without the permission the call needs: PERMISSION_DENIED
    (rocketlite.v1), FORBIDDEN (RocketMQ 5), NO_PERMISSION (remoting)."""

    authenticated = True


def v1_status(refusal: Refused) -> tuple[grpc.StatusCode, str]:
    """The status of a refused rocketlite.v1 call, and the error class it names: the
    general class of its code (PermissionDeniedError, UnauthenticatedError), which every
    client knows."""
    general = PermissionDeniedError if refusal.authenticated else UnauthenticatedError
    return getattr(grpc.StatusCode, refusal.grpc_code), general.__name__


def peer_ip(peer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address in a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        host = rest.rsplit(":", 1)[0]
    elif kind == "ipv6":
        host = rest.rsplit(":", 1)[0].strip("[]")
    else:
        return None
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


class ClientOwners:
    """Which user a client id belongs to: the first one that used it, until it has been
    unused for ``ttl_s``. Bounded: the least recently used ids go first."""

    def __init__(self, ttl_s: float = CLIENT_ID_TTL_S, limit: int = MAX_CLIENT_IDS) -> None:
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.ttl_s = ttl_s
        self.limit = limit

    def claim(self, client_id: str, user: str, now: float | None = None) -> str | None:
        """None when ``user`` may act as ``client_id`` (now bound to it); else its owner."""
        now = time.monotonic() if now is None else now
        with self._lock:
            held = self._owners.get(client_id)
            if held is not None and held[0] != user and now - held[1] < self.ttl_s:
                return held[0]
            self._owners[client_id] = (user, now)
            self._owners.move_to_end(client_id)
            while len(self._owners) > self.limit:
                self._owners.popitem(last=False)
        return None


def enabled_user(access: AccessControl, name: str) -> User:
    """The user a verified signature names, if it is (still) there and enabled."""
    user = access.user(name)
    if user is None:  # removed by a reload in between
        raise NotAuthenticated("invalid access key or signature")
    if not user.enabled:
        raise NotAuthenticated(f"user {name} is disabled")
    return user


class Authorizer:
    """Decides on calls; ``acl()`` gives the ACL in force (it may change between calls)."""

    def __init__(
        self, acl: Callable[[], AccessControl], owners: ClientOwners | None = None
    ) -> None:
        self.acl = acl
        self.owners = owners or ClientOwners()

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]]) -> User:
        access = self.acl()
        try:
            name = signature.verify(metadata, access.secret_of, window_s=access.replay_window_s)
        except signature.AuthenticationError as exc:
            raise NotAuthenticated(str(exc)) from None
        return enabled_user(access, name)

    def authorize(
        self,
        user: User,
        rule: Rule | RemotingRule | None,
        needs: Iterable[Need],
        peer: str | None,
    ) -> None:
        if rule is None:
            raise AccessDenied("this method is not in the permission table")
        if user.is_super:
            return
        if rule.super_only:
            raise AccessDenied(f"user {user.name} is not a super user")
        access = self.acl()
        ip = peer_ip(peer)
        for need in needs:
            verdict = access.authorize(user, need.resource, need.actions, ip)
            if not verdict.allowed:
                raise AccessDenied(f"user {user.name}: {verdict.reason}")

    def claim(self, user: User, client_ids: Iterable[str]) -> None:
        if user.is_super:
            return
        for client_id in client_ids:
            if client_id and self.owners.claim(client_id, user.name) is not None:
                raise AccessDenied(
                    f"user {user.name} may not act as client {client_id[:128]!r}, which "
                    "another user is using"
                )

    def check_open(
        self, method: str, context: grpc.aio.ServicerContext
    ) -> tuple[User, Rule | None]:
        """Authenticate a call and check what its headers name."""
        metadata = tuple(context.invocation_metadata() or ())
        user = self.authenticate(metadata)
        rule = rule_for(method)
        self.authorize(user, rule, (), context.peer())
        if rule is not None and rule.header_client_id:
            self.claim(user, [v for k, v in metadata if k == CLIENT_ID_HEADER])
        return user, rule

    def check_request(
        self,
        user: User,
        rule: Rule | None,
        request: Message,
        context: grpc.aio.ServicerContext,
    ) -> None:
        if rule is None:
            return
        if rule.needs is not None:
            self.authorize(user, rule, rule.needs(request), context.peer())
        if rule.client_ids is not None:
            self.claim(user, rule.client_ids(request))

    def check_message(
        self,
        user: User,
        rule: Rule | None,
        message: Message,
        context: grpc.aio.ServicerContext,
    ) -> None:
        if rule is not None and rule.message_needs is not None:
            self.authorize(user, rule, rule.message_needs(message), context.peer())


@functools.lru_cache(maxsize=64)
def _v2_response(method: str) -> type[Message]:
    """The response class of a RocketMQ 5 method (all have a ``status`` field)."""
    from google.protobuf import descriptor_pool, message_factory

    service = descriptor_pool.Default().FindServiceByName("apache.rocketmq.v2.MessagingService")
    output = service.FindMethodByName(method.rsplit("/", 1)[1]).output_type
    return message_factory.GetMessageClass(output)


#: the standard gRPC health service: answered to anyone, as the HTTP port's /healthz
HEALTH_SERVICE = "/grpc.health.v1.Health/"


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self._log_limit = LogLimiter(log)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        if handler_call_details.method.startswith(HEALTH_SERVICE):
            return handler  # probes carry no credentials, and learn only serving or not
        return self._wrap(handler, handler_call_details.method)

    def _note(self, method: str, refusal: Refused) -> None:
        """Log refusals, each (method, reason) at most once a minute."""
        # keyed on the kind of refusal, never on its text: that holds names a client chose,
        # and an unauthenticated client could fill the log with one line per name
        self._log_limit.warning(
            (method, type(refusal).__name__), "refused %s: %s", method, brief(str(refusal))
        )

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        auth = self.authorizer
        v2 = method.startswith(V2)

        async def refuse(refusal: Refused, context: grpc.aio.ServicerContext) -> Message | None:
            """v1: abort (raises); v2: the response to send (its status says why)."""
            self._note(method, refusal)
            if v2:
                code = V2_FORBIDDEN if refusal.authenticated else V2_UNAUTHORIZED
                return _v2_response(method)(status={"code": code, "message": str(refusal)})
            code, cls = v1_status(refusal)
            await context.abort(
                code, str(refusal), trailing_metadata=((ERROR_CLASS_METADATA, cls),)
            )
            return None  # not reached: abort raises

        if not handler.request_streaming and not handler.response_streaming:
            inner = handler.unary_unary

            async def unary_unary(
                request: Message, context: grpc.aio.ServicerContext
            ) -> Message | None:
                try:
                    user, rule = auth.check_open(method, context)
                    auth.check_request(user, rule, request, context)
                except Refused as refusal:
                    return await refuse(refusal, context)
                answer = inner(request, context)
                return await answer if inspect.isawaitable(answer) else answer

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )

        if not handler.request_streaming:
            inner = handler.unary_stream

            async def unary_stream(
                request: Message, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Message | None]:
                try:
                    user, rule = auth.check_open(method, context)
                    auth.check_request(user, rule, request, context)
                except Refused as refusal:
                    yield await refuse(refusal, context)
                    return
                async for item in _responses(inner(request, context)):
                    yield item

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )

        def checked(
            user: User,
            rule: Rule | None,
            requests: AsyncIterator[Message],
            context: grpc.aio.ServicerContext,
            refusals: list[Refused],
        ) -> AsyncIterator[Message]:
            async def messages() -> AsyncIterator[Message]:
                async for message in requests:
                    try:
                        auth.check_message(user, rule, message, context)
                    except Refused as refusal:
                        refusals.append(refusal)
                        return
                    yield message

            return messages()

        if not handler.response_streaming:
            inner = handler.stream_unary

            async def stream_unary(
                requests: AsyncIterator[Message], context: grpc.aio.ServicerContext
            ) -> Message | None:
                try:
                    user, rule = auth.check_open(method, context)
                except Refused as refusal:
                    return await refuse(refusal, context)
                refusals: list[Refused] = []
                answer = inner(checked(user, rule, requests, context, refusals), context)
                answer = await answer if inspect.isawaitable(answer) else answer
                if refusals:
                    return await refuse(refusals[0], context)
                return answer

            return grpc.stream_unary_rpc_method_handler(
                stream_unary, handler.request_deserializer, handler.response_serializer
            )

        inner = handler.stream_stream

        async def stream_stream(
            requests: AsyncIterator[Message], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Message | None]:
            try:
                user, rule = auth.check_open(method, context)
            except Refused as refusal:
                yield await refuse(refusal, context)
                return
            refusals: list[Refused] = []
            # A refused message ends the request stream: the service winds down, then the
            # caller gets the refusal.
            stream = inner(checked(user, rule, requests, context, refusals), context)
            async for item in _responses(stream):
                yield item
            if refusals:
                yield await refuse(refusals[0], context)

        return grpc.stream_stream_rpc_method_handler(
            stream_stream, handler.request_deserializer, handler.response_serializer
        )


async def _responses(
    result: AsyncIterable[Message] | Awaitable[None] | Iterable[Message] | None,
) -> AsyncIterator[Message]:
    """The items of a streaming behavior, whether an async generator or a coroutine that
    writes with ``context.write``."""
    if result is None:
        return
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    elif inspect.isawaitable(result):
        await result
    else:  # a plain iterator (a synchronous handler)
        for item in result:
            yield item
