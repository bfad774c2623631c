"""A broker's registration with name servers (``--namesrv-addr``), as RocketMQ's brokers do.

At start, every ``register_interval_ms`` (30 s, RocketMQ's registerNameServerPeriod) and
within a fraction of a second of a topic being created, changed or deleted, the broker sends
REGISTER_BROKER to every name server: its broker name, id and cluster, its remoting address
(where clients then send its broker calls) and its whole topic table as a RegisterBrokerBody
(the JSON RocketMQ 4.9's brokers send, with ``bodyCrc32``), under a DataVersion that moves
whenever the table does. A clean stop sends UNREGISTER_BROKER. The name servers are Apache
RocketMQ's or rocketlite brokers' remoting ports; each keeps the broker in its routes while
it registers, and drops it 120 s after the last registration, or when the connection
closes.

Everything runs on the broker's event loop; each name server has one connection, opened
again when it fails. A name server that does not answer is logged and tried again
:data:`RETRY_S` later; the broker serves on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting.namesrv import published_topics, route_settings
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import RocketliteError, UnavailableError
from rmq_spark.wire.remoting import bodies
from rmq_spark.wire.remoting.codes import OUR_VERSION, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    Command,
    FrameError,
    decode,
    encode,
    split_frames,
)

log = logging.getLogger("rmq_spark.broker.registration")

#: how long one call to a name server may take (connecting included)
CALL_TIMEOUT_S = 3.0
#: how often the topic table is looked at for changes
CHANGE_CHECK_S = 0.1
#: a name server that failed is tried again this much later
RETRY_S = 3.0


class NameServerLink:
    """One connection to a name server; answers matched to requests by opaque."""

    def __init__(self, address: str) -> None:
        self.address = address
        host, _, port = address.rpartition(":")
        self._host = host.strip("[]")
        self._port = int(port)
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Command]] = {}
        self._opaques = itertools.count(1)
        #: whether the last call succeeded (None before the first)
        self.healthy: bool | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def call(self, request: Command, timeout_s: float = CALL_TIMEOUT_S) -> Command:
        """Send ``request`` and wait for its answer; UnavailableError when the name server
        cannot be reached or does not answer within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        if self._writer is None or self._writer.is_closing():
            await self._connect(timeout_s)
        assert self._writer is not None
        opaque = next(self._opaques)
        request.opaque = opaque
        answer: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = answer
        try:
            self._writer.write(encode(request))
            return await asyncio.wait_for(answer, max(deadline - time.monotonic(), 0.01))
        except TimeoutError:
            self.close()
            raise UnavailableError(
                f"name server {self.address} did not answer within {timeout_s:g} s"
            ) from None
        except OSError as exc:
            self.close()
            raise UnavailableError(f"name server {self.address}: {exc}") from None
        finally:
            self._pending.pop(opaque, None)

    async def _connect(self, timeout_s: float) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port), timeout_s
            )
        except (OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
            raise UnavailableError(
                f"cannot connect to name server {self.address}: {reason}"
            ) from None
        self._writer = writer
        self._reader = asyncio.get_running_loop().create_task(self._read(reader, writer))

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = bytearray()
        reason = "the name server closed the connection"
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                buffer += data
                frames, used = split_frames(buffer, DEFAULT_MAX_FRAME_BYTES)
                del buffer[:used]
                for frame in frames:
                    command = decode(frame)
                    waiting = self._pending.pop(command.opaque, None)
                    if command.is_response and waiting is not None and not waiting.done():
                        waiting.set_result(command)
        except (OSError, FrameError) as exc:
            reason = str(exc)
        finally:
            writer.close()
            if self._writer is writer:  # still this link's connection: it is over
                self._writer = None
                self._fail_pending(reason)

    def _fail_pending(self, reason: str) -> None:
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(UnavailableError(f"name server {self.address}: {reason}"))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._fail_pending("the connection was closed")
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None


class Registrar:
    """Keeps one broker registered with its name servers (see the module doc)."""

    def __init__(
        self, broker: Broker, workers: Workers, address: str, name_servers: tuple[str, ...]
    ) -> None:
        self._broker = broker
        self._workers = workers
        #: the broker's remoting address, which routes will name
        self.address = address
        self._links = [NameServerLink(server) for server in name_servers]
        self._task: asyncio.Task[None] | None = None
        #: changes of the settings routes depend on while running: each moves the data
        #: version
        self._settings_changes = 0
        config = broker.config
        self._header = {
            "brokerName": config.name,
            "brokerAddr": address,
            "clusterName": config.cluster,
            "haServerAddr": address,
            "brokerId": str(config.broker_id),
        }

    async def start(self) -> None:
        """Register once (waiting at most one call's timeout), then keep registering."""
        version = self._broker.messaging.topics.version
        await self._register_all(version)
        self._task = asyncio.get_running_loop().create_task(self._keep_registered(version))

    async def _keep_registered(self, registered_version: int) -> None:
        config = self._broker.config
        interval_s = config.register_interval_ms / 1000
        last = time.monotonic()
        registered_settings = route_settings(config)
        while True:
            await asyncio.sleep(CHANGE_CHECK_S)
            version = self._broker.messaging.topics.version
            now = time.monotonic()
            # a setting the routes depend on, changed while running (updateBrokerConfig):
            # the name servers are told at once, as RocketMQ's broker tells them (with a new
            # data version: name servers take a broker's queues again only then)
            settings_changed = route_settings(config) != registered_settings
            if settings_changed:
                self._settings_changes += 1
            # a name server that failed, or whose connection closed (it restarted, say, and
            # forgot this broker), is registered with again soon rather than in 30 s
            failing = any(link.healthy is False or not link.connected for link in self._links)
            if (
                version != registered_version
                or settings_changed
                or now - last >= interval_s
                or (failing and now - last >= RETRY_S)
            ):
                last = now
                registered_version = version
                registered_settings = route_settings(config)
                try:
                    await self._register_all(version + self._settings_changes)
                except Exception as exc:  # a bug: logged, and the next round tries again
                    log.error("registering with the name servers failed: %r", exc)

    async def _register_all(self, version: int) -> None:
        try:
            body = await self._workers.run(self._body, version)
        except RocketliteError as exc:  # the workers are shutting down: the broker stops
            log.debug("no registration: %s", exc)
            return
        header = {**self._header, "compressed": "false", "bodyCrc32": str(bodies.body_crc32(body))}
        await asyncio.gather(*(self._register(link, header, body) for link in self._links))

    def _body(self, version: int) -> bytes:
        rows = tuple(
            bodies.TopicConfigRow(t.topic, t.read_queues, t.write_queues, t.perm, t.sys_flag)
            for t in published_topics(self._broker)
        )
        return bodies.register_broker_body(
            bodies.BrokerTopics(self._broker.start_ms, version, rows)
        )

    async def _register(self, link: NameServerLink, header: dict[str, str], body: bytes) -> None:
        request = Command(RequestCode.REGISTER_BROKER, dict(header), body, version=OUR_VERSION)
        try:
            answer = await link.call(request)
            if answer.code != ResponseCode.SUCCESS:
                raise UnavailableError(
                    f"name server {link.address} refused the registration: code "
                    f"{answer.code} {answer.remark or ''}".rstrip()
                )
        except RocketliteError as exc:
            if link.healthy is not False:
                log.warning(
                    "broker %s is not registered with name server %s (tried again every %g s): %s",
                    self._broker.name,
                    link.address,
                    RETRY_S,
                    exc,
                )
            link.healthy = False
            return
        if not link.healthy:
            log.info(
                "broker %s (cluster %s, id %s) registered with name server %s as %s",
                self._broker.name,
                self._header["clusterName"],
                self._header["brokerId"],
                link.address,
                self.address,
            )
        link.healthy = True

    async def stop(self) -> None:
        """Stop registering, then unregister from every name server (one call each, at most
        :data:`CALL_TIMEOUT_S`), as RocketMQ's brokers do on a clean stop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        header = {k: self._header[k] for k in ("brokerName", "brokerAddr", "clusterName")}
        header["brokerId"] = self._header["brokerId"]
        await asyncio.gather(*(self._unregister(link, header) for link in self._links))
        for link in self._links:
            link.close()

    async def _unregister(self, link: NameServerLink, header: dict[str, str]) -> None:
        request = Command(RequestCode.UNREGISTER_BROKER, dict(header), version=OUR_VERSION)
        try:
            answer = await link.call(request)
        except RocketliteError as exc:
            log.warning("could not unregister from name server %s: %s", link.address, exc)
            return
        if answer.code == ResponseCode.SUCCESS:
            log.info("broker %s unregistered from name server %s", self._broker.name, link.address)
        else:
            log.warning(
                "name server %s refused to unregister broker %s: code %d %s",
                link.address,
                self._broker.name,
                answer.code,
                answer.remark or "",
            )
