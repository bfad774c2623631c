"""The rocketlite client: producer, pull and push consumers and admin over the gRPC protocol.

Every client takes the list of broker endpoints (there is no name server) and merges what
the brokers say about each topic.

>>> from rmq_spark.client import Admin, Producer, PullConsumer     # doctest: +SKIP
>>> endpoints = "127.0.0.1:10911,127.0.0.1:10912"                  # doctest: +SKIP
>>> Admin(endpoints).create_topic("orders", queues=4)              # doctest: +SKIP
>>> Producer(endpoints).send("orders", b"hello", tags="TagA")      # doctest: +SKIP
>>> consumer = PullConsumer(endpoints, group="g1", subscription="TagA")  # doctest: +SKIP
>>> consumer.assign(consumer.queues("orders")); consumer.poll(timeout_ms=1000)  # doctest: +SKIP
"""

from rmq_spark.client.admin import AclEntryInfo, Admin, BrokerInfo, TopicInfo, UserInfo
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import ClientConfig, Connection, RetryPolicy, error_from_rpc
from rmq_spark.client.consumer import ConsumeFrom, ConsumerConfig, PullConsumer, PullResult
from rmq_spark.client.endpoints import Endpoints, parse_endpoint
from rmq_spark.client.message import Message, SendResult, new_unique_key
from rmq_spark.client.offsets import CommittedOffset, QueueOffsets, QueueProgress
from rmq_spark.client.producer import Producer, ProducerConfig
from rmq_spark.client.push import (
    ConsumeContext,
    ConsumeStatus,
    OrderlyContext,
    OrderlyStatus,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
)
from rmq_spark.client.route import BrokerRoute, RouteTable, TopicRoute, merge_route
from rmq_spark.client.selector import RoundRobinSelector, select_by_sharding_key

__all__ = [
    "AclEntryInfo",
    "Admin",
    "BrokerInfo",
    "BrokerRoute",
    "ClientConfig",
    "Cluster",
    "CommittedOffset",
    "Connection",
    "ConsumeContext",
    "ConsumeFrom",
    "ConsumeStatus",
    "ConsumerConfig",
    "Endpoints",
    "Message",
    "OrderlyContext",
    "OrderlyStatus",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "PushConsumerConfig",
    "QueueOffsets",
    "QueueProgress",
    "ReceivedMessage",
    "RetryPolicy",
    "RoundRobinSelector",
    "RouteTable",
    "SendResult",
    "TopicInfo",
    "TopicRoute",
    "UserInfo",
    "error_from_rpc",
    "merge_route",
    "new_unique_key",
    "parse_endpoint",
    "select_by_sharding_key",
]
