"""OffsetService: consumer-group offsets kept by this broker (docs/protocol.md, "Offsets").

The table itself is :class:`rmq_spark.offsets.broker_table.ConsumerOffsetTable`
(``broker.messaging.offsets``); this module checks requests against it and the topic table.
A committed offset is the next offset to consume; "never committed" is an absent field,
never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import grpc

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.groups_seen import committed_queues, progress_topics
from rmq_spark.broker.v1.queues import check_queue, queue_pb
from rmq_spark.broker.v1.status import blocking
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.names import validate_group, validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, offsets_pb2, offsets_pb2_grpc


class OffsetServicer(offsets_pb2_grpc.OffsetServiceServicer):
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._item_limit = broker.config.max_request_items

    @blocking
    def UpdateConsumerOffsets(
        self, request: offsets_pb2.UpdateConsumerOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.UpdateConsumerOffsetsResponse:
        group = validate_group(request.consumer_group)
        if not request.offsets:
            raise InvalidArgumentError("offsets is empty; list at least one queue to commit")
        checks.at_most(len(request.offsets), "offsets", self._item_limit, "--max-request-items")
        wanted = self._checked_commits(request.offsets)
        by_topic: dict[str, dict[int, int]] = defaultdict(dict)
        for mq, offset in wanted.items():
            by_topic[mq.topic][mq.queue_id] = offset
        stored = {
            topic: self._broker.messaging.offsets.commit(
                group, topic, offsets, increase_only=request.increase_only
            )
            for topic, offsets in by_topic.items()
        }
        return offsets_pb2.UpdateConsumerOffsetsResponse(
            results=[
                offsets_pb2.CommittedOffset(
                    queue=queue_pb(self._broker, mq.topic, mq.queue_id),
                    offset=stored[mq.topic][mq.queue_id],
                    updated=stored[mq.topic][mq.queue_id] == offset,
                )
                for mq, offset in wanted.items()
            ]
        )

    @blocking
    def QueryConsumerOffsets(
        self, request: offsets_pb2.QueryConsumerOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.QueryConsumerOffsetsResponse:
        group = validate_group(request.consumer_group)
        if request.queues:
            checks.at_most(len(request.queues), "queues", self._item_limit, "--max-request-items")
            queues = self._checked_queries(request.queues)
        else:
            queues = committed_queues(self._broker, group)
        committed: dict[str, dict[int, int]] = {}
        for topic in {mq.topic for mq in queues}:
            committed[topic] = self._broker.messaging.offsets.query(group, topic)
        answers = []
        for mq in queues:
            answer = offsets_pb2.ConsumerOffset(queue=queue_pb(self._broker, mq.topic, mq.queue_id))
            offset = committed[mq.topic].get(mq.queue_id)
            if offset is not None:
                answer.offset = offset
            answers.append(answer)
        return offsets_pb2.QueryConsumerOffsetsResponse(offsets=answers)

    @blocking
    def GetConsumerProgress(
        self, request: offsets_pb2.GetConsumerProgressRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.GetConsumerProgressResponse:
        group = validate_group(request.consumer_group)
        if request.topic:
            topics = [validate_topic(request.topic, allow_system=True)]
            if self._broker.messaging.topics.find(topics[0]) is None:
                raise NotFoundError(
                    f"topic {topics[0]!r} does not exist on broker {self._broker.name!r}"
                )
        else:
            topics = progress_topics(self._broker, group)
        progress = [q for topic in topics for q in queue_progress(self._broker, group, topic)]
        return offsets_pb2.GetConsumerProgressResponse(
            queues=progress, total_lag=sum(q.lag for q in progress)
        )

    # -- request checks --------------------------------------------------------------------

    def _checked_commits(self, items: Iterable[offsets_pb2.QueueOffset]) -> dict[MessageQueue, int]:
        """Every item checked before any is applied: queue on this broker, offset >= 0."""
        wanted: dict[MessageQueue, int] = {}
        for i, item in enumerate(items):
            with checks.item(f"offsets[{i}]"):
                mq, _ = check_queue(self._broker, item.queue)
                checks.non_negative(item.offset, "offset")
                if mq in wanted:
                    raise InvalidArgumentError(
                        f"queue {mq.queue_id} of topic {mq.topic!r} is listed twice; commit "
                        "each queue once per call"
                    )
            wanted[mq] = item.offset
        return wanted

    def _checked_queries(self, items: Iterable[common_pb2.MessageQueue]) -> list[MessageQueue]:
        # A topic that is not here has no offsets: that answers "absent", not an error.
        queues = []
        for i, pb in enumerate(items):
            with checks.item(f"queues[{i}]"):
                mq, _ = check_queue(self._broker, pb, must_exist=False)
            queues.append(mq)
        return queues


def queue_progress(broker: Broker, group: str, topic: str) -> list[offsets_pb2.QueueProgress]:
    """Progress of ``group`` on every readable queue of ``topic``, plus any queue beyond them
    where it still has a commit (a topic whose read count was lowered)."""
    store = broker.messaging
    config = store.topics.get(topic)
    committed = store.offsets.query(group, topic)
    queue_count = max(config.read_queue_nums, config.write_queue_nums)
    queue_ids = sorted(
        set(range(config.read_queue_nums)) | {q for q in committed if q < queue_count}
    )
    answers = []
    for queue_id in queue_ids:
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        answer = offsets_pb2.QueueProgress(
            queue=queue_pb(broker, topic, queue_id),
            broker_min_offset=low,
            broker_max_offset=high,
        )
        offset = committed.get(queue_id)
        if offset is not None:
            answer.committed_offset = offset
        answer.lag = max(0, high - max(low, offset if offset is not None else low))
        answers.append(answer)
    return answers
