"""RocketMQ 5 clients this broker knows: the settings each sent over ``Telemetry``, when it
was last heard from, and whether it is alive (its auto-renewed messages stay invisible only
while it is)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.clock import monotonic_ms

#: a client not heard from (heartbeat every 10 s, telemetry stream open) for this long is gone
CLIENT_TIMEOUT_MS = 60_000


@dataclass
class ClientInfo:
    client_id: str
    settings: pb.Settings
    last_seen_ms: int
    #: open Telemetry streams: what the broker writes to the client goes in these
    outboxes: list[asyncio.Queue] = field(default_factory=list)


class ClientRegistry:
    def __init__(self, timeout_ms: int = CLIENT_TIMEOUT_MS) -> None:
        self._clients: dict[str, ClientInfo] = {}
        self._lock = threading.Lock()
        self._timeout_ms = timeout_ms

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
            info.last_seen_ms = monotonic_ms()

    def seen(self, client_id: str) -> bool:
        """A heartbeat; False when the client never sent its settings."""
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                return False
            info.last_seen_ms = monotonic_ms()
            return True

    def stream_opened(self, client_id: str, outbox: asyncio.Queue) -> None:
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                info = self._clients[client_id] = ClientInfo(client_id, pb.Settings(), 0)
            info.outboxes.append(outbox)
            info.last_seen_ms = monotonic_ms()

    def stream_closed(self, client_id: str, outbox: asyncio.Queue) -> None:
        with self._lock:
            info = self._clients.get(client_id)
            if info is not None and outbox in info.outboxes:
                info.outboxes.remove(outbox)

    def alive(self, client_id: str) -> bool:
        with self._lock:
            info = self._clients.get(client_id)
            if info is None:
                return False
            return bool(info.outboxes) or monotonic_ms() - info.last_seen_ms < self._timeout_ms

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

    def remove(self, client_id: str) -> None:
        with self._lock:
            self._clients.pop(client_id, None)

    def count(self) -> int:
        with self._lock:
            return len(self._clients)
