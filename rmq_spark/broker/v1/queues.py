"""The queue a rocketlite.v1 request names, checked against this broker, and the queue
value its answers carry."""

from __future__ import annotations

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.checks import check_broker_name, non_negative
from rmq_spark.broker.core.messaging import TopicConfig
from rmq_spark.errors import NotFoundError
from rmq_spark.names import validate_topic
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2


def check_queue(
    broker: Broker, pb: common_pb2.MessageQueue, *, must_exist: bool = True
) -> tuple[MessageQueue, TopicConfig | None]:
    """The queue a request names, on this broker, and its topic's config.

    With ``must_exist`` the topic must be on this broker (NOT_FOUND otherwise) and the queue
    id below its read or write queue count; without it only the names and the id are
    checked and the config may be None.
    """
    topic = validate_topic(pb.topic, allow_system=True)
    check_broker_name(broker, pb.broker_name)
    queue_id = non_negative(pb.queue_id, "queue_id")
    config = broker.messaging.topics.find(topic)
    if must_exist:
        if config is None:
            raise NotFoundError(
                f"topic {topic!r} does not exist on broker {broker.name!r}; create it first "
                "or ask the brokers in the topic route"
            )
        queue_count = max(config.read_queue_nums, config.write_queue_nums)
        if queue_id >= queue_count:
            raise NotFoundError(
                f"topic {topic!r} has {queue_count} queues on broker {broker.name!r} "
                f"(0..{queue_count - 1}); queue {queue_id} does not exist"
            )
    return MessageQueue(topic, broker.name, queue_id), config


def queue_pb(broker: Broker, topic: str, queue_id: int) -> common_pb2.MessageQueue:
    """A queue of this broker as answers carry it (broker_name filled in)."""
    return common_pb2.MessageQueue(topic=topic, broker_name=broker.name, queue_id=queue_id)
