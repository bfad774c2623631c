"""Topic routes merged from every broker, cached with a TTL.

Each broker answers ``GetTopicRoute`` for its own queues only. :func:`merge_route` (pure)
unions the answers, keyed by :class:`MessageQueue`; :class:`RouteTable` fetches from every
endpoint and caches the result per topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError, UnavailableError
from rmq_spark.structs import MessageQueue, Permission
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2
from rmq_spark.wire.v1 import mq_from_pb

log = logging.getLogger("rmq_spark.client")

__all__ = ["BrokerRoute", "RouteTable", "TopicRoute", "merge_route"]


@dataclass(frozen=True)
class BrokerRoute:
    """A topic's configuration on one broker, and how to reach that broker.

    ``endpoint`` is the address this client dialled (it is known to work); the broker's own
    idea of its address is kept as ``advertised_endpoint``, for display.
    """

    broker_name: str
    endpoint: str
    advertised_endpoint: str
    broker_perm: Permission
    read_queue_nums: int
    write_queue_nums: int
    perm: Permission


@dataclass(frozen=True)
class TopicRoute:
    """Every queue of a topic across the brokers, with what may be done with each.

    >>> route = TopicRoute("T", {}, {MessageQueue("T", "b", 0): Permission.READ_WRITE})
    >>> route.writable
    (MessageQueue(topic='T', broker_name='b', queue_id=0),)
    """

    topic: str
    brokers: Mapping[str, BrokerRoute]
    #: queue -> READ, WRITE or both; queues with neither are left out
    queues: Mapping[MessageQueue, Permission]
    #: time.monotonic() when fetched, for the cache
    fetched_at: float = 0.0
    readable: tuple[MessageQueue, ...] = field(init=False)
    writable: tuple[MessageQueue, ...] = field(init=False)

    def __post_init__(self) -> None:
        ordered = sorted(self.queues)
        object.__setattr__(
            self, "readable", tuple(q for q in ordered if self.queues[q] & Permission.READ)
        )
        object.__setattr__(
            self, "writable", tuple(q for q in ordered if self.queues[q] & Permission.WRITE)
        )

    def endpoint_of(self, broker_name: str) -> str:
        broker = self.brokers.get(broker_name)
        if broker is None:
            raise NotFoundError(
                f"topic {self.topic!r} has no queues on broker {broker_name!r}; it is on "
                f"{sorted(self.brokers) or 'no broker'}"
            )
        return broker.endpoint

    def queues_of(self, broker_name: str, *, writable: bool = True) -> list[MessageQueue]:
        pool = self.writable if writable else self.readable
        return [q for q in pool if q.broker_name == broker_name]


def _broker_route(endpoint: str, answer: admin_pb2.GetTopicRouteResponse) -> BrokerRoute:
    topic = answer.topic
    return BrokerRoute(
        broker_name=answer.broker_name,
        endpoint=endpoint,
        advertised_endpoint=answer.endpoint,
        broker_perm=Permission(answer.broker_perm or 0),
        read_queue_nums=topic.read_queue_nums,
        write_queue_nums=topic.write_queue_nums,
        perm=Permission(topic.perm or 0),
    )


def merge_route(
    topic: str,
    answers: Mapping[str, admin_pb2.GetTopicRouteResponse | RocketliteError],
    fetched_at: float = 0.0,
) -> TopicRoute:
    """Merge each endpoint's ``GetTopicRoute`` answer (or the error it raised).

    NOT_FOUND from some endpoints means the topic is not on those brokers; from all of them,
    the topic does not exist. Endpoints that failed otherwise are skipped with a warning
    while at least one answered; two endpoints naming the same broker are refused.
    """
    brokers: dict[str, BrokerRoute] = {}
    queues: dict[MessageQueue, Permission] = {}
    failed = {ep: a for ep, a in answers.items() if isinstance(a, RocketliteError)}
    for endpoint, answer in answers.items():
        if isinstance(answer, RocketliteError):
            continue
        broker = _broker_route(endpoint, answer)
        other = brokers.get(broker.broker_name)
        if other is not None:
            raise InvalidArgumentError(
                f"endpoints {other.endpoint} and {endpoint} both report broker name "
                f"{broker.broker_name!r}; every broker needs its own name (and each broker "
                "should be listed once)"
            )
        brokers[broker.broker_name] = broker
        for queue_route in answer.queues:
            perm = Permission(queue_route.perm or 0)
            if perm & Permission.READ_WRITE:
                queues[mq_from_pb(queue_route.queue)] = perm
    if brokers:
        for endpoint, error in failed.items():
            if not isinstance(error, NotFoundError):
                log.warning("route of %r: broker %s skipped: %s", topic, endpoint, error)
        return TopicRoute(topic, dict(sorted(brokers.items())), queues, fetched_at)
    _raise_no_route(topic, failed)
    raise AssertionError("unreachable")


def _raise_no_route(topic: str, failed: Mapping[str, RocketliteError]) -> None:
    other = {ep: e for ep, e in failed.items() if not isinstance(e, NotFoundError)}
    if not other:
        raise NotFoundError(
            f"topic {topic!r} does not exist on any broker ({', '.join(failed)}); "
            "create it first (Admin.create_topic)"
        )
    unavailable = {ep: e for ep, e in other.items() if isinstance(e, UnavailableError)}
    if len(unavailable) == len(other):
        absent = [ep for ep in failed if ep not in other]
        where = f"; not on {', '.join(absent)}" if absent else ""
        raise UnavailableError(
            f"cannot get the route of topic {topic!r}: no broker answered "
            f"({'; '.join(str(e) for e in unavailable.values())}){where}"
        )
    raise next(e for e in other.values() if not isinstance(e, UnavailableError))


class RouteTable:
    """Merged routes per topic, fetched on first use and again after ``ttl_ms``.

    ``fetch(topic)`` must return each endpoint's answer or error (see :func:`merge_route`);
    ``on_route`` sees every fresh route (the cluster learns broker names from it).
    """

    def __init__(
        self,
        fetch: Callable[[str], Mapping[str, admin_pb2.GetTopicRouteResponse | RocketliteError]],
        ttl_ms: int,
        on_route: Callable[[TopicRoute], None] | None = None,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_ms / 1000
        self._on_route = on_route
        self._routes: dict[str, TopicRoute] = {}
        self._lock = threading.Lock()

    def get(self, topic: str) -> TopicRoute:
        """The cached route, or a fresh one if missing or older than the TTL."""
        with self._lock:
            route = self._routes.get(topic)
        if route is not None and time.monotonic() - route.fetched_at < self._ttl_s:
            return route
        return self.refresh(topic)

    def refresh(self, topic: str) -> TopicRoute:
        """Ask every endpoint now; a topic gone everywhere is dropped from the cache."""
        now = time.monotonic()
        try:
            route = merge_route(topic, self._fetch(topic), now)
        except NotFoundError:
            self.invalidate(topic)
            raise
        if self._on_route is not None:
            self._on_route(route)
        with self._lock:
            self._routes[topic] = route
        return route

    def invalidate(self, topic: str | None = None) -> None:
        """Forget one topic's route (or all): the next ``get`` fetches it again."""
        with self._lock:
            if topic is None:
                self._routes.clear()
            else:
                self._routes.pop(topic, None)
