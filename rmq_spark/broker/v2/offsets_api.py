"""The offset calls of ``apache.rocketmq.v2`` (``GetOffset``, ``UpdateOffset``,
``QueryOffset``, ``PullMessage``) over the store and the consumer-offset table, so a v2
pull consumer sees the same committed offsets as ``rocketlite offsets``, our own consumers
and the Spark source (RocketMQ's own proxy leaves these calls unimplemented)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import Read
from rmq_spark.broker.v2 import convert
from rmq_spark.broker.v2.codes import Code, V2Error, status
from rmq_spark.broker.v2.requests import (
    existing_topic,
    group_name,
    read_filter,
    topic_name,
)
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.record import iter_records
from rmq_spark.structs import PullStatus

MAX_PULL_BATCH = 1024
MAX_PULL_BYTES = 4 << 20
MAX_PULL_WAIT_MS = 20_000


class OffsetsApi:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._core = broker.messaging

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

    def get(self, request: spb.GetOffsetRequest) -> int:
        group = group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        offset = self._core.committed(group, topic, queue_id)
        if offset is None:
            raise V2Error(
                Code.OFFSET_NOT_FOUND,
                f"group {group} has no committed offset for {topic} queue {queue_id}",
            )
        return offset

    def update(self, request: spb.UpdateOffsetRequest) -> None:
        group = group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        low, high = self._core.queue_range(topic, queue_id)
        if not low <= request.offset <= high:
            raise V2Error(
                Code.ILLEGAL_OFFSET,
                f"offset {request.offset} is outside {topic} queue {queue_id}'s range "
                f"[{low}, {high}]",
            )
        self._core.commit_offsets(group, topic, {queue_id: request.offset})

    def query(self, request: spb.QueryOffsetRequest) -> int:
        topic, queue_id = self._queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            return self._core.min_offset(topic, queue_id)
        if policy == pb.END:
            return self._core.max_offset(topic, queue_id)
        if not request.HasField("timestamp"):
            raise V2Error(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
        return self._core.offset_at(topic, queue_id, request.timestamp.ToMilliseconds())

    async def pull(
        self, request: spb.PullMessageRequest, workers: Workers
    ) -> list[spb.PullMessageResponse]:
        """One pull: a status frame, the messages, then the next offset to pull from. As a
        rocketlite.v1 pull: FORBIDDEN when the broker or the topic does not allow reads,
        and a long poll waits for a message that passes the filter."""
        group = group_name(request.group)
        topic, queue_id = self._queue(request.message_queue)
        self._core.check_readable(existing_topic(self._broker, topic), queue_id)
        tag_codes, selector = read_filter(request.filter_expression, self._broker)
        if request.offset < 0:
            raise V2Error(Code.ILLEGAL_OFFSET, f"offset {request.offset} must be >= 0")
        batch = min(request.batch_size or 32, MAX_PULL_BATCH)
        read = Read(
            topic, queue_id, request.offset, batch, MAX_PULL_BYTES, tag_codes, selector,
            group,
        )  # fmt: skip
        wait_ms = min(request.long_polling_timeout.ToMilliseconds(), MAX_PULL_WAIT_MS)
        result = await self._core.pull(workers.run, read, wait_ms / 1000)
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
