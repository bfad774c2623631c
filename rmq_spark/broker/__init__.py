"""The broker: three protocol front-ends over one broker core and one RocketMQ-format store.

* :mod:`.v1`, :mod:`.v2` and :mod:`.remoting` are the front-ends (rocketlite.v1 and
  RocketMQ 5 over gRPC, RocketMQ's remoting protocol): each decodes its requests, calls the
  core and encodes the answers.
* :mod:`.core` is the protocol-neutral core: the broker's state, the write path, pulls with
  long polling, offsets, and the one table from errors to each protocol's codes.
* :mod:`.delivery` (delay levels, timer messages, retries and send-backs),
  :mod:`.transactions` (half messages and their checks), :mod:`.membership` (groups, queue
  locks, subscription groups) and :mod:`.sink_transactions` (the Spark sink's staged
  batches) are the services behind the core.
* :mod:`.server` and :mod:`.__main__` start it all; :mod:`.config` holds its settings.

>>> server, port = create_server(BrokerConfig(store_dir="/tmp/b", port=0))  # doctest: +SKIP
>>> server.start(); ...; server.stop()                                      # doctest: +SKIP
"""

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.server import BrokerServer, create_server

__all__ = ["BrokerConfig", "BrokerServer", "create_server"]
