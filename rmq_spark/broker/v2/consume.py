"""Consuming over v2, RocketMQ 5's pop model: QueryAssignment, ReceiveMessage (long
polling on the event loop, no thread held), AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue, over :class:`~rmq_spark.broker.v2.receive.PopService`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Sequence

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.v2 import convert
from rmq_spark.broker.v2.codes import Code, V2Error, status
from rmq_spark.broker.v2.convert import Handle
from rmq_spark.broker.v2.receive import AUTO_RENEW_MS, Delivery, PopService, ReceiveArgs
from rmq_spark.broker.v2.requests import (
    accepted_types,
    answered,
    endpoints_for,
    failure_status,
    group_name,
    is_fifo_group,
    max_attempts,
    read_filter,
    required_client_id,
    topic_name,
)
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms

MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_POLLING_MS = 20_000
MAX_RECEIVE_BATCH = 32


class Consuming:
    def __init__(self, broker: Broker, workers: Workers, pop: PopService) -> None:
        self._broker = broker
        self._workers = workers
        self.pop = pop

    @answered(spb.QueryAssignmentResponse)
    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        required_client_id(context)
        topic = topic_name(request.topic)
        group_name(request.group)
        queue_ids = await self._workers.run(self.pop.readable_queues, topic)
        config = self._broker.messaging.topics.get(topic)
        endpoints = endpoints_for(self._broker, request.endpoints)
        broker = pb.Broker(name=self._broker.name, id=0, endpoints=endpoints)
        accept = accepted_types(config.message_type)
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

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
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
    def _to_messages(topic: str, deliveries: list[Delivery]) -> list[pb.Message]:
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

    def _receive_args(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> tuple[ReceiveArgs, int]:
        client_id = required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.message_queue.topic)
        tag_codes, selector = read_filter(request.filter_expression, self._broker)
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
        fifo = self._broker.messaging.topics.find(topic) is not None and is_fifo_group(
            self._broker, [topic]
        )
        args = ReceiveArgs(
            group=group,
            topic=topic,
            batch=min(batch, MAX_RECEIVE_BATCH),
            invisible_ms=invisible_ms,
            tag_codes=tag_codes,
            selector=selector,
            fifo=fifo,
            max_attempts=max_attempts(self._broker, group),
            client_id=owner,
        )
        return args, poll_ms

    async def _receive(self, args: ReceiveArgs, poll_ms: int) -> list[Delivery]:
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
                remaining = min(remaining, max(0.01, (due - now_ms()) / 1000))
            keys = [(args.topic, queue_id) for queue_id in queue_ids]
            ready = functools.partial(
                self.pop.is_ready, args.group, args.topic, queue_ids, args.fifo
            )
            await self._broker.messaging.wait_for_messages(keys, remaining, ready)

    @answered(spb.AckMessageResponse)
    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.topic)
        results = await self._workers.run(self._ack_all, group, topic, list(request.entries))
        codes = {entry.status.code for entry in results}
        top = results[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "mixed")
        return spb.AckMessageResponse(status=top, entries=results)

    def _ack_all(
        self, group: str, topic: str, entries: Sequence[spb.AckMessageEntry]
    ) -> list[spb.AckMessageResultEntry]:
        if not entries:
            raise V2Error(Code.BAD_REQUEST, "entries is empty; ack at least one message")
        limit = self._broker.config.max_request_items
        checks.at_most(len(entries), "entries", limit, "--max-request-items")
        results: list[pb.Status | None] = [None] * len(entries)
        handles, where = [], []
        for i, entry in enumerate(entries):
            try:
                handles.append(Handle.decode(entry.receipt_handle))
                where.append(i)
            except V2Error as exc:
                results[i] = failure_status(exc, "AckMessage")
        for i, error in zip(where, self.pop.ack_many(group, topic, handles), strict=True):
            results[i] = status() if error is None else failure_status(error, "AckMessage")
        return [
            spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
            )
            for entry, result in zip(entries, results, strict=True)
        ]

    @answered(spb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
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
    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        required_client_id(context)
        group = group_name(request.group)
        topic = topic_name(request.topic)
        handle = Handle.decode(request.receipt_handle)
        await self._workers.run(self.pop.forward_to_dlq, group, topic, handle)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
