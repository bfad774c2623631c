"""What the HTTP port answers: health (``/healthz``, ``/readyz``), metrics (``/metrics``)
and whatever is mounted under a path prefix (the web console).

The port is bound before the store is opened, so it answers during recovery: alive, not
ready, no metrics yet (503). With ACL on, every path but the two health checks asks for
HTTP Basic credentials: a user's access key and secret key from the ACL file (send them
over TLS). What a user is shown is what its policies allow.
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rmq_spark.auth.acl import Action, Resource, User
from rmq_spark.auth.interceptor import Authorizer, NotAuthenticated, enabled_user, peer_ip
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.http import metrics
from rmq_spark.broker.http.health import Phase, readiness
from rmq_spark.broker.http.server import HttpRequest, HttpResponse

__all__ = ["NO_CHALLENGE_HEADER", "HttpApp", "Member", "Mounted", "Public", "Viewer"]

Run = Callable[..., Awaitable[Any]]


class Viewer:
    """Who asks (None without ACL: anyone, who may see and do everything), and what of the
    broker that lets them see."""

    def __init__(self, user: User | None, authorizer: Authorizer | None, peer: str) -> None:
        self.user = user
        self._authorizer = authorizer
        self._ip = peer_ip(peer)

    @property
    def is_admin(self) -> bool:
        return self.user is None or self.user.is_super

    def sees(self, topic: str, group: str | None = None) -> bool:
        """Whether the user may see ``topic``'s series (any right on it) and ``group``'s
        (any right on the group); an empty topic asks about the group alone."""
        if self.is_admin:
            return True
        assert self.user is not None and self._authorizer is not None
        access = self._authorizer.acl()
        wanted = (Action.PUB, Action.SUB)
        if (
            topic
            and not access.authorize(self.user, Resource.topic(topic), wanted, self._ip).allowed
        ):
            return False
        if group is not None:
            found = access.authorize(self.user, Resource.group(group), (Action.SUB,), self._ip)
            return found.allowed
        return True


@dataclass(frozen=True)
class Member:
    """A live member of a consumer group known to a front-end rather than to the broker's
    group registry (RocketMQ 5 clients: their settings come over Telemetry)."""

    group: str
    client_id: str
    protocol: str
    consume_type: str
    #: (topic, expression, expression type) per subscription
    subscriptions: tuple[tuple[str, str, str], ...]


#: a handler mounted under a path prefix: it gets the broker (serving), the request, the
#: viewer, and a way to run blocking work on the broker's workers
Mounted = Callable[[Broker, HttpRequest, Viewer, Run], Awaitable[HttpResponse]]
#: what a mount serves to anyone, before credentials are asked and during recovery too
#: (the console's page and scripts, which hold no data): a response, or None for the rest
Public = Callable[[HttpRequest], HttpResponse | None]
#: a request carrying this header is not answered 401 with a Basic challenge (the console
#: asks for credentials in its own form, not in the browser's dialog)
NO_CHALLENGE_HEADER = "x-rocketlite-console"


class HttpApp:
    """The HTTP port's answers. ``phase`` and ``broker`` are set by the broker's start-up
    as it opens the store and begins to serve."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer
        self.phase = Phase.OPENING
        self.broker: Broker | None = None
        self.run: Run | None = None
        #: open connections per protocol, read at each scrape
        self.connections: Callable[[], dict[str, int]] = dict
        #: group members the broker's group registry does not hold (RocketMQ 5 clients)
        self.members: Callable[[], list[Member]] = list
        #: tells a group's live remoting members the offsets just committed for a topic
        #: (group, topic, offsets by queue, the time reset to, in ms), on the event loop;
        #: how many were told. Set when the remoting port is on.
        self.tell_reset: Callable[[str, str, dict[int, int], int], int] = lambda *_: 0
        self._mounted: list[tuple[str, Mounted, Public | None]] = []

    def mount(self, prefix: str, handler: Mounted, public: Public | None = None) -> None:
        """Serve every path equal to ``prefix`` or under ``prefix/`` with ``handler``; what
        ``public`` answers is served first, to anyone."""
        self._mounted.append((prefix.rstrip("/"), handler, public))

    def serving(self, broker: Broker, run: Run) -> None:
        """The store is open: answer everything."""
        self.broker, self.run, self.phase = broker, run, Phase.SERVING

    def stopping(self) -> None:
        self.phase = Phase.STOPPING

    def readiness(self) -> tuple[bool, str]:
        broker = self.broker
        if broker is None or self.phase is not Phase.SERVING:
            state = readiness(self.phase)
        else:
            storage = broker.messaging.storage()
            state = readiness(
                self.phase,
                failure=storage.failure,
                disk_full=storage.disk_full,
                free_bytes=storage.disk_free_bytes,
            )
        return state.ready, state.reason

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponse.text(405, f"method {request.method} is not served here")
        path = request.path
        if path == "/healthz":
            return HttpResponse.text(200, f"alive ({self.phase.value})")
        if path == "/readyz":
            ready, reason = self.readiness()
            return HttpResponse.text(200 if ready else 503, reason)
        mounted = self._mount_of(path)
        if mounted is not None and mounted[1] is not None:
            answer = mounted[1](request)
            if answer is not None:
                return answer
        try:
            viewer = self._viewer(request)
        except NotAuthenticated as exc:
            challenge = [("www-authenticate", 'Basic realm="rocketlite", charset="UTF-8"')]
            return HttpResponse(
                401,
                f"{exc}: send an ACL user's access key and secret key as HTTP Basic "
                "credentials\n".encode(),
                headers=[] if NO_CHALLENGE_HEADER in request.headers else challenge,
            )
        broker, run = self.broker, self.run
        if broker is None or run is None:
            _, reason = self.readiness()
            return HttpResponse.text(503, f"not serving yet: {reason}")
        if path == "/metrics":
            if request.method == "POST":
                return HttpResponse.text(405, "/metrics is read with GET")
            connections = self.connections()
            others = Counter(member.group for member in self.members())
            body = await run(metrics.render, broker, connections, viewer.sees, others)
            return HttpResponse(200, body, metrics.CONTENT_TYPE)
        if mounted is not None:
            return await mounted[0](broker, request, viewer, run)
        return HttpResponse.text(404, f"nothing is served at {path!r}")

    def _mount_of(self, path: str) -> tuple[Mounted, Public | None] | None:
        for prefix, handler, public in self._mounted:
            if path == prefix or path.startswith(prefix + "/") or (prefix == "" and path == "/"):
                return handler, public
        return None

    def _viewer(self, request: HttpRequest) -> Viewer:
        authorizer = self.authorizer
        if authorizer is None:
            return Viewer(None, None, request.peer)
        if request.credentials is None:
            raise NotAuthenticated("access control is on")
        name, secret = request.credentials
        access = authorizer.acl()
        known = access.secret_of(name)
        # compared in constant time whether or not the user exists
        if not hmac.compare_digest((known or "\0").encode(), secret.encode()) or known is None:
            raise NotAuthenticated("invalid access key or secret key")
        return Viewer(enabled_user(access, name), authorizer, request.peer)
