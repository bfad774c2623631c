"""``apache.rocketmq.v2.MessagingService``: what unmodified RocketMQ 5 clients (Java, Go,
Python, ...) call, served on the same port as ``rocketlite.v1`` over the same broker.

As a RocketMQ 5 proxy does, business errors travel in each response's ``status`` (the
call itself succeeds); only a broken Telemetry stream is a gRPC error. Each method runs on
the event loop and hands store work to the broker's workers; receives wait for messages
there without holding a thread.

This module is the facade: routes, settings over Telemetry, heartbeats and client
termination live here (with the question about an orphaned transaction the broker's
:mod:`~rmq_spark.broker.transactions.checks` sends a producer); producing in :mod:`.produce`,
consuming in :mod:`.consume`, the offset calls in :mod:`.offsets_api`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.routes import queue_perm
from rmq_spark.broker.membership.filters import Subscribed, check_selectors
from rmq_spark.broker.v2 import convert, settings
from rmq_spark.broker.v2.clients import ClientRegistry
from rmq_spark.broker.v2.codes import Code, V2Error, code_of, grpc_code_of, status
from rmq_spark.broker.v2.consume import Consuming
from rmq_spark.broker.v2.offsets_api import OffsetsApi
from rmq_spark.broker.v2.pop_store import PopStore
from rmq_spark.broker.v2.produce import Producing
from rmq_spark.broker.v2.receive import RELEASE_DELAY_MS, PopService
from rmq_spark.broker.v2.requests import (
    accepted_types,
    answered,
    client_id_of,
    endpoints_for,
    existing_topic,
    failure_status,
    filter_type,
    is_fifo_group,
    max_attempts,
    required_client_id,
    topic_name,
)
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.record import Record
from rmq_spark.errors import RocketliteError, shown
from rmq_spark.structs import Permission

log = logging.getLogger("rmq_spark.broker")

_STREAM_END = object()
_BAD_SETTINGS = object()
#: the grace timer fires this much late, so the registry's millisecond clock has the grace over
_GRACE_SLACK_S = 0.02


#: a queue's permission (:func:`~rmq_spark.broker.core.routes.queue_perm`) as v2 announces it
_PERMISSIONS = {
    int(Permission.READ_WRITE): pb.READ_WRITE,
    int(Permission.READ): pb.READ,
    int(Permission.WRITE): pb.WRITE,
    0: pb.NONE,
}


def _abort_code(exc: RocketliteError) -> grpc.StatusCode:
    """The gRPC status a Telemetry stream ends with for settings refused with ``exc``: the
    code of the same meaning as its v2 code (a malformed SQL92 subscription, 40010, is
    INVALID_ARGUMENT; one a broker without property filtering refuses, 50100,
    UNIMPLEMENTED)."""
    return getattr(grpc.StatusCode, grpc_code_of(code_of(exc)), grpc.StatusCode.INVALID_ARGUMENT)


class MessagingServiceV2(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self.clients = ClientRegistry()
        sync = broker.config.flush_mode == "SYNC"
        self.pops = PopStore(Path(broker.messaging.store_config.store_dir) / "config", sync=sync)
        self.pop = PopService(broker, self.pops, self.clients.alive)
        self._offsets = OffsetsApi(broker)
        self._producing = Producing(broker, workers)
        self._consuming = Consuming(broker, workers, self.pop)
        broker.transaction_checks.add_asker(self._ask_about_transaction)
        #: grace timers of clients whose last Telemetry stream closed, and their releases
        self._departures: set[asyncio.TimerHandle | asyncio.Task] = set()
        self._stopping = False

    def close(self) -> None:
        self.pops.close()

    async def stop(self) -> None:
        """Stop watching for departed clients (streams closed by the shutdown are no
        departure: after a restart every client's messages are due at their recorded time).
        The broker stops its transaction checks itself."""
        self._stopping = True
        for pending in list(self._departures):
            pending.cancel()
        self._departures.clear()

    def _ask_about_transaction(self, transaction_id: str, record: Record, topic: str) -> bool:
        """Ask a live RocketMQ 5 producer of ``topic`` about an orphaned transaction, over
        its Telemetry stream (it answers with EndTransaction); False when none is here."""
        outboxes = self.clients.producer_outboxes(topic)
        if not outboxes:
            return False
        message = convert.incoming(record, topic=topic)
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id
            )
        )
        random.choice(outboxes).put_nowait(command)
        return True

    # -- routes, settings, liveness --------------------------------------------------------

    @answered(spb.QueryRouteResponse)
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        required_client_id(context)
        topic = topic_name(request.topic)
        return await self._workers.run(self._route, topic, request.endpoints)

    def _route(self, topic: str, endpoints: pb.Endpoints) -> spb.QueryRouteResponse:
        config = existing_topic(self._broker, topic)
        accept = accepted_types(config.message_type)
        broker = pb.Broker(
            name=self._broker.name, id=0, endpoints=endpoints_for(self._broker, endpoints)
        )
        broker_perm = self._broker.config.broker_perm
        queues = [
            pb.MessageQueue(
                topic=pb.Resource(name=topic),
                id=queue_id,
                permission=_PERMISSIONS[queue_perm(config, queue_id, broker_perm)],
                broker=broker,
                accept_message_types=accept,
            )
            for queue_id in range(max(config.read_queue_nums, config.write_queue_nums))
        ]
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    @answered(spb.HeartbeatResponse)
    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> spb.HeartbeatResponse:
        client_id = required_client_id(context)
        if not self.clients.seen(client_id):
            raise V2Error(
                Code.UNRECOGNIZED_CLIENT_TYPE,
                f"client {shown(client_id)} has not sent its settings over Telemetry yet",
            )
        return spb.HeartbeatResponse(status=status())

    @answered(spb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        client_id = required_client_id(context)
        released = await self._workers.run(self.pop.release_client, client_id)
        self.clients.remove(client_id)
        if released:
            log.info(
                "client %s left; %d of its messages come back", client_id, sum(released.values())
            )
            # they become visible after RELEASE_DELAY_MS (acks the client sent as it left
            # may still arrive): wake the receives waiting on their queues then
            queues = list(released)

            def visible() -> None:
                self._departures.discard(timer)
                self.pop.wake(queues)

            delay_s = RELEASE_DELAY_MS / 1000 + _GRACE_SLACK_S
            timer = asyncio.get_running_loop().call_later(delay_s, visible)
            self._departures.add(timer)
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[spb.TelemetryCommand],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """The client's settings in, the broker's answers and its own commands (checks of
        orphaned transactions) out, over one long-lived stream."""
        client_id = client_id_of(context)
        if not client_id.strip():
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id is required")
        self._broker.transaction_checks.start(self._workers)
        outbox: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.WhichOneof("command") != "settings":
                        continue  # thread stack traces, verify results: nothing to do here
                    try:
                        answer = await self._workers.run(
                            self._settings, client_id, command.settings
                        )
                    except RocketliteError as exc:
                        await outbox.put((_BAD_SETTINGS, _abort_code(exc), str(exc)))
                        return
                    if answer is None:
                        await outbox.put(
                            (
                                _BAD_SETTINGS,
                                grpc.StatusCode.INVALID_ARGUMENT,
                                "settings carry neither publishing nor subscription",
                            )
                        )
                        return
                    await outbox.put(spb.TelemetryCommand(status=status(), settings=answer))
            finally:
                await outbox.put(_STREAM_END)

        reader = asyncio.create_task(read())
        self.clients.stream_opened(client_id, outbox)
        try:
            while (item := await outbox.get()) is not _STREAM_END:
                if isinstance(item, tuple) and item[0] is _BAD_SETTINGS:
                    await context.abort(item[1], item[2])
                yield item
        finally:
            reader.cancel()
            if self.clients.stream_closed(client_id, outbox) and not self._stopping:
                self._watch_departure(client_id)

    def _watch_departure(self, client_id: str) -> None:
        """The client closed its last Telemetry stream: when the grace is over and it has
        neither reopened one nor been heard from (a crash, a lost connection), its
        auto-renewed messages come back to its group at once, and receives waiting for them
        wake up. A client that said it was leaving released them then and is left alone."""
        loop = asyncio.get_running_loop()

        def grace_over() -> None:
            self._departures.discard(timer)
            if self._stopping or not self.clients.departed(client_id):
                return
            task = loop.create_task(self._release_departed(client_id))
            self._departures.add(task)
            task.add_done_callback(self._departures.discard)

        timer = loop.call_later(self.clients.grace_ms / 1000 + _GRACE_SLACK_S, grace_over)
        self._departures.add(timer)

    async def _release_departed(self, client_id: str) -> None:
        released = sum((await self._workers.run(self.pop.release_client, client_id, 0)).values())
        if released:
            log.info(
                "client %s is gone (its Telemetry stream closed %d ms ago); %d of its "
                "messages come back",
                client_id,
                self.clients.grace_ms,
                released,
            )

    def _settings(self, client_id: str, client: pb.Settings) -> pb.Settings | None:
        kind = client.WhichOneof("pub_sub")
        config = self._broker.config
        limit = config.max_request_items
        if kind == "publishing":
            checks.at_most(
                len(client.publishing.topics), "publishing.topics", limit, "--max-request-items"
            )
        elif kind == "subscription":
            entries = client.subscription.subscriptions
            checks.at_most(len(entries), "subscription.subscriptions", limit, "--max-request-items")
            subscribed = [
                Subscribed(e.topic.name, e.expression.expression, filter_type(e.expression))
                for e in entries
            ]
            check_selectors(subscribed, config.max_heartbeat_selectors, "a client's settings")
            for sub in subscribed:
                # refused now, as the proxy refuses a subscription it cannot build: a push
                # consumer does not start with a filter no receive could use
                try:
                    self._broker.messaging.read_filter(sub.kind, sub.expression)
                except RocketliteError as exc:
                    where = f"the subscription to {sub.topic!r}"
                    raise V2Error(code_of(exc), f"{where}: {exc}") from None
        if kind == "publishing":
            answer = settings.producer_settings(
                client, max_body_bytes=self._broker.config.max_message_bytes
            )
        elif kind == "subscription":
            topics = [entry.topic.name for entry in client.subscription.subscriptions]
            answer = settings.consumer_settings(
                client,
                fifo=is_fifo_group(self._broker, topics),
                max_attempts=max_attempts(self._broker, client.subscription.group.name),
            )
        else:
            return None
        self.clients.put_settings(client_id, answer)
        return answer

    # -- producing (produce.py) --------------------------------------------------------

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        return await self._producing.SendMessage(request, context)

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> spb.EndTransactionResponse:
        return await self._producing.EndTransaction(request, context)

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.RecallMessageResponse:
        return await self._producing.RecallMessage(request, context)

    # -- consuming (consume.py) --------------------------------------------------------

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        return await self._consuming.QueryAssignment(request, context)

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        async for frame in self._consuming.ReceiveMessage(request, context):
            yield frame

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        return await self._consuming.AckMessage(request, context)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        return await self._consuming.ChangeInvisibleDuration(request, context)

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await self._consuming.ForwardMessageToDeadLetterQueue(request, context)

    @answered(spb.GetOffsetResponse)
    async def GetOffset(
        self, request: spb.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> spb.GetOffsetResponse:
        offset = await self._workers.run(self._offsets.get, request)
        return spb.GetOffsetResponse(status=status(), offset=offset)

    @answered(spb.UpdateOffsetResponse)
    async def UpdateOffset(
        self, request: spb.UpdateOffsetRequest, context: grpc.aio.ServicerContext
    ) -> spb.UpdateOffsetResponse:
        await self._workers.run(self._offsets.update, request)
        return spb.UpdateOffsetResponse(status=status())

    @answered(spb.QueryOffsetResponse)
    async def QueryOffset(
        self, request: spb.QueryOffsetRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryOffsetResponse:
        offset = await self._workers.run(self._offsets.query, request)
        return spb.QueryOffsetResponse(status=status(), offset=offset)

    async def PullMessage(
        self, request: spb.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            answer = await self._offsets.pull(request, self._workers)
        except Exception as exc:
            yield spb.PullMessageResponse(status=failure_status(exc, "PullMessage"))
            return
        for item in answer:
            yield item
