"""The RocketMQ 5 gRPC protocol (``apache.rocketmq.v2``), served beside ``rocketlite.v1``.

Its message stubs come from the official RocketMQ 5 Python client (the package
``rocketmq-python-client``, installed with ``pip install rmq-spark[rocketmq5]``); without
it the broker serves ``rocketlite.v1`` alone and says so in one log line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

    from rmq_spark.broker.core.broker import Broker
    from rmq_spark.broker.v2.service import MessagingServiceV2
    from rmq_spark.broker.workers import Workers

log = logging.getLogger("rmq_spark.broker")

INSTALL_HINT = "pip install 'rmq-spark[rocketmq5]'"


def available() -> bool:
    try:
        import rocketmq.grpc_protocol  # noqa: F401
    except ImportError:
        return False
    return True


def add_to_server(
    server: grpc.aio.Server, broker: Broker, workers: Workers
) -> MessagingServiceV2 | None:
    """Register the v2 service on ``server``; returns it, or None (not installed)."""
    if not available():
        log.info(
            "RocketMQ 5 clients (apache.rocketmq.v2) are not served: the package "
            "rocketmq-python-client is not installed (%s)",
            INSTALL_HINT,
        )
        return None
    from rocketmq.grpc_protocol import service_pb2_grpc

    from rmq_spark.broker.v2.service import MessagingServiceV2

    service = MessagingServiceV2(broker, workers)
    service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
    return service
