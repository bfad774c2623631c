"""The broker: a thin gRPC shell over the store (``rmq_spark.store``).

>>> server, port = create_server(BrokerConfig(store_dir="/tmp/b", port=0))  # doctest: +SKIP
>>> server.start(); ...; server.stop()                                      # doctest: +SKIP
"""

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.server import BrokerServer, create_server

__all__ = ["BrokerConfig", "BrokerServer", "create_server"]
