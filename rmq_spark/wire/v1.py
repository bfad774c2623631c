"""Conversions between protocol messages and rocketlite's value types.

Used by both ends of the wire (broker servicers and client), so each mapping lives once.
"""

from __future__ import annotations

from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, messaging_pb2

_PULL_STATUS_TO_PB = {
    PullStatus.FOUND: messaging_pb2.PULL_STATUS_FOUND,
    PullStatus.NO_NEW_MSG: messaging_pb2.PULL_STATUS_NO_NEW_MSG,
    PullStatus.NO_MATCHED_MSG: messaging_pb2.PULL_STATUS_NO_MATCHED_MSG,
    PullStatus.OFFSET_ILLEGAL: messaging_pb2.PULL_STATUS_OFFSET_ILLEGAL,
}
_PULL_STATUS_FROM_PB: dict[int, PullStatus] = {int(v): k for k, v in _PULL_STATUS_TO_PB.items()}


def mq_to_pb(mq: MessageQueue) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)


def mq_from_pb(pb: common_pb2.MessageQueue) -> MessageQueue:
    return MessageQueue(pb.topic, pb.broker_name, pb.queue_id)


def pull_status_to_pb(status: PullStatus) -> int:
    return _PULL_STATUS_TO_PB[status]


def pull_status_from_pb(value: int) -> PullStatus:
    return _PULL_STATUS_FROM_PB[value]
