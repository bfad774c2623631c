"""``apache.rocketmq.v2.MessagingService``: what unmodified RocketMQ 5 clients (Java, Go,
Python, ...) call, served on the same port as ``rocketlite.v1`` over the same broker.

As a RocketMQ 5 proxy does, business errors travel in each response's ``status`` (the
call itself succeeds); only a broken Telemetry stream is a gRPC error. Each method runs on
the event loop and hands store work to the broker's workers; receives wait for messages
there without holding a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rmq_spark.broker.core import Broker
from rmq_spark.broker.send import born_host
from rmq_spark.broker.status import Workers
from rmq_spark.broker.v2 import convert, settings
from rmq_spark.broker.v2.clients import ClientRegistry
from rmq_spark.broker.v2.codes import Code, V2Error, code_of, status
from rmq_spark.broker.v2.convert import Handle
from rmq_spark.broker.v2.offsets_api import OffsetsApi
from rmq_spark.broker.v2.pop_store import PopStore
from rmq_spark.broker.v2.receive import AUTO_RENEW_MS, PopService, ReceiveArgs
from rmq_spark.codec.properties import REAL_TOPIC, decode_properties
from rmq_spark.codec.subscription import parse_subscription
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError, shown
from rmq_spark.names import validate_group, validate_topic

log = logging.getLogger("rmq_spark.broker")

CLIENT_ID_HEADER = "x-mq-client-id"
#: how often pending transactions are looked at (each has its own check times)
CHECK_LOOP_S = 1.0
_STREAM_END = object()
_BAD_SETTINGS = object()
MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_POLLING_MS = 20_000
MAX_RECEIVE_BATCH = 32


def answered(response_type):
    """A unary method whose failures become ``response_type(status=...)``."""

    def wrap(method):
        @functools.wraps(method)
        async def handler(self, request, context):
            try:
                return await method(self, request, context)
            except Exception as exc:
                return response_type(status=failure_status(exc, method.__name__))

        return handler

    return wrap


def failure_status(exc: BaseException, rpc: str) -> pb.Status:
    if not isinstance(exc, V2Error | RocketliteError):
        log.error("internal error in v2 %s", rpc, exc_info=exc)
    message = exc.message if isinstance(exc, V2Error) else str(exc)
    if not isinstance(exc, V2Error | RocketliteError):
        message = f"internal broker error: {type(exc).__name__}: {exc}"
    return status(code_of(exc), message)


def client_id_of(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return value
    return ""


def required_client_id(context) -> str:
    client_id = client_id_of(context)
    if not client_id.strip():
        raise V2Error(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is missing or blank")
    return client_id


def topic_name(resource: pb.Resource) -> str:
    try:
        return validate_topic(resource.name)
    except InvalidArgumentError as exc:
        raise V2Error(Code.ILLEGAL_TOPIC, str(exc)) from None


def group_name(resource: pb.Resource) -> str:
    try:
        return validate_group(resource.name)
    except InvalidArgumentError as exc:
        raise V2Error(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None


_PERMISSIONS = {
    (True, True): pb.READ_WRITE,
    (True, False): pb.READ,
    (False, True): pb.WRITE,
    (False, False): pb.NONE,
}


def java_hash(text: str) -> int:
    """Java's String.hashCode, so a message group maps to the queue a Java proxy picks."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class MessagingServiceV2(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self.clients = ClientRegistry()
        sync = broker.config.flush_mode == "SYNC"
        self.pops = PopStore(broker.store.config.store_dir / "config", sync=sync)
        self.pop = PopService(broker, self.pops, self.clients.alive)
        self._offsets = OffsetsApi(broker)
        self._round_robin: dict[str, int] = {}
        self._checks: asyncio.Task | None = None

    def close(self) -> None:
        self.pops.close()

    # -- routes, settings, liveness --------------------------------------------------------

    @answered(spb.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        required_client_id(context)
        topic = topic_name(request.topic)
        return await self._workers.run(self._route, topic, request.endpoints)

    def _route(self, topic: str, endpoints: pb.Endpoints) -> spb.QueryRouteResponse:
        config = self._broker.store.topics.find(topic)
        if config is None:
            raise V2Error(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist on this broker")
        accept = self._accepted_types(config.message_type)
        broker = pb.Broker(name=self._broker.name, id=0, endpoints=self._endpoints(endpoints))
        broker_perm = self._broker.config.broker_perm
        queues = []
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            readable = queue_id < config.read_queue_nums and config.perm & broker_perm & 4
            writable = queue_id < config.write_queue_nums and config.perm & broker_perm & 2
            perm = _PERMISSIONS[bool(readable), bool(writable)]
            queues.append(
                pb.MessageQueue(
                    topic=pb.Resource(name=topic),
                    id=queue_id,
                    permission=perm,
                    broker=broker,
                    accept_message_types=accept,
                )
            )
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    def _endpoints(self, asked: pb.Endpoints) -> pb.Endpoints:
        """The address clients should use: the one they reached us by (a single broker is
        its own access point), else the advertised endpoint."""
        if asked.addresses:
            return asked
        host, _, port = self._broker.endpoint.rpartition(":")
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])

    @staticmethod
    def _accepted_types(message_type: str) -> list[int]:
        if message_type == "MIXED":
            return [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
        return [getattr(pb, message_type)]

    @answered(spb.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        client_id = required_client_id(context)
        if not self.clients.seen(client_id):
            raise V2Error(
                Code.UNRECOGNIZED_CLIENT_TYPE,
                f"client {shown(client_id)} has not sent its settings over Telemetry yet",
            )
        return spb.HeartbeatResponse(status=status())

    @answered(spb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        client_id = required_client_id(context)
        released = await self._workers.run(self.pop.release_client, client_id)
        self.clients.remove(client_id)
        if released:
            log.info("client %s left; %d of its messages come back", client_id, released)
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(self, request_iterator, context):
        """The client's settings in, the broker's answers and its own commands (checks of
        orphaned transactions) out, over one long-lived stream."""
        client_id = client_id_of(context)
        if not client_id.strip():
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id is required")
        self._start_transaction_checks()
        outbox: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.WhichOneof("command") != "settings":
                        continue  # thread stack traces, verify results: nothing to do here
                    answer = await self._workers.run(self._settings, client_id, command.settings)
                    if answer is None:
                        await outbox.put(_BAD_SETTINGS)
                        return
                    await outbox.put(spb.TelemetryCommand(status=status(), settings=answer))
            finally:
                await outbox.put(_STREAM_END)

        reader = asyncio.create_task(read())
        self.clients.stream_opened(client_id, outbox)
        try:
            while (item := await outbox.get()) is not _STREAM_END:
                if item is _BAD_SETTINGS:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "settings carry neither publishing nor subscription",
                    )
                yield item
        finally:
            reader.cancel()
            self.clients.stream_closed(client_id, outbox)

    def _start_transaction_checks(self) -> None:
        if self._checks is None:  # on the event loop, started by the first client stream
            self._checks = asyncio.create_task(self._check_transactions())

    async def stop(self) -> None:
        """Stop the transaction checks (on the event loop, before the server stops)."""
        if self._checks is not None:
            self._checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checks

    async def _check_transactions(self) -> None:
        """Ask a live producer of the topic about each pending transaction that is due, as
        a RocketMQ broker does; the producer answers with EndTransaction."""
        while True:
            await asyncio.sleep(CHECK_LOOP_S)
            try:
                due = await self._workers.run(self._broker.transactions.due_checks)
            except Exception as exc:  # the store failed or is full: try again later
                log.warning("transaction checks skipped: %s", exc)
                continue
            for transaction_id, record in due:
                self._ask_producer(transaction_id, record)

    def _ask_producer(self, transaction_id: str, record) -> None:
        fields = decode_properties(record.properties)
        topic = fields.get(REAL_TOPIC, record.topic)
        outboxes = self.clients.producer_outboxes(topic)
        if not outboxes:
            log.info(
                "transaction %s of topic %s is pending and no producer of it is connected "
                "to be asked",
                transaction_id,
                topic,
            )
            return
        message = convert.incoming(record, topic=topic)
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id
            )
        )
        random.choice(outboxes).put_nowait(command)

    def _settings(self, client_id: str, client: pb.Settings) -> pb.Settings | None:
        kind = client.WhichOneof("pub_sub")
        if kind == "publishing":
            answer = settings.producer_settings(
                client, max_body_bytes=self._broker.config.max_message_bytes
            )
        elif kind == "subscription":
            topics = [entry.topic.name for entry in client.subscription.subscriptions]
            answer = settings.consumer_settings(
                client, fifo=self._is_fifo(topics), max_attempts=self._max_attempts()
            )
        else:
            return None
        self.clients.put_settings(client_id, answer)
        return answer

    def _is_fifo(self, topics: list[str]) -> bool:
        """A group is FIFO when it subscribes to a FIFO topic (RocketMQ sets this on the
        group; rocketlite has no group table, so the topic's type says it)."""
        for topic in topics:
            config = self._broker.store.topics.find(topic)
            if config is not None and config.message_type == "FIFO":
                return True
        return False

    def _max_attempts(self) -> int:
        return self._broker.config.max_reconsume_times + 1

    # -- producing ---------------------------------------------------------------------

    @answered(spb.SendMessageResponse)
    async def SendMessage(self, request, context):
        required_client_id(context)
        if not request.messages:
            raise V2Error(Code.BAD_REQUEST, "messages is empty; send at least one message")
        peer = born_host(context.peer())
        entries = []
        for message in request.messages:
            try:
                entry = await self._workers.run(self._send_one, message, peer)
            except Exception as exc:
                entry = spb.SendResultEntry(
                    status=failure_status(exc, "SendMessage"),
                    message_id=message.system_properties.message_id,
                )
            entries.append(entry)
        codes = {entry.status.code for entry in entries}
        if len(codes) == 1:
            top = entries[0].status
        else:
            top = status(Code.MULTIPLE_RESULTS, "the messages had different results")
        return spb.SendMessageResponse(status=top, entries=entries)

    def _send_one(self, message: pb.Message, peer: str) -> spb.SendResultEntry:
        topic = topic_name(message.topic)
        config = self._broker.store.topics.find(topic)
        if config is None:
            raise V2Error(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist on this broker")
        now = time.time_ns() // 1_000_000
        out = convert.outgoing(message, self._broker.config.max_message_bytes, now)
        convert.check_type(topic, config.message_type, out.message_type)
        queues = config.write_queue_nums
        if out.message_group:
            queue_id = java_hash(out.message_group) % queues
        else:
            count = self._round_robin.get(topic, 0)
            self._round_robin[topic] = count + 1
            queue_id = count % queues
        if out.message_type == "TRANSACTION":
            return self._prepare(message, out, topic, queue_id, peer)
        if out.delivery_ms is not None:
            return self._schedule(out, topic, queue_id, peer, now)
        result = self._broker.put_messages(
            topic,
            queue_id,
            [out.body],
            [out.properties],
            [out.tag],
            born_host=peer,
            born_timestamps=[out.born_timestamp_ms],
        )
        return spb.SendResultEntry(
            status=status(),
            message_id=out.message_id,
            offset=result.first_queue_offset,
        )

    def _schedule(self, out, topic: str, queue_id: int, peer: str, now_ms: int):
        """A DELAY message: parked in the timer topic until its delivery time (at once when
        that time is not in the future)."""
        timers = self._broker.timers
        if out.delivery_ms is None or out.delivery_ms > now_ms + timers.max_delay_ms:
            hint = ""
            if out.delivery_ms is not None and out.delivery_ms > now_ms * 100:
                hint = (
                    " (it looks like milliseconds in the seconds field: the Python client "
                    "sends Message.delivery_timestamp as whole seconds since the epoch)"
                )
            raise V2Error(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery time {out.delivery_ms} ms is more than "
                f"{timers.max_delay_ms // 3_600_000} h ahead; the broker keeps delay "
                f"messages for at most that long{hint}",
            )
        result = timers.schedule(
            topic,
            queue_id,
            [out.body],
            [out.properties],
            [out.tag],
            out.delivery_ms,
            born_host=peer,
            born_timestamps=[out.born_timestamp_ms],
        )
        return spb.SendResultEntry(
            status=status(), message_id=out.message_id, offset=result.first_queue_offset
        )

    def _prepare(self, message, out, topic: str, queue_id: int, peer: str):
        """A transaction's half message: stored, invisible until EndTransaction commits."""
        sp = message.system_properties
        check_after = None
        if sp.HasField("orphaned_transaction_recovery_duration"):
            check_after = sp.orphaned_transaction_recovery_duration.ToMilliseconds()
        result = self._broker.transactions.prepare(
            topic,
            queue_id,
            out.body,
            out.properties,
            out.tag,
            transaction_id=out.message_id,
            born_host=peer,
            born_timestamp_ms=out.born_timestamp_ms,
            check_after_ms=check_after,
        )
        return spb.SendResultEntry(
            status=status(),
            message_id=out.message_id,
            transaction_id=out.message_id,
            offset=result.first_queue_offset,
        )

    @answered(spb.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        required_client_id(context)
        topic = topic_name(request.topic)
        transaction_id = request.transaction_id
        if not transaction_id.strip():
            raise V2Error(Code.INVALID_TRANSACTION_ID, "transaction_id is empty")
        if request.resolution == pb.COMMIT:
            commit = True
        elif request.resolution == pb.ROLLBACK:
            commit = False
        else:
            raise V2Error(Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        transactions = self._broker.transactions
        try:
            end = functools.partial(transactions.end, transaction_id, commit, topic=topic)
            resolved = await self._workers.run(end)
        except NotFoundError as exc:
            raise V2Error(Code.INVALID_TRANSACTION_ID, str(exc)) from None
        if not resolved:
            outcome = transactions.status(transaction_id)
            wanted = "COMMIT" if commit else "ROLLBACK"
            if outcome != wanted:
                raise V2Error(
                    Code.BAD_REQUEST,
                    f"transaction {shown(transaction_id)} was already ended as {outcome}; "
                    f"it cannot be changed to {wanted}",
                )
        return spb.EndTransactionResponse(status=status())

    @answered(spb.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        raise V2Error(Code.NOT_IMPLEMENTED, "delay messages are not served by this broker yet")

    # -- consuming ---------------------------------------------------------------------

    @answered(spb.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        required_client_id(context)
        topic = topic_name(request.topic)
        group_name(request.group)
        queue_ids = await self._workers.run(self.pop.readable_queues, topic)
        if not queue_ids:
            raise V2Error(Code.FORBIDDEN, f"topic {topic} has no readable queue")
        config = self._broker.store.topics.get(topic)
        endpoints = self._endpoints(request.endpoints)
        broker = pb.Broker(name=self._broker.name, id=0, endpoints=endpoints)
        accept = self._accepted_types(config.message_type)
        # Every member may receive from every queue (a receive takes what is visible), so
        # one assignment per broker is enough; a FIFO group gets one per queue, so each
        # queue has a receive of its own under way.
        ids = queue_ids if config.message_type == "FIFO" else [-1]
        assignments = [
            pb.Assignment(
                message_queue=pb.MessageQueue(
                    topic=pb.Resource(name=topic), id=queue_id, permission=pb.READ_WRITE,
                    broker=broker, accept_message_types=accept,
                )
            )
            for queue_id in ids
        ]  # fmt: skip
        return spb.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def ReceiveMessage(self, request, context):
        try:
            args, poll_ms = self._receive_args(request, context)
            deliveries = await self._receive(args, poll_ms)
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=failure_status(exc, "ReceiveMessage"))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield spb.ReceiveMessageResponse(status=status())
        messages = await self._workers.run(self._to_messages, args.topic, deliveries)
        for message in messages:
            yield spb.ReceiveMessageResponse(message=message)
        now = spb.ReceiveMessageResponse()
        now.delivery_timestamp.GetCurrentTime()
        yield now

    @staticmethod
    def _to_messages(topic: str, deliveries) -> list[pb.Message]:
        return [
            convert.incoming(
                d.record,
                topic=topic,
                receipt_handle=d.handle.encode(),
                delivery_attempt=d.attempt,
                invisible_ms=d.invisible_ms,
            )
            for d in deliveries
        ]

    def _receive_args(self, request, context) -> tuple[ReceiveArgs, int]:
        client_id = required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic)
        expression = request.filter_expression
        if expression.type == pb.SQL:
            raise V2Error(Code.NOT_IMPLEMENTED, "SQL92 filters are not supported; filter by tag")
        try:
            tag_codes = parse_subscription(expression.expression).tag_codes
        except InvalidArgumentError as exc:
            raise V2Error(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
        batch = request.batch_size or MAX_RECEIVE_BATCH
        if batch < 1:
            raise V2Error(Code.BAD_REQUEST, f"batch_size {batch} must be at least 1")
        if request.auto_renew:
            invisible_ms, owner = AUTO_RENEW_MS, client_id
        else:
            if not request.HasField("invisible_duration"):
                raise V2Error(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    "invisible_duration is required when auto_renew is off",
                )
            invisible_ms, owner = request.invisible_duration.ToMilliseconds(), ""
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                raise V2Error(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration of {invisible_ms} ms is out of range: use "
                    f"{MIN_INVISIBLE_MS // 1000} s to {MAX_INVISIBLE_MS // 3_600_000} h",
                )
        poll_ms = MAX_POLLING_MS
        if request.HasField("long_polling_timeout"):
            poll_ms = min(poll_ms, max(0, request.long_polling_timeout.ToMilliseconds()))
        remaining = context.time_remaining()
        if remaining is not None:
            poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 1000))
        fifo = self._broker.store.topics.find(topic) is not None and self._is_fifo([topic])
        args = ReceiveArgs(
            group=group,
            topic=topic,
            batch=min(batch, MAX_RECEIVE_BATCH),
            invisible_ms=invisible_ms,
            tag_codes=tag_codes,
            fifo=fifo,
            max_attempts=self._max_attempts(),
            client_id=owner,
        )
        return args, poll_ms

    async def _receive(self, args: ReceiveArgs, poll_ms: int):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        while True:
            deliveries = await self._workers.run(self.pop.receive, args)
            remaining = deadline - loop.time()
            if deliveries or remaining <= 0:
                return deliveries
            queue_ids = self.pop.readable_queues(args.topic)
            due = self.pop.next_due_ms(args.group, args.topic, queue_ids)
            if due is not None:
                remaining = min(remaining, max(0.01, (due - time.time_ns() // 1_000_000) / 1000))
            keys = [(args.topic, queue_id) for queue_id in queue_ids]
            ready = functools.partial(
                self.pop.is_ready, args.group, args.topic, queue_ids, args.fifo
            )
            await self._broker.notifier.wait_any(keys, remaining, ready)

    @answered(spb.AckMessageResponse)
    async def AckMessage(self, request, context):
        required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.topic)
        results = await self._workers.run(self._ack_all, group, topic, list(request.entries))
        codes = {entry.status.code for entry in results}
        top = results[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "mixed")
        return spb.AckMessageResponse(status=top, entries=results)

    def _ack_all(self, group: str, topic: str, entries) -> list[spb.AckMessageResultEntry]:
        if not entries:
            raise V2Error(Code.BAD_REQUEST, "entries is empty; ack at least one message")
        out = []
        for entry in entries:
            try:
                self.pop.ack(group, topic, Handle.decode(entry.receipt_handle))
                result = status()
            except Exception as exc:
                result = failure_status(exc, "AckMessage")
            out.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                    status=result,
                )
            )  # fmt: skip
        return out

    @answered(spb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.topic)
        invisible_ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise V2Error(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible duration of {invisible_ms} ms is out of range: use 0 to "
                f"{MAX_INVISIBLE_MS // 3_600_000} h",
            )
        handle = Handle.decode(request.receipt_handle)
        new = await self._workers.run(self.pop.change_invisible, group, topic, handle, invisible_ms)
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=new.encode())

    @answered(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.topic)
        handle = Handle.decode(request.receipt_handle)
        await self._workers.run(self.pop.forward_to_dlq, group, topic, handle)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())

    # -- offsets -----------------------------------------------------------------------

    @answered(spb.GetOffsetResponse)
    async def GetOffset(self, request, context):
        offset = await self._workers.run(self._offsets.get, request)
        return spb.GetOffsetResponse(status=status(), offset=offset)

    @answered(spb.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        await self._workers.run(self._offsets.update, request)
        return spb.UpdateOffsetResponse(status=status())

    @answered(spb.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        offset = await self._workers.run(self._offsets.query, request)
        return spb.QueryOffsetResponse(status=status(), offset=offset)

    async def PullMessage(self, request, context):
        try:
            answer = await self._offsets.pull(request, self._workers)
        except Exception as exc:
            yield spb.PullMessageResponse(status=failure_status(exc, "PullMessage"))
            return
        for item in answer:
            yield item
