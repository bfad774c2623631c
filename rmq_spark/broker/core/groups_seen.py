"""Which groups consume which topics, as the broker sees them: from the committed offsets
and from the subscriptions of the groups' live members. Status calls of every protocol
(rocketlite.v1's progress, mqadmin's consumerProgress and topicList -c) answer from here."""

from __future__ import annotations

from rmq_spark.broker.core.broker import Broker
from rmq_spark.names import retry_topic
from rmq_spark.structs import MessageQueue


def committed_queues(broker: Broker, group: str) -> list[MessageQueue]:
    """Every queue where ``group`` has a committed offset on this broker, sorted."""
    snapshot = broker.messaging.offsets.snapshot()
    return sorted(
        MessageQueue(topic, broker.name, queue_id)
        for (topic, name), queues in snapshot.items()
        if name == group
        for queue_id in queues
    )


def progress_topics(broker: Broker, group: str) -> list[str]:
    """Topics to report for ``group``: those with commits, those its live members subscribe
    to, and its retry topic, each only if it exists on this broker; sorted."""
    topics = set(broker.messaging.offsets.topics_of_group(group))
    for client_id in broker.consumers.members(group):
        info = broker.consumers.consumer_info(group, client_id)
        if info is not None:
            topics.update(topic for topic, _ in info.subscriptions)
    topics.add(retry_topic(group))
    return sorted(t for t in topics if broker.messaging.topics.find(t) is not None)


def consuming_groups(broker: Broker, topic: str) -> list[str]:
    """Groups that consume ``topic``: those with commits on it and those whose live members
    subscribe to it (RocketMQ's queryTopicConsumeByWho); sorted."""
    groups = set(broker.messaging.offsets.groups_of_topic(topic))
    registry = broker.consumers
    for group in registry.groups():
        for client_id in registry.members(group):
            info = registry.consumer_info(group, client_id)
            if info is not None and any(t == topic for t, _ in info.subscriptions):
                groups.add(group)
                break
    return sorted(groups)
