"""MessagingService: writes and reads of the message log (docs/protocol.md, "Messaging").

The servicer checks requests, calls the store or :class:`~rmq_spark.broker.core.broker.Broker`, and
builds answers; the conversions live in the small functions below it.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
from google.protobuf import message_factory

from rmq_spark.broker.core import checks, long_poll
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.ids import RoundRobin, UniqueIdGenerator, born_host
from rmq_spark.broker.core.key_query import DEFAULT_MAX_COUNT, NO_END_MS, find_by_key
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
    FIXED_WITHOUT_HOSTS,
    IPV4_HOST,
    POS_PHYSICALOFFSET,
    encode_host,
    offset_msg_id_prefix,
    parse_offset_msg_id,
)
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.names import validate_message_key, validate_topic
from rmq_spark.proto_gen.rocketlite.v1 import messaging_pb2, messaging_pb2_grpc
from rmq_spark.store.message_store import GetResult
from rmq_spark.store.topics import TopicConfig
from rmq_spark.structs import PullStatus

MIN_RECORD_BYTES = FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST  # empty body, topic and properties


class MessagingServicer(messaging_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)
        self._send_budget = ByteBudget(broker.config.max_inflight_send_bytes)

    @waiting
    async def SendMessages(self, request, context):
        # Admitted by size first: the waiting happens here, on the loop, holding no thread.
        async with self._send_budget.reserve(request.ByteSize()):
            return await self._workers.run(self._send, request, context.peer())

    def _send(self, request, peer: str):
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
        config = broker.topic_for_write(topic)
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
            result = broker.put_messages(
                topic, queue_id, batch.bodies, encoded, batch.tags, **fields
            )
        if columnar:
            return self._columns_response(topic, queue_id, result, delayed=bool(batch.delay_level))
        return send_response(
            broker, topic, queue_id, msg_ids, result, delayed=bool(batch.delay_level)
        )

    def _stage(self, request, topic: str, queue_id: int, batch, peer: str):
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
    def EndSinkBatch(self, request, context):
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
    async def PullMessages(self, request, context) -> bytes:
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

    def _pull_once(self, request) -> tuple[PullArgs, GetResult, bytes | None]:
        """Read once; the (serialised) answer too, in the same worker hop, unless the pull
        is to be held (then None)."""
        store = self._broker.store
        pull = PullArgs.from_request(request, self._broker)
        if pull.commit_offset is not None:
            store.offsets.commit(
                pull.group, pull.topic, {pull.queue_id: pull.commit_offset}, increase_only=True
            )
        result = pull.read(store, pull.offset)
        if result.status == PullStatus.NO_NEW_MSG and pull.suspend_ms > 0:
            return pull, result, None
        return pull, result, pull_response(result)

    @blocking
    def QueryOffsets(self, request, context):
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
            offsets=[_queue_offsets(broker, mq, ts, size) for mq, ts, size in checked]
        )

    @blocking
    def ViewMessage(self, request, context):
        physical = _physical_offset(self._broker, request.message)
        return messaging_pb2.ViewMessageResponse(record=_read_record(self._broker, physical))

    @blocking
    def QueryMessagesByKey(self, request, context):
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
        found = find_by_key(
            broker, topic, key, count, begin, end, max_bytes=budget, exact_times=True
        )
        return messaging_pb2.QueryMessagesByKeyResponse(records=found.records, more=found.more)

    @blocking
    def ConsumerSendBack(self, request, context):
        return retry.send_back(self._broker, request, context)

    # -- helpers that need the servicer's state ---------------------------------------------

    def _columns_response(
        self, topic: str, queue_id: int, result, *, delayed: bool
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

    def _select_queue(self, request, config: TopicConfig) -> int:
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
        """Long polling (:func:`rmq_spark.broker.core.long_poll.hold`): wait for a message
        that passes the filter, up to the suspend time; a cancelled call stops waiting."""
        store = self._broker.store
        return await long_poll.hold(
            self._broker.notifier,
            pull.topic,
            pull.queue_id,
            pull.offset,
            pull.suspend_ms / 1000,
            max_offset=functools.partial(store.max_offset, pull.topic, pull.queue_id),
            read=lambda offset: self._workers.run(pull.read, store, offset),
            result=result,
        )


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


def _size_query(query) -> tuple[int, int | None, int | None] | None:
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
    broker: Broker, mq, timestamp: int | None, size: tuple[int, int | None, int | None] | None
) -> messaging_pb2.QueueOffsets:
    store = broker.store
    answer = messaging_pb2.QueueOffsets(
        queue=queue_pb(broker, mq.topic, mq.queue_id),
        min_offset=store.min_offset(mq.topic, mq.queue_id),
        max_offset=store.max_offset(mq.topic, mq.queue_id),
    )
    if timestamp is not None:
        answer.timestamp_offset = store.offset_by_timestamp(mq.topic, mq.queue_id, timestamp)
    if size is not None:
        start, end, budget = size
        measured = store.range_size(mq.topic, mq.queue_id, start, end, budget)
        answer.size_bytes = measured.size_bytes
        answer.size_estimated = measured.estimated
        if measured.budget_count is not None:
            answer.budget_end_offset = max(start, answer.min_offset) + measured.budget_count
    return answer


def _physical_offset(broker: Broker, ref) -> int:
    """The physical offset a MessageRef names, on this broker."""
    kind = ref.WhichOneof("ref")
    if kind == "physical_offset":
        return checks.non_negative(ref.physical_offset, "physical_offset")
    if kind != "offset_msg_id":
        raise InvalidArgumentError("message names no record; set offset_msg_id or physical_offset")
    host, physical = parse_offset_msg_id(ref.offset_msg_id)
    if encode_host(host) != encode_host(broker.store_host):  # packed: one spelling per address
        raise NotFoundError(
            f"offset message id {ref.offset_msg_id} names store host {host}, but this broker "
            f"({broker.name!r}) stores as {broker.store_host}; ask that broker"
        )
    return checks.non_negative(physical, "physical offset of offset_msg_id")


def _read_record(broker: Broker, physical: int) -> bytes:
    record = broker.store.read_record(physical)
    # A record always carries its own position; anything else is bytes inside another one.
    stored = int.from_bytes(record[POS_PHYSICALOFFSET : POS_PHYSICALOFFSET + 8], "big", signed=True)
    if len(record) < MIN_RECORD_BYTES or stored != physical:
        raise NotFoundError(f"no message starts at physical offset {physical}")
    return record
