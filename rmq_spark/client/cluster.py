"""The brokers a client knows: connections, broker names, routes and fan-out calls.

Every client class (Producer, PullConsumer, Admin) owns one :class:`Cluster`. Queues name
their broker (``MessageQueue.broker_name``); the cluster maps each name to the endpoint that
reported it, learning names from routes and, when needed, from ``GetBrokerInfo``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rmq_spark.client.connection import ClientConfig, Connection
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.client.route import RouteTable, TopicRoute
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError, UnavailableError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2

T = TypeVar("T")

_MAX_FAN_OUT_THREADS = 16


class Cluster:
    """Connections to every endpoint plus the broker-name directory and the route cache."""

    def __init__(
        self, endpoints: str | Iterable[str] | Endpoints, config: ClientConfig | None = None
    ) -> None:
        self.endpoints = Endpoints.parse(endpoints)
        self.config = config or ClientConfig()
        self._connections = {ep: Connection(ep, self.config) for ep in self.endpoints}
        self._lock = threading.Lock()
        self._endpoint_by_broker: dict[str, str] = {}
        self._broker_by_endpoint: dict[str, str] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.routes = RouteTable(self._fetch_route, self.config.route_ttl_ms, self._learn_route)

    # --- connections and fan-out ---------------------------------------------------------

    def connection(self, endpoint: str) -> Connection:
        return self._connections[endpoint]

    def fan_out(self, fn: Callable[[Connection], T]) -> dict[str, T | RocketliteError]:
        """Run ``fn`` on every endpoint in parallel; each answer or its rocketlite error."""
        if len(self._connections) == 1:
            return {ep: _capture(fn, conn) for ep, conn in self._connections.items()}
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    min(len(self._connections), _MAX_FAN_OUT_THREADS),
                    thread_name_prefix="rmq-client-fanout",
                )
            pool = self._pool
        futures = {ep: pool.submit(_capture, fn, conn) for ep, conn in self._connections.items()}
        return {ep: future.result() for ep, future in futures.items()}

    # --- broker names --------------------------------------------------------------------

    def note_broker(self, broker_name: str, endpoint: str) -> None:
        """Record that ``endpoint`` serves ``broker_name``; two endpoints for one name fail."""
        with self._lock:
            other = self._endpoint_by_broker.get(broker_name)
            # The other endpoint may since have been restarted under another name.
            if other not in (None, endpoint) and self._broker_by_endpoint[other] == broker_name:
                raise InvalidArgumentError(
                    f"endpoints {other} and {endpoint} both report broker name "
                    f"{broker_name!r}; every broker needs its own name"
                )
            previous = self._broker_by_endpoint.get(endpoint)
            if previous is not None and previous != broker_name:
                self._endpoint_by_broker.pop(previous, None)  # the broker was renamed
            self._endpoint_by_broker[broker_name] = endpoint
            self._broker_by_endpoint[endpoint] = broker_name

    def endpoint_of(self, broker_name: str) -> str:
        """The endpoint serving ``broker_name``, asking every broker once if not yet known."""
        with self._lock:
            endpoint = self._endpoint_by_broker.get(broker_name)
        if endpoint is None:
            self.discover_brokers()
            with self._lock:
                endpoint = self._endpoint_by_broker.get(broker_name)
        if endpoint is None:
            with self._lock:
                known = sorted(self._endpoint_by_broker)
            raise NotFoundError(
                f"no endpoint serves broker {broker_name!r} (brokers known: {known or 'none'}; "
                f"endpoints: {self.endpoints}); add that broker's endpoint to the client"
            )
        return endpoint

    def broker_name_of(self, endpoint: str) -> str:
        """The name of the broker at ``endpoint`` (asks it once if not yet known)."""
        with self._lock:
            name = self._broker_by_endpoint.get(endpoint)
        if name is None:
            conn = self.connection(endpoint)
            answer = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
            self.note_broker(answer.broker_name, endpoint)
            name = answer.broker_name
        return name

    def discover_brokers(self) -> dict[str, admin_pb2.GetBrokerInfoResponse]:
        """GetBrokerInfo on every endpoint; answers by endpoint (unreachable ones left out)."""
        answers = self.fan_out(
            lambda conn: conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
        )
        found = {}
        for endpoint, answer in answers.items():
            if isinstance(answer, RocketliteError):
                continue
            self.note_broker(answer.broker_name, endpoint)
            found[endpoint] = answer
        if not found:
            raise UnavailableError(
                "no broker answered GetBrokerInfo: "
                + "; ".join(str(answers[ep]) for ep in self.endpoints)
            )
        return found

    def group_by_endpoint(self, queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        """Queues grouped by the endpoint of their broker, in first-seen order."""
        grouped: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in queues:
            if not isinstance(mq, MessageQueue):
                raise InvalidArgumentError(
                    f"{mq!r} is not a MessageQueue(topic, broker_name, queue_id)"
                )
            grouped[self.endpoint_of(mq.broker_name)].append(mq)
        return dict(grouped)

    # --- routes --------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRoute:
        return self.routes.get(topic)

    def _fetch_route(
        self, topic: str
    ) -> Mapping[str, admin_pb2.GetTopicRouteResponse | RocketliteError]:
        request = admin_pb2.GetTopicRouteRequest(topic=topic)
        return self.fan_out(lambda conn: conn.call(conn.admin.GetTopicRoute, request))

    def _learn_route(self, route: TopicRoute) -> None:
        for broker in route.brokers.values():
            self.note_broker(broker.broker_name, broker.endpoint)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


def _capture(fn: Callable[[Connection], T], conn: Connection) -> T | RocketliteError:
    try:
        return fn(conn)
    except RocketliteError as exc:
        return exc
