"""The client side of RocketMQ's remoting protocol: a connection many threads share
(:mod:`.transport`), a client that finds brokers through a name server and pulls, reads
and commits offsets there (:mod:`.client`), and a producer with rocketlite's ``Message``
(:mod:`.producer`). It reads Apache RocketMQ clusters and
rocketlite's remoting port alike."""

from rmq_spark.client.remoting.client import (
    PendingPull,
    PullAnswer,
    RemotingClient,
    Route,
    parse_route,
)
from rmq_spark.client.remoting.producer import RemotingProducer
from rmq_spark.client.remoting.transport import RemotingConnection, RemotingError

__all__ = [
    "PendingPull",
    "PullAnswer",
    "RemotingClient",
    "RemotingConnection",
    "RemotingError",
    "RemotingProducer",
    "Route",
    "parse_route",
]
