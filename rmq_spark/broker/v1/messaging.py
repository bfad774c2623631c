"""MessagingService: writes and reads of the message log (docs/protocol.md, "Messaging").

The servicer checks requests, calls the broker core
(:class:`~rmq_spark.broker.core.messaging.MessagingCore`, writes through its write path) and
builds answers; the conversions live in the small functions below it.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
from google.protobuf import message_factory

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.ids import RoundRobin, UniqueIdGenerator, born_host
from rmq_spark.broker.core.key_query import DEFAULT_MAX_COUNT, NO_END_MS
from rmq_spark.broker.core.messaging import AppendResult, GetResult, MessagingCore, TopicConfig
from rmq_spark.broker.delivery import retry
from rmq_spark.broker.v1.admission import ByteBudget
from rmq_spark.broker.v1.pull import PullArgs, pull_response
from rmq_spark.broker.v1.queues import check_queue, queue_pb
from rmq_spark.broker.v1.send import (
    SendBatch,
    check_batch_size,
    check_writable,
    send_response,
)
from rmq_spark.broker.v1.send_columns import ColumnBatch
from rmq_spark.broker.v1.status import blocking, waiting
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.java_hash import queue_by_hash
from rmq_spark.codec.record import (
    encode_host,
    offset_msg_id_prefix,
    parse_offset_msg_id,
)
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.names import retry_topic, validate_group, validate_message_key, validate_topic
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._core = broker.messaging
        self._workers = workers
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)
        self._send_budget = ByteBudget(broker.config.max_inflight_send_bytes)

    @waiting
    async def SendMessages(
        self, request: messaging_pb2.SendMessagesRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.SendMessagesResponse:
        # Admitted by size first: the waiting happens here, on the loop, holding no thread.
        async with self._send_budget.reserve(request.ByteSize()):
            return await self._workers.run(self._send, request, context.peer())

    def _send(
        self, request: messaging_pb2.SendMessagesRequest, peer: str
    ) -> messaging_pb2.SendMessagesResponse:
        broker = self._broker
        # %RETRY%/%DLQ% names and the delay topic: INVALID_ARGUMENT (the naming rule, with
        # a hint); the broker's other topics: PERMISSION_DENIED from topic_for_write below.
        topic = checks.sendable_topic(request.topic)
        check_batch_size(request, broker.config)
        delay_levels = len(broker.config.delay_levels_ms)
        columnar = request.HasField("columns")
        batch: SendBatch | ColumnBatch
        encoded: ByteColumn | list[bytes]
        if columnar:
            if request.messages:
                raise InvalidArgumentError(
                    f"the request has both messages ({len(request.messages)}) and columns; "
                    "send a batch as one or the other"
                )
            batch = ColumnBatch.from_request(request, delay_levels, broker.config.max_message_bytes)
            encoded = batch.properties
        else:
            batch = SendBatch.from_request(request, delay_levels)
            msg_ids = batch.fill_unique_ids(self._unique_ids)
            encoded = batch.encode_properties(msg_ids)
        config = broker.writes.topic_for_write(topic)
        check_writable(config)
        queue_id = self._select_queue(request, config)
        if request.HasField("stage"):
            return self._stage(request, topic, queue_id, batch, peer)
        fields: dict[str, Any] = {
            "born_host": born_host(peer),
            "born_timestamps": batch.born_timestamps,
            "flags": batch.flags,
        }
        if batch.delay_level:
            result = broker.delays.submit(
                topic, queue_id, batch.bodies, encoded, batch.tags, batch.delay_level, **fields
            )
        else:
            result = broker.writes.put_messages(
                topic, queue_id, batch.bodies, encoded, batch.tags, **fields
            )
        if columnar:
            return self._columns_response(topic, queue_id, result, delayed=bool(batch.delay_level))
        return send_response(
            broker, topic, queue_id, msg_ids, result, delayed=bool(batch.delay_level)
        )

    def _stage(
        self,
        request: messaging_pb2.SendMessagesRequest,
        topic: str,
        queue_id: int,
        batch: SendBatch | ColumnBatch,
        peer: str,
    ) -> messaging_pb2.SendMessagesResponse:
        if not isinstance(batch, ColumnBatch):
            raise InvalidArgumentError(
                "a staged send (stage) must carry its messages as columns, not messages"
            )
        broker = self._broker
        first = broker.sinks.stage(request.stage, topic, queue_id, batch, born_host(peer))
        response = messaging_pb2.SendMessagesResponse(queue=queue_pb(broker, topic, queue_id))
        response.columns_result.first_queue_offset = first
        return response

    @blocking
    def EndSinkBatch(
        self, request: messaging_pb2.EndSinkBatchRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.EndSinkBatchResponse:
        decision = {
            part.broker_name: [(t.transaction_id, t.messages) for t in part.transactions]
            for part in request.decision
        }
        plan, committed, last = self._broker.sinks.end(
            request.sink_id, request.batch_id, request.commit, decision
        )
        return messaging_pb2.EndSinkBatchResponse(
            already_committed=plan.already,
            decision=[
                messaging_pb2.SinkBrokerPart(
                    broker_name=name,
                    transactions=[
                        messaging_pb2.SinkTransactionCount(transaction_id=t, messages=n)
                        for t, n in parts
                    ],
                )
                for name, parts in plan.decision.items()
            ],
            committed_messages=committed,
            rolled_back_transactions=len(plan.rollback),
            last_committed_batch=last,
        )

    @waiting
    async def PullMessages(
        self, request: messaging_pb2.PullMessagesRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        # The answer is a serialised PullMessagesResponse (see add_to_server).
        pull, result, answer = await self._workers.run(self._pull_once, request)
        if answer is None:  # nothing new yet: hold the pull on the loop
            result = await self._hold(pull, result)
            if result.count:  # building the answer copies the records: off the loop
                answer = await self._workers.run(pull_response, result)
            else:
                answer = pull_response(result)
        # Counted on the event loop, the only place that changes them: no lock.
        self._broker.pull_calls += 1
        self._broker.messages_pulled += result.count
        return answer

    def _pull_once(
        self, request: messaging_pb2.PullMessagesRequest
    ) -> tuple[PullArgs, GetResult, bytes | None]:
        """Read once; the (serialised) answer too, in the same worker hop, unless the pull
        is to be held (then None)."""
        pull = PullArgs.from_request(request, self._broker)
        if pull.commit_offset is not None:
            self._core.commit_offsets(
                pull.group, pull.topic, {pull.queue_id: pull.commit_offset}, increase_only=True
            )
        result = self._core.read(pull.read)
        if result.status == PullStatus.NO_NEW_MSG and pull.suspend_ms > 0:
            return pull, result, None
        return pull, result, pull_response(result)

    @blocking
    def QueryOffsets(
        self, request: messaging_pb2.QueryOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.QueryOffsetsResponse:
        broker = self._broker
        if not request.queries:
            raise InvalidArgumentError("queries is empty; list at least one queue")
        limit = broker.config.max_request_items
        checks.at_most(len(request.queries), "queries", limit, "--max-request-items")
        checked = []
        for i, query in enumerate(request.queries):
            with checks.item(f"queries[{i}]"):
                mq, _ = check_queue(broker, query.queue)
                timestamp = query.timestamp_ms if query.HasField("timestamp_ms") else None
                if timestamp is not None:
                    checks.non_negative(timestamp, "timestamp_ms")
                size = _size_query(query)
            checked.append((mq, timestamp, size))
        return messaging_pb2.QueryOffsetsResponse(
            offsets=[_queue_offsets(self._core, mq, ts, size) for mq, ts, size in checked]
        )

    @blocking
    def ViewMessage(
        self, request: messaging_pb2.ViewMessageRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.ViewMessageResponse:
        physical = _physical_offset(self._broker, request.message)
        return messaging_pb2.ViewMessageResponse(record=self._core.record_at(physical))

    @blocking
    def QueryMessagesByKey(
        self,
        request: messaging_pb2.QueryMessagesByKeyRequest,
        context: grpc.aio.ServicerContext,
    ) -> messaging_pb2.QueryMessagesByKeyResponse:
        broker = self._broker
        topic = validate_topic(request.topic, allow_system=True)
        key = validate_message_key(request.key)
        limit = broker.config.max_pull_messages
        count = checks.bounded(request.max_count, "max_count", DEFAULT_MAX_COUNT, limit)
        begin = checks.non_negative(request.begin_timestamp_ms, "begin_timestamp_ms")
        end = NO_END_MS
        if request.HasField("end_timestamp_ms"):
            end = checks.non_negative(request.end_timestamp_ms, "end_timestamp_ms")
        budget = broker.config.max_pull_bytes
        found = self._core.find_by_key(
            topic, key, count, begin, end, max_bytes=budget, exact_times=True
        )
        return messaging_pb2.QueryMessagesByKeyResponse(records=found.records, more=found.more)

    @blocking
    def ConsumerSendBack(
        self,
        request: messaging_pb2.ConsumerSendBackRequest,
        context: grpc.aio.ServicerContext,
    ) -> messaging_pb2.ConsumerSendBackResponse:
        """Write the copy to ``%RETRY%`` (delayed) or ``%DLQ%``."""
        core = self._core
        group = validate_group(request.consumer_group)
        if not core.writes.writable:
            # PermissionDeniedError, creating nothing
            core.writes.topic_for_write(retry_topic(group))
        if request.original_topic:
            validate_topic(request.original_topic, allow_system=True)
        record, msg_id = core.find_record(*_record_ref(request.message))
        # The access check authorized the group and original_topic: the copied record must
        # be one of theirs.
        retry.check_send_back_source(record.topic, group, request.original_topic)
        plan = retry.plan_send_back(
            record,
            group=group,
            record_msg_id=msg_id,
            original_topic=request.original_topic,
            delay_level=request.delay_level,
            max_reconsume_times=request.max_reconsume_times or core.retry_max_times(group),
            dead_letter_now=request.dead_letter_now,
            consumer_reconsume_times=request.reconsume_times,
        )
        result, level = core.send_back(record, plan)
        return messaging_pb2.ConsumerSendBackResponse(
            queue=queue_pb(self._broker, plan.topic, 0),
            dead_lettered=plan.dead_lettered,
            reconsume_times=plan.reconsume_times,
            delay_level=level,
            offset_msg_id=result.msg_ids(core.writes.store_host)[0],
        )

    # -- helpers that need the servicer's state ---------------------------------------------

    def _columns_response(
        self, topic: str, queue_id: int, result: AppendResult, *, delayed: bool
    ) -> messaging_pb2.SendMessagesResponse:
        broker = self._broker
        response = messaging_pb2.SendMessagesResponse(
            queue=queue_pb(broker, topic, queue_id),
            store_timestamp_ms=result.store_timestamp,
        )
        answer = response.columns_result
        if not delayed:
            answer.first_queue_offset = result.first_queue_offset
        answer.physical_offsets.extend(result.physical_offsets.tolist())
        answer.offset_msg_id_prefix = self._offset_msg_id_prefix
        return response

    @functools.cached_property
    def _offset_msg_id_prefix(self) -> str:
        return offset_msg_id_prefix(self._broker.store_host)

    def _select_queue(self, request: messaging_pb2.SendMessagesRequest, config: TopicConfig) -> int:
        count = config.write_queue_nums
        selector = request.WhichOneof("queue_selector")
        if selector == "queue_id":
            if not 0 <= request.queue_id < count:
                raise InvalidArgumentError(
                    f"queue_id={request.queue_id} is out of range for topic {config.name!r}: "
                    f"it has {count} write queues (0..{count - 1})"
                )
            return request.queue_id
        if selector == "sharding_key":
            if not request.sharding_key:
                raise InvalidArgumentError(
                    "sharding_key is empty; give a key, a queue_id, or neither (round robin)"
                )
            return queue_by_hash(request.sharding_key, count)
        return self._round_robin.next(config.name) % count

    async def _hold(self, pull: PullArgs, result: GetResult) -> GetResult:
        """Long polling (:meth:`MessagingCore.hold`): wait for a message
        that passes the filter, up to the suspend time; a cancelled call stops waiting."""
        return await self._core.hold(self._workers.run, pull.read, result, pull.suspend_ms / 1000)


def add_to_server(servicer: MessagingServicer, server: grpc.aio.Server) -> None:
    """Register ``servicer`` as the generated ``add_MessagingServiceServicer_to_server``
    does, except that PullMessages answers are already serialised (:func:`pull_response`
    builds the wire bytes, copying the records once) and go out as they are."""
    service = messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=request.FromString,
            response_serializer=(
                _serialised if method.name == "PullMessages" else response.SerializeToString
            ),
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


def _serialised(answer: bytes | messaging_pb2.PullMessagesResponse) -> bytes:
    """The wire bytes of a PullMessages answer: built already, or a message to serialise."""
    return answer if isinstance(answer, bytes) else answer.SerializeToString()


# -- QueryOffsets and ViewMessage -----------------------------------------------------------


def _size_query(
    query: messaging_pb2.QueueOffsetsQuery,
) -> tuple[int, int | None, int | None] | None:
    """(from, to, budget) of a query that asks to measure a range, checked; else None."""
    if not query.HasField("size_from_offset"):
        if query.HasField("size_to_offset") or query.HasField("size_budget_bytes"):
            raise InvalidArgumentError(
                "size_to_offset and size_budget_bytes need size_from_offset (where the "
                "measured range starts)"
            )
        return None
    start = checks.non_negative(query.size_from_offset, "size_from_offset")
    end = budget = None
    if query.HasField("size_to_offset"):
        end = checks.non_negative(query.size_to_offset, "size_to_offset")
    if query.HasField("size_budget_bytes"):
        budget = checks.non_negative(query.size_budget_bytes, "size_budget_bytes")
    return start, end, budget


def _queue_offsets(
    core: MessagingCore,
    mq: MessageQueue,
    timestamp: int | None,
    size: tuple[int, int | None, int | None] | None,
) -> messaging_pb2.QueueOffsets:
    low, high = core.queue_range(mq.topic, mq.queue_id)
    answer = messaging_pb2.QueueOffsets(
        queue=common_pb2.MessageQueue(topic=mq.topic, broker_name=core.name, queue_id=mq.queue_id),
        min_offset=low,
        max_offset=high,
    )
    if timestamp is not None:
        answer.timestamp_offset = core.offset_at(mq.topic, mq.queue_id, timestamp)
    if size is not None:
        start, end, budget = size
        measured = core.range_size(mq.topic, mq.queue_id, start, end, budget)
        answer.size_bytes = measured.size_bytes
        answer.size_estimated = measured.estimated
        if measured.budget_count is not None:
            answer.budget_end_offset = max(start, answer.min_offset) + measured.budget_count
    return answer


def _physical_offset(broker: Broker, ref: messaging_pb2.MessageRef) -> int:
    """The physical offset a MessageRef names, on this broker."""
    physical, host = _record_ref(ref)
    if host is None:
        return physical
    if encode_host(host) != encode_host(broker.store_host):  # packed: one spelling per address
        raise NotFoundError(
            f"offset message id {ref.offset_msg_id} names store host {host}, but this broker "
            f"({broker.name!r}) stores as {broker.store_host}; ask that broker"
        )
    return checks.non_negative(physical, "physical offset of offset_msg_id")


def _record_ref(ref: messaging_pb2.MessageRef) -> tuple[int, str | None]:
    """The physical offset a MessageRef names, and the store host its id names (None for
    a bare physical offset)."""
    which = ref.WhichOneof("ref")
    if which == "offset_msg_id":
        host, physical = parse_offset_msg_id(ref.offset_msg_id)
        return physical, host
    if which == "physical_offset":
        return checks.non_negative(ref.physical_offset, "physical_offset"), None
    raise InvalidArgumentError("message names no record; set offset_msg_id or physical_offset")
