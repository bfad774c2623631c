"""The offset calls of ``apache.rocketmq.v2`` (``GetOffset``, ``UpdateOffset``,
``QueryOffset``, ``PullMessage``) over the store and the consumer-offset table, so a v2
pull consumer sees the same committed offsets as ``rocketlite offsets``, our own consumers
and the Spark source (RocketMQ's own proxy leaves these calls unimplemented)."""

from __future__ import annotations

import functools

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.broker.core import long_poll
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.v1.pull import check_readable
from rmq_spark.broker.v2 import convert
from rmq_spark.broker.v2.codes import Code, V2Error, status
from rmq_spark.broker.v2.requests import (
    existing_topic,
    filter_tag_codes,
    group_name,
    topic_name,
)
from rmq_spark.codec.record import iter_records
from rmq_spark.structs import PullStatus

MAX_PULL_BATCH = 1024
MAX_PULL_BYTES = 4 << 20
MAX_PULL_WAIT_MS = 20_000


class OffsetsApi:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def _queue(self, mq: pb.MessageQueue) -> tuple[str, int]:
        topic = topic_name(mq.topic, allow_system=True)
        config = existing_topic(self._broker, topic)
        if not 0 <= mq.id < config.read_queue_nums:
            raise V2Error(
                Code.BAD_REQUEST,
                f"topic {topic} has {config.read_queue_nums} readable queues; queue {mq.id} "
                "is not one of them",
            )
        return topic, mq.id

    def get(self, request) -> int:
        group = group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        offset = self._broker.store.offsets.query_one(group, topic, queue_id)
        if offset is None:
            raise V2Error(
                Code.OFFSET_NOT_FOUND,
                f"group {group} has no committed offset for {topic} queue {queue_id}",
            )
        return offset

    def update(self, request) -> None:
        group = group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        store = self._broker.store
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if not low <= request.offset <= high:
            raise V2Error(
                Code.ILLEGAL_OFFSET,
                f"offset {request.offset} is outside {topic} queue {queue_id}'s range "
                f"[{low}, {high}]",
            )
        store.offsets.commit(group, topic, {queue_id: request.offset})

    def query(self, request) -> int:
        topic, queue_id = self._queue(request.message_queue)
        store = self._broker.store
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            return store.min_offset(topic, queue_id)
        if policy == pb.END:
            return store.max_offset(topic, queue_id)
        if not request.HasField("timestamp"):
            raise V2Error(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
        return store.offset_by_timestamp(topic, queue_id, request.timestamp.ToMilliseconds())

    async def pull(self, request, workers) -> list[spb.PullMessageResponse]:
        """One pull: a status frame, the messages, then the next offset to pull from. As a
        rocketlite.v1 pull: FORBIDDEN when the broker or the topic does not allow reads,
        and a long poll waits for a message that passes the filter."""
        group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        check_readable(self._broker, existing_topic(self._broker, topic), queue_id)
        if request.filter_expression.type == pb.SQL:
            raise V2Error(Code.NOT_IMPLEMENTED, "SQL92 filters are not supported; filter by tag")
        tag_codes = filter_tag_codes(request.filter_expression.expression, self._broker)
        if request.offset < 0:
            raise V2Error(Code.ILLEGAL_OFFSET, f"offset {request.offset} must be >= 0")
        batch = min(request.batch_size or 32, MAX_PULL_BATCH)
        store = self._broker.store

        def read(offset: int):
            return store.get_messages(topic, queue_id, offset, batch, MAX_PULL_BYTES, tag_codes)

        result = await workers.run(read, request.offset)
        wait_ms = min(request.long_polling_timeout.ToMilliseconds(), MAX_PULL_WAIT_MS)
        if result.status == PullStatus.NO_NEW_MSG and wait_ms > 0:
            result = await long_poll.hold(
                self._broker.notifier,
                topic,
                queue_id,
                request.offset,
                wait_ms / 1000,
                max_offset=functools.partial(store.max_offset, topic, queue_id),
                read=functools.partial(workers.run, read),
                result=result,
            )
        if result.status == PullStatus.OFFSET_ILLEGAL:
            head = status(
                Code.ILLEGAL_OFFSET,
                f"offset {request.offset} is outside [{result.min_offset}, "
                f"{result.max_offset}]; pull from {result.next_begin_offset}",
            )
        elif result.status == PullStatus.FOUND:
            head = status()
        else:
            head = status(Code.MESSAGE_NOT_FOUND, "no new message")
        out = [spb.PullMessageResponse(status=head)]
        if result.status == PullStatus.FOUND:
            records = await workers.run(lambda: list(iter_records(result.data)))
            out.extend(
                spb.PullMessageResponse(message=convert.incoming(r, topic=topic)) for r in records
            )
        out.append(spb.PullMessageResponse(next_offset=result.next_begin_offset))
        return out
