"""Producing over v2: SendMessage (NORMAL, FIFO, DELAY and TRANSACTION messages) and
EndTransaction. A message's queue is the broker's choice, as with RocketMQ's proxy: the
Java hash of its message group for FIFO messages, else round robin."""

from __future__ import annotations

import functools

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.ids import RoundRobin, born_host
from rmq_spark.broker.transactions import state as ts
from rmq_spark.broker.v2 import convert
from rmq_spark.broker.v2.codes import Code, V2Error, status
from rmq_spark.broker.v2.requests import (
    answered,
    existing_topic,
    failure_status,
    required_client_id,
    sendable_topic_name,
    topic_name,
)
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms
from rmq_spark.codec.java_hash import queue_by_hash
from rmq_spark.errors import InvalidArgumentError, NotFoundError, shown


class Producing:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._round_robin = RoundRobin()

    @answered(spb.SendMessageResponse)
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        required_client_id(context)
        if not request.messages:
            raise V2Error(Code.BAD_REQUEST, "messages is empty; send at least one message")
        limit = self._broker.config.max_batch_messages
        if len(request.messages) > limit:
            raise V2Error(
                Code.BAD_REQUEST,
                f"the request has {len(request.messages):,} messages; this broker takes at "
                f"most {limit:,} per send (--max-batch-messages): send fewer at a time",
            )
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
        topic = sendable_topic_name(message.topic)
        config = existing_topic(self._broker, topic)
        now = now_ms()
        out = convert.outgoing(message, self._broker.config.max_message_bytes, now)
        convert.check_type(topic, config.message_type, out.message_type)
        queues = config.write_queue_nums
        # as rocketlite.v1 sends with a sharding key: one group, one queue
        if out.message_group:
            queue_id = queue_by_hash(out.message_group, queues)
        else:
            queue_id = self._round_robin.next(topic) % queues
        if out.message_type == "TRANSACTION":
            return self._prepare(message, out, topic, queue_id, peer)
        if out.delivery_ms is not None:
            return self._schedule(out, topic, queue_id, peer, now)
        result = self._broker.writes.put_messages(
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

    def _schedule(
        self, out: convert.Outgoing, topic: str, queue_id: int, peer: str, now_ms: int
    ) -> spb.SendResultEntry:
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

    def _prepare(
        self, message: pb.Message, out: convert.Outgoing, topic: str, queue_id: int, peer: str
    ) -> spb.SendResultEntry:
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
    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> spb.EndTransactionResponse:
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
            end = functools.partial(self._end, transaction_id, commit, topic)
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

    def _end(self, transaction_id: str, commit: bool, topic: str) -> bool:
        """End the transaction if it is ``topic``'s: the access check authorized Pub on
        ``topic`` (the request's), so only a half message of that topic may be ended, and
        exactly the one checked here (``expect``). RocketMQ 5 has no producer group: Pub on
        the topic is what lets a producer end its transactions."""
        transactions = self._broker.transactions
        half = transactions.half(transaction_id)
        if half is not None:
            try:
                ts.check_end(
                    half,
                    producer_group=half.producer_group,
                    commit_log_offset=None,
                    half_queue_offset=None,
                    topic=topic,
                )
            except InvalidArgumentError as exc:
                raise V2Error(Code.INVALID_TRANSACTION_ID, str(exc)) from None
        # No half message: ended already (the outcome is checked by the caller) or unknown.
        return transactions.end(transaction_id, commit, topic=topic, expect=half)

    @answered(spb.RecallMessageResponse)
    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.RecallMessageResponse:
        raise V2Error(Code.NOT_IMPLEMENTED, "delay messages are not served by this broker yet")
