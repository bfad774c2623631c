"""The push consumer: group membership, rebalance, queue leases, listeners, retry.

>>> from rmq_spark.client.push import PushConsumer, ConsumeStatus     # doctest: +SKIP
"""

from rmq_spark.client.push.config import MessageModel, PushConsumerConfig
from rmq_spark.client.push.consumer import PushConsumer
from rmq_spark.client.push.listener import (
    ConsumeContext,
    ConsumeStatus,
    OrderlyContext,
    OrderlyStatus,
)
from rmq_spark.client.push.message import ReceivedMessage

__all__ = [
    "ConsumeContext",
    "ConsumeStatus",
    "MessageModel",
    "OrderlyContext",
    "OrderlyStatus",
    "PushConsumer",
    "PushConsumerConfig",
    "ReceivedMessage",
]
