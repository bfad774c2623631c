"""What a route says about each queue of a topic, for every protocol's route answers."""

from __future__ import annotations

from rmq_spark.broker.core.messaging import TopicConfig
from rmq_spark.structs import Permission


def queue_perm(config: TopicConfig, queue_id: int, broker_perm: int) -> int:
    """What clients may do with one queue: its place among the read / write queues,
    narrowed by the topic's and the broker's permission (0 = nothing)."""
    perm = (Permission.READ if queue_id < config.read_queue_nums else 0) | (
        Permission.WRITE if queue_id < config.write_queue_nums else 0
    )
    return int(perm) & config.perm & broker_perm
