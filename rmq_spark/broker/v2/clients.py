"""RocketMQ 5 clients this broker knows: the settings each sent over ``Telemetry``, when it
was last heard from, and whether it is alive (its auto-renewed messages stay invisible only
while it is)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.membership.groups import RECONNECT_GRACE_MS
from rmq_spark.clock import monotonic_ms

#: a client not heard from (heartbeat every 10 s, telemetry stream open) for this long is gone
CLIENT_TIMEOUT_MS = 60_000


def client_alive(
    open_streams: int,
    last_seen_ms: int,
    last_stream_closed_ms: int | None,
    now_ms: int,
    timeout_ms: int,
    grace_ms: int,
) -> bool:
    """Whether a RocketMQ 5 client counts as alive at ``now_ms``.

    - With a Telemetry stream open it is alive.
    - When its last stream closed and it has not been heard from since, it is alive for
      ``grace_ms`` after the close: a client that reopens its stream within the grace loses
      nothing; one that was killed is gone a moment later.
    - Otherwise (it never opened a stream, or it sent a heartbeat after its stream closed)
      it is alive while it was heard from within ``timeout_ms``.
    """
    if open_streams > 0:
        return True
    if last_stream_closed_ms is not None and last_seen_ms <= last_stream_closed_ms:
        return now_ms - last_stream_closed_ms < grace_ms
    return now_ms - last_seen_ms < timeout_ms


@dataclass
class ClientInfo:
    client_id: str
    settings: pb.Settings
    last_seen_ms: int
    #: open Telemetry streams: what the broker writes to the client goes in these
    outboxes: list[asyncio.Queue] = field(default_factory=list)
    #: when its last Telemetry stream closed (None: none has closed)
    last_stream_closed_ms: int | None = None


class ClientRegistry:
    def __init__(
        self,
        timeout_ms: int = CLIENT_TIMEOUT_MS,
        grace_ms: int = RECONNECT_GRACE_MS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._clients: dict[str, ClientInfo] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._timeout_ms = timeout_ms
        #: how long a client whose last Telemetry stream closed stays alive
        self.grace_ms = grace_ms

    def settings(self, client_id: str) -> pb.Settings | None:
        with self._lock:
            info = self._clients.get(client_id)
            return info.settings if info else None

    def put_settings(self, client_id: str, settings: pb.Settings) -> None:
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                info = self._clients[client_id] = ClientInfo(client_id, settings, 0)
            info.settings = settings
            info.last_seen_ms = self._clock()

    def seen(self, client_id: str) -> bool:
        """A heartbeat; False when the client never sent its settings."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                return False
            info.last_seen_ms = self._clock()
            return True

    def stream_opened(self, client_id: str, outbox: asyncio.Queue) -> None:
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                info = self._clients[client_id] = ClientInfo(client_id, pb.Settings(), 0)
            info.outboxes.append(outbox)
            info.last_seen_ms = self._clock()

    def stream_closed(self, client_id: str, outbox: asyncio.Queue) -> bool:
        """One of the client's Telemetry streams ended; True when it was its last open one
        (the client is gone :attr:`grace_ms` later unless it reopens one or is heard from)."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None or outbox not in info.outboxes:
                return False
            info.outboxes.remove(outbox)
            info.last_stream_closed_ms = self._clock()
            return not info.outboxes

    def alive(self, client_id: str) -> bool:
        with self._lock:
            info = self._clients.get(client_id)
            return info is not None and self._alive(info)

    def departed(self, client_id: str) -> bool:
        """The client is known here and no longer alive. False for a client that said it
        was leaving (NotifyClientTermination forgot it and released its messages)."""
        with self._lock:
            info = self._clients.get(client_id)
            return info is not None and not self._alive(info)

    def _alive(self, info: ClientInfo) -> bool:
        return client_alive(
            len(info.outboxes),
            info.last_seen_ms,
            info.last_stream_closed_ms,
            self._clock(),
            self._timeout_ms,
            self.grace_ms,
        )

    def producer_outboxes(self, topic: str) -> list[asyncio.Queue]:
        """Telemetry streams of live producers that publish to ``topic`` (who can be asked
        about an orphaned transaction of it)."""
        with self._lock:
            return [
                outbox
                for info in self._clients.values()
                if info.settings.HasField("publishing")
                and any(t.name == topic for t in info.settings.publishing.topics)
                for outbox in info.outboxes
            ]

    def consumers(self) -> list[tuple[str, str, str, tuple[tuple[str, str, str], ...]]]:
        """The live consumers (simple and push), by group and client id: (group, client
        id, client type such as ``SIMPLE_CONSUMER``, (topic, expression, filter type such
        as ``TAG``) per subscription)."""
        with self._lock:
            found = [
                (info.client_id, info.settings)
                for info in self._clients.values()
                if info.settings.HasField("subscription") and self._alive(info)
            ]
        rows = []
        for client_id, settings in found:
            subscription = settings.subscription
            entries = tuple(
                (e.topic.name, e.expression.expression, pb.FilterType.Name(e.expression.type))
                for e in subscription.subscriptions
            )
            kind = pb.ClientType.Name(settings.client_type)
            rows.append((subscription.group.name, client_id, kind, entries))
        return sorted(rows)

    def remove(self, client_id: str) -> None:
        with self._lock:
            self._clients.pop(client_id, None)

    def count(self) -> int:
        with self._lock:
            return len(self._clients)
