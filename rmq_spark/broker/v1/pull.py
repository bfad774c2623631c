"""PullMessages: a pull request checked against the broker's limits, and its answer."""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import GetResult, Read
from rmq_spark.broker.v1.queues import check_queue
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.filter import Selector
from rmq_spark.names import validate_group
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.wire.pull import encode_pull_response
from rmq_spark.wire.v1 import pull_status_to_pb

DEFAULT_PULL_MESSAGES = 32  # RocketMQ's pullBatchSize default
DEFAULT_PULL_BYTES = 4 << 20


@dataclass(frozen=True)
class PullArgs:
    """A pull request, checked, with defaults and caps applied."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int
    tag_codes: list[int] | None
    selector: Selector | None
    suspend_ms: int
    commit_offset: int | None

    @classmethod
    def from_request(cls, request: messaging_pb2.PullMessagesRequest, broker: Broker) -> PullArgs:
        config = broker.config
        mq, topic_config = check_queue(broker, request.queue)
        assert topic_config is not None
        broker.messaging.check_readable(topic_config, mq.queue_id)
        group = validate_group(request.consumer_group) if request.consumer_group else ""
        commit_offset = None
        if request.HasField("commit_offset"):
            commit_offset = checks.non_negative(request.commit_offset, "commit_offset")
            if not group:
                raise InvalidArgumentError(
                    "commit_offset is set but consumer_group is empty; name the group whose "
                    "offset to commit"
                )
        # tags by hash code only: rocketlite's clients check the tags of what comes back
        found = broker.messaging.read_filter(
            request.expression_type, request.subscription_expression
        )
        return cls(
            group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            offset=checks.non_negative(request.queue_offset, "queue_offset"),
            max_messages=checks.bounded(
                request.max_messages,
                "max_messages",
                DEFAULT_PULL_MESSAGES,
                config.max_pull_messages,
            ),
            max_bytes=checks.bounded(
                request.max_bytes, "max_bytes", DEFAULT_PULL_BYTES, config.max_pull_bytes
            ),
            tag_codes=found.tag_codes,
            selector=found.selector,
            suspend_ms=min(
                checks.non_negative(request.suspend_timeout_ms, "suspend_timeout_ms"),
                config.max_suspend_timeout_ms,
            ),
            commit_offset=commit_offset,
        )

    @property
    def read(self) -> Read:
        """What the broker core reads for this pull."""
        return Read(
            self.topic,
            self.queue_id,
            self.offset,
            self.max_messages,
            self.max_bytes,
            self.tag_codes,
            self.selector,
            self.group,
        )


def pull_response(result: GetResult) -> bytes:
    """The serialised PullMessagesResponse of ``result``: the bytes gRPC sends as they are
    (the service registers PullMessages with a pass-through serialiser)."""
    return encode_pull_response(
        pull_status_to_pb(result.status),
        result.next_begin_offset,
        result.min_offset,
        result.max_offset,
        result.data,
        result.sizes,
        result.queue_offsets,
    )
